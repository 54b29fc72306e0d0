"""Small FlyDSL kernels for the `ldssan rows` tests: one workgroup of 2 waves per row.

`pair_norm`: y = x * (s[c] + s[c + 32]) with s = x^2 exchanged through LDS (c = column % 32).
With `buggy`, the barrier between the LDS stores and the cross-wave reads runs only for
rows whose valid width `W[row]` is at most 32 ("one wave holds the whole row"), so exactly
the wide rows race. `atomic_sum`: every thread adds its x to `Out[row]` with a global float
atomic, so the sum's rounding depends on which wave adds first: variation no LDS race explains.
"""

from __future__ import annotations

import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import const_expr

N = 64  # columns per row = threads per workgroup (2 waves)
HALF = 32


@flyc.kernel
def _pair_norm(X: fx.Tensor, W: fx.Tensor, Y: fx.Tensor, BUGGY: fx.Constexpr[bool]):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    s = fx.SharedAllocator().allocate(fx.Array[fx.Float32, N]).peek()
    x = X[row * N + tid]
    s[tid] = x * x
    if const_expr(BUGGY):
        if W[row] <= HALF:
            fx.gpu.barrier()
    else:
        fx.gpu.barrier()
    c = tid % HALF
    Y[row * N + tid] = x * (s[c] + s[c + HALF])


@flyc.jit
def _launch_pair(X: fx.Tensor, W: fx.Tensor, Y: fx.Tensor, M: fx.Constexpr[int], BUGGY: fx.Constexpr[bool],
                 stream: fx.Stream = fx.Stream(None)):
    _pair_norm(X, W, Y, BUGGY).launch(grid=(M, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.kernel
def _atomic_sum(X: fx.Tensor, Out: fx.Tensor):
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    fx.atomic_add(fx.add_offset(fx.get_iter(Out), row), X[row * N + tid])


@flyc.jit
def _launch_atomic(X: fx.Tensor, Out: fx.Tensor, M: fx.Constexpr[int], stream: fx.Stream = fx.Stream(None)):
    _atomic_sum(X, Out).launch(grid=(M, 1, 1), block=(N, 1, 1), stream=stream)


WIDTHS = (16, 64, 16, 48, 32, 64, 8, 40)  # rows 1, 3, 5, 7 are wide
WIDE_ROWS = [r for r, w in enumerate(WIDTHS) if w > HALF]


def _x(m: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    return torch.randn(m * N, generator=gen) + 2.0


def pair_norm(buggy: bool = True) -> torch.Tensor:
    m = len(WIDTHS)
    x = _x(m)
    w = torch.tensor(WIDTHS, dtype=torch.int32)
    y = torch.zeros(m * N)
    _launch_pair(x, w, y, m, buggy)
    return y.view(m, N)


def pair_norm_clean() -> torch.Tensor:
    return pair_norm(buggy=False)


def pair_norm_reference() -> torch.Tensor:
    x = _x(len(WIDTHS)).view(-1, N)
    s = x * x
    return x * (s[:, :HALF] + s[:, HALF:]).repeat(1, 2)


def atomic_sum() -> torch.Tensor:
    m = 4
    gen = torch.Generator().manual_seed(3)
    # magnitudes from 1e-3 to 1e7: float addition order changes the rounded sum
    x = torch.randn(m * N, generator=gen) * torch.logspace(-3, 7, m * N)[torch.randperm(m * N, generator=gen)]
    out = torch.zeros(m)
    _launch_atomic(x, out, m)
    return out.view(m, 1)
