"""Issue 29, finding 1, as the issue probed it: a 1024-thread FlyDSL kernel whose loop reads
the neighbour wave's word and writes its own in one barrier phase, 64 times, under
`ldssan.sanitize()`. It ended in an internal KeyError (wrapped as an EmulationError) and the
race report was lost; now the race is reported with its rule and both source lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx

import ldssan

N = 1024


@flyc.kernel
def neighbour_loop(Out: fx.Tensor, ITERS: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(0)
    for _i in range(ITERS):
        fx.gpu.barrier()
        lds[tid] = lds[(tid + 32) % N] + 1  # the neighbour wave's read, the own write: one phase
        fx.gpu.barrier()
    Out[tid] = lds[tid]


@flyc.jit
def launch(Out: fx.Tensor, ITERS: fx.Constexpr[int], THREADS: fx.Constexpr[int],
           stream: fx.Stream = fx.Stream(None)):
    neighbour_loop(Out, ITERS).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)


def _racy_line() -> int:
    lines = Path(__file__).read_text().splitlines()
    return 1 + next(i for i, text in enumerate(lines) if "lds[tid] = lds[(tid + 32) % N] + 1" in text)


@pytest.mark.parametrize("policy", ["lockstep", "round-robin"])
def test_1024_threads_64_iterations_report_the_race(policy):
    with ldssan.sanitize(policy) as col:
        launch(torch.zeros(N, dtype=torch.int32), 64, N)
    line = _racy_line()
    races = {(v.code, v.site.kind, v.site.line, v.other_site.kind, v.other_site.line) for v in col.violations}
    assert ("LDS001", "ds_read", line, "ds_write", line) in races, races
    assert ("LDS002", "ds_write", line, "ds_read", line) in races, races
    assert {v.code for v in col.violations} == {"LDS001", "LDS002"}
