"""The "not a sync bug" criterion (ldssan/mutate/syncbug.py) decided condition by condition:
no racing pair, the clean sync skeleton or a stronger one (no site gone, no copy added, no
sync statement edited), and a wrong output under every schedule."""

from __future__ import annotations

from ldssan.mutate.records import MutantRecord, summarize
from ldssan.mutate.syncbug import skeleton_change, sync_bug_reason

CLEAN = {"barrier|gpu.barrier|k.py|40": 2, "wait|rocdl.s.wait.tensorcnt|k.py|39": 2,
         "tdm_load|rocdl.tensor.load.to.lds|ring.py|293": 3}


def _rec(edit_before: str = "if lane == 0:", *, fails: int = 8, launches: int = 8, sanitizer=False, lint=False):
    rec = MutantRecord("m:1", "drop-guard", 1, "", "", [{"line": 1, "before": edit_before, "after": "if True:"}])
    rec.sanitizer, rec.lint, rec.output_fails, rec.output_launches = sanitizer, lint, fails, launches
    return rec


def test_skeleton_same_or_only_more_waits_and_barriers():
    assert skeleton_change(CLEAN, dict(CLEAN)) is None
    stronger = dict(CLEAN, **{"barrier|gpu.barrier|k.py|40": 3, "wait|rocdl.s.wait.tensorcnt|k.py|39": 3})
    assert skeleton_change(CLEAN, stronger) is None  # an extra drain iteration: one more wait and barrier


def test_skeleton_with_a_site_gone_or_a_copy_added_is_a_change():
    gone = dict(CLEAN, **{"barrier|gpu.barrier|k.py|40": 1})
    assert "barrier site (gpu.barrier, k.py:40) is gone (2 -> 1)" in skeleton_change(CLEAN, gone)
    more_copies = dict(CLEAN, **{"tdm_load|rocdl.tensor.load.to.lds|ring.py|293": 4})  # a prologue refilled early
    assert "tdm_load site is added" in skeleton_change(CLEAN, more_copies)
    new_fence = dict(CLEAN, **{"fence|llvm.fence|k.py|12": 1})
    assert "fence site is added" in skeleton_change(CLEAN, new_fence)


def test_each_condition_of_the_criterion():
    assert sync_bug_reason(_rec(), CLEAN, dict(CLEAN)) is None  # all three hold
    assert sync_bug_reason(_rec(sanitizer=True), CLEAN, CLEAN) == "a runtime or lint rule fired"
    assert sync_bug_reason(_rec(lint=True), CLEAN, CLEAN) == "a runtime or lint rule fired"
    # a changed wait count keeps its site but not its meaning
    why = sync_bug_reason(_rec("fx.rocdl.s_wait_dscnt(0)"), CLEAN, CLEAN)
    assert why == "the edit changes the wait statement on line 1"
    assert "is gone" in sync_bug_reason(_rec(), CLEAN, {})
    # a failure under some schedules only depends on the interleaving: not a value change
    assert "6/8 launches only" in sync_bug_reason(_rec(fails=6), CLEAN, CLEAN)
    # a store written before skeletons were kept cannot decide: never "not a sync bug"
    assert "no sync skeleton" in sync_bug_reason(_rec(), None, CLEAN)


def test_summary_counts_not_a_sync_bug_apart_from_the_sanitizer_target():
    killed_san = _rec(sanitizer=True)
    killed_san.status = "killed"
    value = _rec()
    value.status, value.not_sync_bug = "killed", "not a sync bug: ..."
    missed = _rec(fails=3)
    missed.status, missed.missed_sync = "killed", "missed sync bug? ..."
    s = summarize([killed_san, value, missed], 1.0)
    assert (s["not_sync_bug"], s["missed_sync_bug"]) == (1, 1)
    # the value change is left out of the sanitizer's target; the missed one counts against it
    assert (s["killed_by_sanitizer_or_lint_sync"]["k"], s["killed_by_sanitizer_or_lint_sync"]["n"]) == (1, 2)


def _outcome(fails: int, launches: int, sync: dict, error: str = ""):
    from ldssan.mutate.worker import Outcome

    runs = [{"case": "c", "policy": f"p{i}", "ok": (False if i < fails else (None if error else True)),
             "error": error if i >= fails else ""} for i in range(launches)]
    return Outcome("k", "m:1", "ran", launches=runs, sync=sync)


def test_classify_marks_output_only_kills_and_raising_survivors():
    from ldssan.mutate.campaign import classify

    schedule = [f"p{i}" for i in range(4)]
    value = classify(_rec(), _outcome(4, 4, dict(CLEAN)), schedule, clean_sync=CLEAN)
    assert value.status == "killed" and value.not_sync_bug.startswith("not a sync bug") and not value.missed_sync
    gone = classify(_rec(), _outcome(4, 4, {}), schedule, clean_sync=CLEAN)
    assert gone.missed_sync.startswith("missed sync bug? a barrier site") and not gone.not_sync_bug
    # no wrong output, but a launch raised: a survivor whose reason says so
    raised = classify(_rec(), _outcome(0, 4, dict(CLEAN), error="EmuMemoryError: LDS access out of bounds"),
                      schedule, clean_sync=CLEAN)
    assert raised.status == "survived" and "4 of 4 output-check launches raised" in raised.reason
    assert "possible missed sync bug" in raised.reason


def test_a_sync_site_may_go_only_with_all_of_its_function():
    # the clean kernel builds _digit_ranks (its barrier, line 151, and a scan access through it);
    # the mutant takes a trace-time branch the other way and builds none of it
    clean = {"barrier|gpu.barrier|k.py|151": 8, "owner|k.py|151|_digit_ranks": 1, "fn|k.py|_digit_ranks": 16,
             "fn|k.py|_sort": 40, "barrier|gpu.barrier|k.py|377": 0}
    other_path = {"barrier|gpu.barrier|k.py|377": 8, "fn|k.py|_sort": 30}
    assert skeleton_change(clean, other_path) is None
    # the same barrier gone while its function is still built: a weaker skeleton
    unsynced = dict(other_path, **{"fn|k.py|_digit_ranks": 8})
    assert "barrier site (gpu.barrier, k.py:151) is gone" in skeleton_change(clean, unsynced)


def test_schedule_dependence_is_per_case():
    from ldssan.mutate.syncbug import schedule_dependence

    def runs(case, oks):
        return [{"case": case, "policy": f"p{i}", "ok": ok, "error": ""} for i, ok in enumerate(oks)]

    # one case always wrong, the other always right: the inputs differ, not the schedule
    assert schedule_dependence(runs("a", [False] * 4) + runs("b", [True] * 4)) is None
    assert "case a failed on 3/4 launches only" in schedule_dependence(runs("a", [False, False, False, True]))
    raised = runs("a", [False] * 3) + [{"case": "a", "policy": "p3", "ok": None, "error": "X: y"}]
    assert "case a failed on 4/4" in schedule_dependence(raised)
    rec = _rec(fails=4, launches=8)
    assert sync_bug_reason(rec, CLEAN, dict(CLEAN), runs("a", [False] * 4) + runs("b", [True] * 4)) is None
