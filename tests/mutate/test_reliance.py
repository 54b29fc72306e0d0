"""The reliance table (ldssan/mutate/reliance.py) and the survivor classes built on it
(ldssan/mutate/syncbug.py `survivor_class`): which conflicting cross-wave pairs a barrier
orders, which a deletion or move leaves unordered, and the independent race check; then the
same on real launches, where it must agree with the engine."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ldssan.mutate.records import MutantRecord
from ldssan.mutate.reliance import _Batch, affected, reliance
from ldssan.mutate.syncbug import survivor_class
from ldssan.scoped import scoped_items

READ, WRITE, ATOMIC = 1, 2, 3
SITES = {1: ("ds_write", 10), 2: ("ds_read", 12), 3: ("ds_write", 14), 7: ("barrier", 11), 8: ("barrier", 13)}


def _batch(events, instances, copies=0) -> _Batch:
    """Two waves of 32 lanes; `events`: (wave, site, op, nsig, nwait, lane, byte); lane `lane`
    of the wave accesses 4 bytes at `byte`."""
    table = [{"id": i, "kind": k, "op": "", "file": "k.py", "line": ln} for i, (k, ln) in SITES.items()]
    b = _Batch(json.dumps(table), 2, [0, 0], [0, 0], dict(instances), copies=copies)
    for wave, site, op, s, t, lane, byte in events:
        addr, mask = np.zeros(32, np.int64), np.zeros(32, bool)
        addr[lane], mask[lane] = byte, True
        b.events.append((wave, site, op, s, t, addr, mask, 4))
    return b


# wave 0 writes byte 0 (line 10), barrier line 11, wave 1 reads it (line 12), barrier line 13,
# wave 1 overwrites it (line 14)
PUBLISH = [(0, 1, WRITE, 0, 0, 0, 0), (1, 2, READ, 1, 1, 5, 0), (1, 3, WRITE, 2, 2, 5, 0)]


def test_a_pair_relies_on_the_only_barrier_between_its_accesses():
    t = reliance([_batch(PUBLISH, {1: 7, 2: 8})])
    assert t["barriers"] == {"k.py:11": 1, "k.py:13": 1}
    # the read relies on line 11; the overwrite is ordered after the write by 11 and 13 together
    assert t["pairs"] == [{"barrier": ["k.py:11"], "before": ["k.py:10"], "after": ["k.py:12"], "kind": "raw",
                           "bytes": 4}]
    assert t["unordered"] == 0 and t["copies"] == 0 and t["skipped"] == ""


def test_one_wave_or_two_reads_or_two_atomics_are_no_pair():
    same_wave = [(0, 1, WRITE, 0, 0, 0, 0), (0, 2, READ, 1, 1, 3, 0)]
    reads = [(0, 2, READ, 0, 0, 0, 0), (1, 2, READ, 1, 1, 0, 0)]
    atomics = [(0, 1, ATOMIC, 0, 0, 0, 0), (1, 3, ATOMIC, 0, 0, 0, 0)]  # same phase, and still no race
    for events in (same_wave, reads, atomics):
        t = reliance([_batch(events, {1: 7})])
        assert t["pairs"] == [] and t["unordered"] == 0, events


def test_the_independent_check_finds_what_no_barrier_orders():
    racy = [(0, 1, WRITE, 0, 0, 0, 0), (1, 2, READ, 0, 0, 5, 2)]  # overlapping bytes 2..3, one phase
    assert reliance([_batch(racy, {})])["unordered"] == 2
    atomic_vs_read = [(0, 1, ATOMIC, 0, 0, 0, 0), (1, 2, READ, 0, 0, 0, 0)]
    assert reliance([_batch(atomic_vs_read, {})])["unordered"] == 4
    # between its signal and its wait an access is in both phases: it races the next phase too
    split = [(0, 1, WRITE, 1, 0, 0, 0), (1, 2, READ, 1, 1, 0, 0)]
    assert reliance([_batch(split, {1: 7})])["unordered"] == 4


def test_a_loop_of_one_barrier_is_one_run():
    # the barrier at line 11 runs twice in a row; the pair spans both instances and relies on it
    t = reliance([_batch([(0, 1, WRITE, 0, 0, 0, 0), (1, 2, READ, 2, 2, 0, 0)], {1: 7, 2: 7})])
    assert [(p["barrier"], p["kind"]) for p in t["pairs"]] == [(["k.py:11"], "raw")]


def _edit(line, before, after="pass  # ldssan variant: deleted"):
    return {"line": line, "before": before, "after": after}


def test_affected_by_a_deletion_and_by_each_move():
    t = reliance([_batch(PUBLISH, {1: 7, 2: 8})])
    hit, n = affected(t, "/x/k.py", "delete-sync", [_edit(11, "fx.gpu.barrier()")])
    assert n == 1 and [p["after"] for p in hit] == [["k.py:12"]]
    hit, n = affected(t, "/x/k.py", "delete-sync", [_edit(13, "fx.gpu.barrier()")])
    assert (hit, n) == ([], 1)  # nothing relies on line 13 alone
    # the barrier moved below line 12 (the reader): the read loses it
    move = [_edit(11, "fx.gpu.barrier()", "x = f()"), _edit(12, "x = f()", "fx.gpu.barrier()")]
    assert len(affected(t, "k.py", "wait-after-consumer", move)[0]) == 1
    # the writer (line 10) moved below the barrier: the pair loses it; another statement would not
    sunk = [_edit(10, "buf[i] = v", "fx.gpu.barrier()"), _edit(11, "fx.gpu.barrier()", "buf[i] = v")]
    assert len(affected(t, "k.py", "store-below-barrier", sunk)[0]) == 1
    other = [dict(e, line=e["line"] + 20) for e in sunk]
    assert affected(t, "k.py", "store-below-barrier", other) == ([], 0)


def test_affected_refuses_what_the_table_cannot_judge():
    t = reliance([_batch(PUBLISH, {1: 7, 2: 8})])
    assert affected(t, "k.py", "delete-sync", [_edit(11, "fx.rocdl.s_wait_dscnt(0)")]) is None  # a wait
    assert affected(t, "k.py", "drop-guard", [_edit(11, "if x:", "if True:")]) is None
    with_copies = reliance([_batch(PUBLISH, {1: 7, 2: 8}, copies=3)])
    assert affected(with_copies, "k.py", "delete-sync", [_edit(13, "fx.gpu.barrier()")]) is None
    assert affected({}, "k.py", "delete-sync", [_edit(13, "fx.gpu.barrier()")]) is None


def _survivor(operator, edits):
    rec = MutantRecord("m:1", operator, edits[0]["line"], "", "", edits)
    rec.status, rec.sanitizer, rec.lint, rec.output_launches = "survived", False, False, 4
    return rec


SKELETON = {"barrier|gpu.barrier|k.py|11": 1, "barrier|gpu.barrier|k.py|13": 1}


def test_survivor_classes():
    t = reliance([_batch(PUBLISH, {1: 7, 2: 8})])
    guard = _survivor("drop-guard", [_edit(9, "if lane == 0:", "if True:")])
    assert survivor_class(guard, SKELETON, dict(SKELETON), t, "k.py")[0] == "no-sync-change"
    redundant = _survivor("delete-sync", [_edit(13, "fx.gpu.barrier()")])
    cls, why = survivor_class(redundant, SKELETON, {"barrier|gpu.barrier|k.py|11": 1}, t, "k.py")
    assert cls == "sync-redundant" and "line 13 ran 1 time(s)" in why and "one wave" in why
    needed = _survivor("delete-sync", [_edit(11, "fx.gpu.barrier()")])
    assert survivor_class(needed, SKELETON, {"barrier|gpu.barrier|k.py|13": 1}, t, "k.py") is None
    # ... unless the survivor's own launches show no unordered pair (it no longer makes that pair)
    quiet = reliance([_batch([(0, 1, WRITE, 0, 0, 0, 0)], {1: 8})])
    cls, why = survivor_class(needed, SKELETON, {"barrier|gpu.barrier|k.py|13": 1}, t, "k.py", quiet)
    assert cls == "sync-redundant" and "independent pair check" in why
    racy = reliance([_batch([(0, 1, WRITE, 0, 0, 0, 0), (1, 2, READ, 0, 0, 0, 0)], {})])
    assert survivor_class(needed, SKELETON, {}, t, "k.py", racy) is None
    # a killed mutant, or one whose output was wrong, is never a survivor class
    needed.output_fails = 1
    assert survivor_class(needed, SKELETON, {}, t, "k.py", quiet) is None


def test_summary_leaves_no_sync_change_out_of_the_target_and_counts_redundant_as_explained():
    from ldssan.mutate.records import summarize

    killed = _survivor("delete-sync", [_edit(1, "fx.gpu.barrier()")])
    killed.status, killed.sanitizer = "killed", True
    same = _survivor("drop-guard", [_edit(2, "if a:", "if True:")])
    same.survivor_class = "no-sync-change"
    redundant = _survivor("delete-sync", [_edit(3, "fx.gpu.barrier()")])
    redundant.survivor_class = "sync-redundant"
    unexplained = _survivor("delete-sync", [_edit(4, "fx.gpu.barrier()")])
    s = summarize([killed, same, redundant, unexplained], 1.0)
    assert (s["no_sync_change"], s["sync_redundant"], s["unexplained"]) == (1, 1, 1)
    assert (s["killed_by_sanitizer_or_lint_sync"]["k"], s["killed_by_sanitizer_or_lint_sync"]["n"]) == (1, 3)
    assert (s["explained_sync"]["k"], s["explained_sync"]["n"]) == (2, 3)


# -- on real launches: the probe agrees with the engine ----------------------------------------


def _probe(spec: str, mutant_id: str | None):
    from ldssan import hook
    from ldssan.mutate.campaign import plan
    from ldssan.mutate.reliance import Probe
    from ldssan.mutate.worker import _cases, _load, init_worker

    # a worker's set-up turns FlyDSL's disk cache off: only for this probe, not the session's later tests
    with scoped_items(os.environ, {"FLYDSL_RUNTIME_ENABLE_CACHE": "0"}):
        init_worker(None)
        target, mutants = plan(spec)
        edits = [] if mutant_id is None else list(next(m for m in mutants if m.id == mutant_id).edits)
        module = _load(target, edits, tag="mutant" if edits else "clean")
        codes = []
        with Probe() as probe:
            for case in _cases(target):
                with hook.sanitize("round-robin") as col:
                    case.run(module)
                codes += [v.code for v in col.violations]
    return probe.result(), codes, target.path


@pytest.mark.parametrize("mutant", ["delete-sync:205", "delete-sync:213"])
def test_rmsnorm_barriers_the_engine_needs_are_the_ones_pairs_rely_on(mutant):
    clean, codes, path = _probe("ldssan.kernels.rmsnorm", None)
    assert codes == [] and clean["unordered"] == 0 and clean["pairs"]
    line = int(mutant.split(":")[1])
    hit, runs = affected(clean, path, "delete-sync", [_edit(line, "fx.gpu.barrier()")])
    assert hit and runs > 0
    mutated, codes, _ = _probe("ldssan.kernels.rmsnorm", mutant)
    assert codes and mutated["unordered"] > 0  # the engine and the independent check both see it


def test_radix_rank_warp_private_barrier_orders_nothing():
    # line 189 separates a wave's read of its own offsets row from its leader lanes' update
    clean, codes, path = _probe("flydsl.extension.coop.block.radix_rank", None)
    assert codes == [] and clean["unordered"] == 0
    hit, runs = affected(clean, path, "delete-sync", [_edit(189, "barrier()")])
    assert hit == [] and runs > 0
    mutated, codes, _ = _probe("flydsl.extension.coop.block.radix_rank", "delete-sync:189")
    assert codes == [] and mutated["unordered"] == 0


def test_an_independent_race_free_run_lets_a_changed_skeleton_be_a_value_change():
    from ldssan.mutate.syncbug import sync_bug_reason

    rec = _survivor("drop-guard", [_edit(9, "if len(passes) == 1:", "if True:")])
    rec.status, rec.output_fails, rec.output_launches = "killed", 4, 8
    runs = [{"case": c, "policy": f"p{i}", "ok": c == "b", "error": ""} for c in "ab" for i in range(4)]
    fewer = {"barrier|gpu.barrier|k.py|11": 1}  # one pass fewer built: a barrier instance gone
    assert "is gone" in sync_bug_reason(rec, SKELETON, fewer, runs)
    quiet = reliance([_batch([(0, 1, WRITE, 0, 0, 0, 0), (1, 2, READ, 1, 1, 0, 0)], {1: 7})])
    assert sync_bug_reason(rec, SKELETON, fewer, runs, quiet) is None
    racy = reliance([_batch([(0, 1, WRITE, 0, 0, 0, 0), (1, 2, READ, 0, 0, 0, 0)], {})])
    assert "is gone" in sync_bug_reason(rec, SKELETON, fewer, runs, racy)
    copies = reliance([_batch([(0, 1, WRITE, 0, 0, 0, 0)], {1: 7}, copies=1)])  # the pair check cannot judge
    assert "is gone" in sync_bug_reason(rec, SKELETON, fewer, runs, copies)


def test_a_raw_split_survivor_names_the_pairs_its_fences_ordered():
    war = [(0, 2, READ, 0, 0, 0, 0), (1, 3, WRITE, 1, 1, 3, 0)]  # a read, the barrier, another wave's store
    t = reliance([_batch(war, {1: 7})])
    rec = _survivor("raw-split-barrier", [_edit(11, "fx.gpu.barrier()", "s_barrier_signal(-1); s_barrier_wait(-1)")])
    rec.reason = "no rule"
    assert survivor_class(rec, SKELETON, dict(SKELETON), t, "k.py") is None
    assert "4 WAR byte pair(s)" in rec.reason and "k.py:12 -> k.py:14" in rec.reason and "both fences" in rec.reason


def test_a_raw_split_survivor_is_never_explained_by_its_own_race_free_run():
    # its execution barrier stays: the pair check of its own launches cannot see lost fences
    war = [(0, 2, READ, 0, 0, 0, 0), (1, 3, WRITE, 1, 1, 3, 0)]
    rec = _survivor("raw-split-barrier", [_edit(11, "fx.gpu.barrier()", "s_barrier_signal(-1); s_barrier_wait(-1)")])
    quiet = reliance([_batch(war, {1: 7})])
    assert quiet["unordered"] == 0
    assert survivor_class(rec, SKELETON, dict(SKELETON), quiet, "k.py", quiet) is None
