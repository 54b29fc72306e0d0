"""The campaign's missed sync bugs, reduced to their kernel, next to the control that shows
the diagnosis.

Coop campaign: `flydsl.extension.coop.block.histogram` delete-sync:48 (the barrier after the
counters are zeroed, before the atomic increments: the output check fails under `reverse`)
and `block.reduce` delete-sync:85 (the barrier after tid 0 zeroes the arrival counter,
before each wave's lane 0 takes an atomic ticket: a ticket read from an unzeroed counter
indexes LDS out of bounds under one schedule). Both are an unordered plain store and other
waves' atomics to the same bytes.

The engine used to miss them: it kept per byte and wave only the wave's *last* write, so
the zeroing wave's own atomic replaced its plain store and the other waves' atomics met an
atomic (exempt: atomics do not race atomics). It now keeps a wave's last plain write aside
while its slot holds a later atomic of that wave, and atomics check it (MODEL.md §4 step 4).
The control (the owner does not add) was reported before too.
"""

from __future__ import annotations

KERNEL = '''\
import os
os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx1250")
os.environ.setdefault("ARCH", "gfx1250")
import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr.llvm import atomic_add

N = 64  # two waves


@fx.struct
class _Smem:
    counter: fx.Array[fx.Int32, 4, 16]


def make(owner_adds: bool):
    @flyc.kernel
    def k(Out: fx.Tensor):
        tid = fx.thread_idx.x
        wave = tid // 32
        lane = tid % 32
        smem = fx.SharedAllocator().allocate(_Smem).peek()
        if tid == 0:
            smem.counter[0] = fx.Int32(0)  # INIT: no barrier publishes it
        if (lane == 0) & ((wave == 1) | owner_adds):
            atomic_add(smem.counter.ptr, fx.Int32(1))  # ADD
        fx.gpu.barrier()
        Out[tid] = smem.counter[0]

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        k(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)

    return launch
'''


def _lines_of(source: str) -> tuple[int, int]:
    lines = source.splitlines()
    return (next(i + 1 for i, t in enumerate(lines) if t.rstrip().endswith("# INIT: no barrier publishes it")),
            next(i + 1 for i, t in enumerate(lines) if t.rstrip().endswith("# ADD")))


def _races(tmp_path, owner_adds: bool) -> list[tuple]:
    import torch

    from ldssan import hook
    from ldssan.variants import load_variant

    path = tmp_path / "atomic_init.py"
    path.write_text(KERNEL)
    module = load_variant(str(path), [], tag="missed")
    with hook.sanitize("round-robin") as col:
        module.make(owner_adds)(torch.zeros(64, dtype=torch.int32))
    return [(v.code, v.site.line, v.other_site.line if v.other_site is not None else None) for v in col.violations]


def test_control_a_plain_store_then_another_waves_atomic_is_reported(tmp_path):
    init, add = _lines_of(KERNEL)
    assert _races(tmp_path, owner_adds=False) == [("LDS003", add, init)]


def test_the_owner_waves_atomic_does_not_hide_its_unpublished_store(tmp_path):
    init, add = _lines_of(KERNEL)
    assert _races(tmp_path, owner_adds=True) == [("LDS003", add, init)]
