"""Kernels for LDS051 (a hand-written wait whose count, right for the IR's ops, leaves an
op outstanding in the compiled code). Both publish one LDS store with `s_wait_dscnt(2)`:
two LDS loads follow the store, so two younger ops leave it retired in the IR.
`merged_wait`: the loads read adjacent words, the backend merges them into one
`ds_load_2addr_b32`, and the wait retires nothing. `split_wait`: the loads' addresses do
not share a base, they stay two instructions, and the wait does what it says.
The loads read words their own wave stored (in order on dscnt, no barrier needed), so a
sanitized launch reports only the raw split barrier's lint and the ISA findings."""

import torch

import flydsl.compiler as flyc
import flydsl.expr as fx

N = 64  # two waves
W = 32  # wave size


@flyc.kernel
def merged_wait(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, 4 * N]).peek()
    lds[tid] = fx.Int32(tid)  # MEANT
    x = lds[(tid // W) * W + 2 * (tid % (W // 2))]
    y = lds[(tid // W) * W + 2 * (tid % (W // 2)) + 1]
    fx.rocdl.s_wait_dscnt(2)  # WAIT
    fx.rocdl.s_barrier_signal(-1)
    fx.rocdl.s_barrier_wait(-1)
    Out[tid] = lds[(tid + 1) % N] + x + y


@flyc.kernel
def split_wait(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, 4 * N]).peek()
    lds[tid] = fx.Int32(tid)
    x = lds[(tid // W) * W + (tid * 5) % W]
    y = lds[(tid // W) * W + (tid * 7) % W]
    fx.rocdl.s_wait_dscnt(2)
    fx.rocdl.s_barrier_signal(-1)
    fx.rocdl.s_barrier_wait(-1)
    Out[tid] = lds[(tid + 1) % N] + x + y


@flyc.jit
def _merged(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    merged_wait(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def _split(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    split_wait(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def launch_merged():
    _merged(torch.zeros(N, dtype=torch.int32))


def launch_split():
    _split(torch.zeros(N, dtype=torch.int32))
