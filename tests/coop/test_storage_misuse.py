"""A planted misuse of FlyDSL's cooperative primitives: two collectives share one LDS
temp storage without the block barrier their docs require between them ("Synchronize the
block before reusing storage for another collective"). A fast wave's second collective
then overwrites slots a slower wave is still reading in the first. ldssan must report it on
one launch, under every policy, naming this file's lines; with the barrier it is clean.

Two shapes of the misuse: a CUB-style union of a BlockReduce's and a BlockScan's storage,
and one BlockScan storage used twice."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx

from ldssan.report import render_text

from .harness import POLICIES, assert_equal, block_launcher, check_clean, line_of, run_sanitized, sample

C = fx.coop
BLOCK = 128  # four waves: each collective stages per-wave totals in LDS slots
SUM = fx.ReductionOp.ADD


def union_body(with_barrier: bool):
    def body(tid, A, _B, Total, Prefix):
        reduce = C.BlockReduce[fx.Int32, BLOCK, C.BlockReduceAlgorithm.WARP_REDUCTIONS]
        scan = C.BlockScan[fx.Int32, BLOCK, C.BlockScanAlgorithm.WARP_SCANS]
        temp = fx.SharedAllocator().allocate(
            fx.Union["reduce": reduce.SharedStorage, "scan": scan.SharedStorage])
        x = A[tid]
        Total[tid] = reduce(x, SUM, storage=temp.reduce.peek())  # <first: union>
        if with_barrier:
            fx.barrier()
        Prefix[tid] = scan.inclusive(x, SUM, storage=temp.scan.peek())  # <second: union>
    return body


def twice_body(with_barrier: bool):
    def body(tid, A, _B, Inclusive, Exclusive):
        scan = C.BlockScan[fx.Int32, BLOCK, C.BlockScanAlgorithm.WARP_SCANS]
        storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
        x = A[tid]
        Inclusive[tid] = scan.inclusive(x, SUM, storage=storage)  # <first: twice>
        if with_barrier:
            fx.barrier()
        Exclusive[tid] = scan.exclusive(x, SUM, storage=storage, init=fx.Int32(0))  # <second: twice>
    return body


def _reference(x: torch.Tensor, shape: str) -> list[torch.Tensor]:
    inclusive = x.long().cumsum(0)
    if shape == "union":
        return [x.long().sum().expand(BLOCK).int(), inclusive.int()]
    return [inclusive.int(), (inclusive - x.long()).int()]


SHAPES = {"union": union_body, "twice": twice_body}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_shared_storage_without_barrier_is_reported(shape):
    launch = block_launcher(BLOCK, SHAPES[shape](with_barrier=False))
    x = sample(fx.Int32, BLOCK, seed=9)
    first, second = line_of(__file__, f"# <first: {shape}>"), line_of(__file__, f"# <second: {shape}>")
    verdicts = {}
    for policy in POLICIES:
        _outs, report = run_sanitized(launch, [x], [torch.zeros_like(x)] * 2, policy)
        verdicts[policy] = {(v.code, v.site.line, v.other_site.line if v.other_site else None)
                            for v in report.violations}
        # The second collective's LDS store overwrites what the first one's loads still
        # need: a write-after-read reuse, this store against that load.
        war = [v for v in report.violations if v.code == "LDS002"]
        assert war, f"policy {policy}: expected LDS002, got\n{render_text(report)}"
        for v in war:
            assert v.site.file == __file__ and v.site.line == second, v.site
            assert v.other_site.file == __file__ and v.other_site.line == first, v.other_site
        text = render_text(report, width=200)
        assert f"test_storage_misuse.py:{second}" in text and f"test_storage_misuse.py:{first}" in text, text
        # Nothing unrelated: besides the overwrite, a slow wave's read in the first
        # collective may see the fast wave's write from the second (LDS001); both name the
        # two collectives' lines.
        assert {v.code for v in report.violations} <= {"LDS001", "LDS002"}, render_text(report)
        for v in report.violations:
            assert {v.site.line, v.other_site.line} == {first, second}, (v.code, v.site, v.other_site)
    # the verdict is the same under every schedule
    assert len({frozenset(v) for v in verdicts.values()}) == 1, verdicts


@pytest.mark.parametrize("shape", list(SHAPES))
def test_shared_storage_with_barrier_is_clean_and_exact(shape):
    launch = block_launcher(BLOCK, SHAPES[shape](with_barrier=True))
    x = sample(fx.Int32, BLOCK, seed=9)
    want = _reference(x, shape)

    def expect(outs, policy):
        for got, expected in zip(outs, want):
            assert_equal(got, expected, policy)

    check_clean(launch, [x], [torch.zeros_like(x)] * 2, expect)
