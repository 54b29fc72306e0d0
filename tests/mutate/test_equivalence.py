"""Equivalence by construction: which diffs only strengthen synchronization (the stated
criterion of `ldssan.mutate.equivalence`), and a campaign that classifies such a survivor
as equivalent instead of counting it as missed."""

from __future__ import annotations

import pytest

from ldssan.mutate import CampaignConfig, run_campaign
from ldssan.mutate.campaign import classify
from ldssan.mutate.equivalence import strengthening, survivor_reason
from ldssan.mutate.records import MutantRecord
from ldssan.mutate.worker import Outcome

from .kernel_source import RING_KERNEL

_DELETED = "pass  # ldssan variant: deleted"
_FENCE = 'fx.memory_fence(syncscope="{}", ordering=fx.AtomicOrdering.{})'


def _one(before: str, after: str) -> list[dict]:
    return [{"line": 7, "before": before, "after": after}]


@pytest.mark.parametrize("before, after, why", [
    ("fx.rocdl.s_wait_dscnt(1)", "fx.rocdl.s_wait_dscnt(0)", "smaller wait count `1` -> `0`"),
    ("fx.rocdl.s_wait_tensorcnt(count=n)", "fx.rocdl.s_wait_tensorcnt(count=n - 1)", "smaller wait count `n` -> `n - 1`"),
    ("v = f(x)", "v = f(x); fx.rocdl.s_wait_dscnt(0)", "added wait `fx.rocdl.s_wait_dscnt(0)`"),
    ("fx.memref_store(v, lds, i)", "fx.memref_store(v, lds, i); fx.gpu.barrier()", "added barrier `fx.gpu.barrier()`"),
    (_FENCE.format("workgroup", "Release"), _FENCE.format("agent", "Release"), "fence scope 'workgroup' -> 'agent'"),
    (_FENCE.format("workgroup-one-as", "Release"), _FENCE.format("workgroup", "Release"),
     "fence scope 'workgroup-one-as' -> 'workgroup'"),
    (_FENCE.format("workgroup", "Release"), _FENCE.format("workgroup", "AcqRel"), "fence ordering release -> acqrel"),
    (_FENCE.format("workgroup", "AcqRel"), _FENCE.format("workgroup", "SeqCst"), "fence ordering acqrel -> seqcst"),
    (_FENCE.format("workgroup", "Release"), _FENCE.format("workgroup", "AcquireRelease"), None),  # unknown spelling
])
def test_strengthening_diffs(before, after, why):
    assert strengthening(_one(before, after)) == why


@pytest.mark.parametrize("before, after", [
    ("fx.rocdl.s_wait_dscnt(0)", "fx.rocdl.s_wait_dscnt(1)"),  # weaker
    ("fx.rocdl.s_wait_tensorcnt(count=n - 1)", "fx.rocdl.s_wait_tensorcnt(count=n)"),
    ("fx.rocdl.s_wait_dscnt(1)", "fx.rocdl.s_wait_tensorcnt(0)"),  # another counter
    ("fx.gpu.barrier()", _DELETED),  # a deletion
    ("v = f(x)", "v = f(x); fx.rocdl.s_barrier_signal(-1)"),  # a raw signal has no memory semantics
    ("v = f(x)", "v = f(x + 1); fx.rocdl.s_wait_dscnt(0)"),  # the old statement changed too
    ("v = f(x)", "fx.rocdl.s_wait_dscnt(0)"),  # the old statement dropped
    (_FENCE.format("agent", "Release"), _FENCE.format("workgroup", "Release")),  # narrower
    (_FENCE.format("workgroup", "Release"), _FENCE.format("agent-one-as", "Release")),  # wider but one AS
    (_FENCE.format("workgroup", "Release"), _FENCE.format("workgroup", "Acquire")),  # not comparable
    ("x = a + 1", "x = a + 2"),
])
def test_diffs_that_are_not_strengthening(before, after):
    assert strengthening(_one(before, after)) is None


