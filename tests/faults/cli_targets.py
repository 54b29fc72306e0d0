"""FILE::FUNC targets for the command-line fault tests (tests/faults/test_cli_*.py):
functions that need arguments, raise, exit, launch nothing, record that they ran, a kernel
whose LDS the gfx1250 backend refuses, and a tiny kernel whose output `ldssan rows` checks."""

import os

import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from tests.isa import split_kernels

N = 64
TOO_MUCH_LDS = 100_000  # int32 words: 400 000 bytes, over gfx1250's 327 680


@flyc.kernel
def _big_lds(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, TOO_MUCH_LDS]).peek()
    lds[tid] = fx.Int32(tid)
    fx.gpu.barrier()
    Out[tid] = lds[(tid + 1) % N]


@flyc.jit
def _launch_big_lds(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _big_lds(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def too_much_lds():
    _launch_big_lds(torch.zeros(N, dtype=torch.int32))


def needs_arguments(rows, cols=4):
    return torch.zeros(rows, cols)


def raises():
    raise ValueError("bad input shape")  # RAISES


def exits():
    raise SystemExit(3)


def launches_nothing():
    return torch.zeros(4)


def tiny():
    """One workgroup of two waves (clean): a fast `ldssan rows` target."""
    out = torch.zeros(N, dtype=torch.int32)
    split_kernels._waited(out)
    return out


def tiny_wrong_reference():
    """What `tiny` writes, plus one: differs from it on every run, identically."""
    return (torch.arange(N, dtype=torch.int32) + 1) % N * 10 + 1


def marks_that_it_ran():
    """Creates the file $LDSSAN_TEST_MARK, then launches `tiny`: shows whether FUNC was called."""
    open(os.environ["LDSSAN_TEST_MARK"], "w").close()
    split_kernels.launch_waited()
