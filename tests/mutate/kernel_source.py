"""A small FlyDSL kernel for the mutation tests, written to a temporary file per test.

Two waves share a 3-slot LDS ring (prologue fills slots 0..1, each iteration reads slot
`it % NB` of the other wave's lanes and writes slot `(it + NB - 1) % NB`), published by
a raw split barrier with an explicit `s_wait_dscnt(0)`; lane 0 of each wave also
publishes a flag the other wave reads at the end. It speaks the campaign protocol itself
(`ldssan_cases`), like a user's kernel would.
"""

from __future__ import annotations

RING_KERNEL = '''\
import os
os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx1250")
os.environ.setdefault("ARCH", "gfx1250")

import numpy as np
import torch
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import range_constexpr

N = 64      # 2 waves of 32 lanes
NB = 3      # ring slots
STEPS = 4


@fx.struct
class _Smem:
    ring: fx.Array[fx.Int32, NB * N, 16]
    flag: fx.Array[fx.Int32, 2, 16]


@flyc.kernel
def ring_kernel(X: fx.Tensor, Out: fx.Tensor):
    tid = fx.thread_idx.x
    wave = tid // 32
    smem = fx.SharedAllocator().allocate(_Smem).peek()
    ring = smem.ring.view(fx.make_layout(NB * N, 1))
    flag = smem.flag.view(fx.make_layout(2, 1))
    for s in range_constexpr(NB - 1):
        fx.memref_store(X[tid] + s, ring, s * N + tid)
    if tid % 32 == 0:
        fx.memref_store(wave + 100, flag, wave)
    fx.gpu.barrier()
    for it in range(STEPS):
        v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)
        fx.memref_store(v + 1, ring, ((it + NB - 1) % NB) * N + tid)
        fx.rocdl.s_wait_dscnt(0)
        fx.rocdl.s_barrier_signal(-1)
        fx.rocdl.s_barrier_wait(-1)
    last = (STEPS - 1 + NB - 1) % NB
    Out[tid] = fx.memref_load(ring, last * N + tid) + fx.memref_load(flag, 1 - wave)


@flyc.jit
def launch(X: fx.Tensor, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    ring_kernel(X, Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def reference(x):
    x = np.asarray(x, dtype=np.int64)
    ring = {s: x + s for s in range(NB - 1)}
    tid = np.arange(N)
    for it in range(STEPS):
        ring[(it + NB - 1) % NB] = ring[it % NB][(tid + 32) % N] + 1
    return ring[(STEPS - 1 + NB - 1) % NB] + np.where(tid // 32 == 0, 101, 100)


def ldssan_cases():
    from ldssan.mutate import Case

    x = torch.arange(N, dtype=torch.int32) * 7
    ref = reference(x.numpy())

    def run(mod):
        out = torch.zeros(N, dtype=torch.int32)
        mod.launch(x, out)
        return out

    return [Case("ring", run=run, check=lambda out: bool(np.array_equal(out.numpy(), ref)))]
'''


def line_of(text: str, source: str = RING_KERNEL) -> int:
    """1-based line of the one source line whose stripped text is `text`."""
    hits = [i + 1 for i, line in enumerate(source.splitlines()) if line.strip() == text]
    assert len(hits) == 1, (text, hits)
    return hits[0]