def test_fence_orderings_as_strings():
    assert strengthening(_one('llvm.fence("release", "workgroup")', 'llvm.fence("acq_rel", "workgroup")')) \
        == "fence ordering release -> acq_rel"
    assert strengthening(_one('llvm.fence("seq_cst", "workgroup")', 'llvm.fence("acquire", "workgroup")')) is None


def test_a_move_is_never_a_strengthening():
    edits = [{"line": 7, "before": "fx.rocdl.s_wait_dscnt(0)", "after": "v = f(x)"},
             {"line": 8, "before": "v = f(x)", "after": "fx.rocdl.s_wait_dscnt(0)"}]
    assert strengthening(edits) is None


def _ran(edits, **outcome) -> MutantRecord:
    rec = MutantRecord("m", "wait-minus-one", 7, "", "", edits)
    launches = [{"case": "c", "policy": "round-robin", "ok": outcome.pop("ok", True), "error": ""}]
    return classify(rec, Outcome("k", "m", "ran", launches=launches, **outcome), ["round-robin"])


def test_only_survivors_are_reclassified():
    stronger = _one("fx.rocdl.s_wait_dscnt(1)", "fx.rocdl.s_wait_dscnt(0)")
    rec = _ran(stronger)
    assert rec.status == "equivalent" and not rec.counted and rec.reason == ""
    assert rec.equivalence == "strengthens synchronization: smaller wait count `1` -> `0`"
    # a strengthening that something still killed stays killed (e.g. it changed values)
    assert _ran(stronger, ok=False).status == "killed"
    v = {"code": "LDS001", "name": "raw-unpublished", "line": 7}
    assert _ran(stronger, violations=[v]).status == "killed"
    # a survivor that does not strengthen is listed with its reason
    weaker = _ran(_one("fx.rocdl.s_wait_dscnt(0)", "fx.rocdl.s_wait_dscnt(1)"))
    assert weaker.status == "survived" and weaker.counted and weaker.equivalence == ""
    assert weaker.reason == survivor_reason("wait-minus-one", 1) and "output correct on 1 launch" in weaker.reason


def test_lint_kills_only_count_findings_the_clean_kernel_lacks():
    lint = [{"code": "LDS040", "name": "missing-release", "line": 5, "other_line": 9}]
    rec = _ran(_one("a()", "b()"), lint=lint)
    assert rec.status == "killed" and rec.lint and rec.sanitizer is False
    rec = MutantRecord("m", "op", 7, "", "", _one("a()", "b()"))
    classify(rec, Outcome("k", "m", "ran", lint=lint,
                          launches=[{"case": "c", "policy": "p", "ok": True, "error": ""}]), ["p"],
             clean_lint=frozenset({("LDS040", 5, 9)}))
    assert rec.status == "survived" and rec.lint is False and rec.lint_rules == []


def test_campaign_classifies_a_smaller_wait_count_as_equivalent(write_kernel):
    """The ring kernel with an over-weak `s_wait_dscnt(1)` (harmless here): wait-minus-one
    makes it `(0)`; the mutant runs, nothing kills it, and it is equivalent by construction."""
    path = write_kernel(RING_KERNEL.replace("fx.rocdl.s_wait_dscnt(0)", "fx.rocdl.s_wait_dscnt(1)"), "weak_kernel")
    record = run_campaign([path], CampaignConfig(launches=1, jobs=1, timeout=60, operators=("wait-minus-one",)))
    (k,) = record.kernels
    assert k.status == "ran", k.message
    assert "LDS040" in [r["code"] for r in k.baseline["lint"]]  # the clean kernel's own warning: not a kill
    (m,) = k.mutants
    assert m.status == "equivalent" and m.sanitizer is False and m.output_fails == 0 and m.output_launches == 1
    assert m.equivalence == "strengthens synchronization: smaller wait count `1` -> `0`"
    s = record.summary()
    assert (s["equivalent"], s["equivalent_strengthening"], s["equivalent_ir"], s["counted"]) == (1, 1, 0, 0)
