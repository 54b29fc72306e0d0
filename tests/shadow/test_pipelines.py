"""Whole protocols of the bundled kernels in miniature, clean and with the one-line
mutations of docs/bug-patterns.md: the clean protocol is silent under every schedule, each
mutation is caught with the expected rule."""

from __future__ import annotations

import pytest

from ldssan.runtime.records import Cause, Rule

from .protocol import POLICIES, Program, found

SLOT = 128  # bytes per pipeline stage: A tile at +0, B tile at +64
C_BYTES = 64  # per-wave C staging, aliasing the arena from offset 0


def gemm(*, nb=3, ktiles=5, waves=4, extra_outstanding=0, prefetch_ahead=None, ready_barrier=True,
         tensor_wait=True, epilogue_reuse=True, epilogue_publish="gpu", final_wait=True) -> Program:
    """The gfx1250 TDM GEMM protocol: wave 0 loads A, wave 1 loads B (one TDM per stage),
    `pipeline_fence(n)` = tensor_wait(n) by the owners + gpu.barrier (READY+REUSE fused),
    prefetch into the slot freed by that barrier, C staged through LDS and TDM-stored."""
    prefetch_ahead = nb - 1 if prefetch_ahead is None else prefetch_ahead
    prog = Program(waves=waves, lds=max(nb * SLOT, waves * C_BYTES))
    W = [prog.wave(w) for w in range(waves)]

    def issue(stage):
        s = stage % nb
        W[0].tdm_load(40, at=s * SLOT, size=64)
        W[1].tdm_load(41, at=s * SLOT + 64, size=64)

    def pipeline_fence(n, barrier=True, wait=True):
        if wait:
            W[0].wait_tensor(n + extra_outstanding)
            W[1].wait_tensor(n + extra_outstanding)
        if barrier:
            prog.all().barrier(110)

    def compute(stage):
        s = stage % nb
        for w in range(waves):
            W[w].load(20, at=s * SLOT + 4 * w, lanes=range(4))
            W[w].load(21, at=s * SLOT + 64 + 4 * w, lanes=range(4)).wait_ds(0)

    for i in range(nb - 1):
        issue(i)
    for kt in range(ktiles - nb + 1):
        pipeline_fence(nb - 2, barrier=ready_barrier, wait=tensor_wait)
        compute(kt)
        if kt + prefetch_ahead < ktiles:
            issue(kt + prefetch_ahead)
    for j in range(nb - 1):
        pipeline_fence(nb - 2 - j, barrier=ready_barrier, wait=tensor_wait)
        compute(ktiles - nb + 1 + j)
    pipeline_fence(0, barrier=epilogue_reuse)  # REUSE of the whole arena before C staging
    for w in range(waves):
        W[w].store(30, at=w * C_BYTES, lanes=range(4), nbytes=16)
    if epilogue_publish == "gpu":
        prog.all().barrier(111)
    else:
        prog.all().raw_barrier(111)
    for w in range(waves):
        W[w].tdm_store(50, at=((w + 1) % waves) * C_BYTES, size=C_BYTES)  # a row slice another wave wrote
        if final_wait:
            W[w].wait_tensor(0)
    return prog


def verdict(prog: Program) -> set:
    runs = [prog.run(p) for p in POLICIES]
    assert all(r == runs[0] for r in runs)
    return found(runs[0])


def rules_of(got: set) -> set:
    return {(rule, cause) for rule, cause, _s, _o in got}


@pytest.mark.parametrize("nb", [2, 3, 4])
@pytest.mark.parametrize("waves", [2, 4])
def test_gemm_ring_is_clean(nb, waves):
    assert verdict(gemm(nb=nb, waves=waves, ktiles=nb + 2)) == set()


def test_gemm_outstanding_count_off_by_one_is_wait_too_weak():
    prog = gemm(extra_outstanding=1)
    got = verdict(prog)
    assert {(Rule.WAIT_TOO_WEAK, Cause.NONE, 20, 40), (Rule.WAIT_TOO_WEAK, Cause.NONE, 21, 41)} <= got
    weak = [r.extra for r in prog.run() if r.rule == Rule.WAIT_TOO_WEAK and r.site == 20]
    assert weak[0] == 1  # steady state: tensor_wait(nb-2) = 1 would have sufficed
    assert weak[-1] == 0  # last tail step: tensor_wait(0)


def test_gemm_without_tensor_wait():
    got = verdict(gemm(tensor_wait=False))
    assert (Rule.DMA_READ_BEFORE_WAIT, Cause.COPY_NOT_WAITED, 20, 40) in got


def test_gemm_without_ready_barrier():
    got = verdict(gemm(ready_barrier=False))
    # the owners still wait for each stage: only the publishing barrier is missing
    assert (Rule.RAW_UNPUBLISHED, Cause.COPY_WAITED_UNPUBLISHED, 20, 40) in got


def test_gemm_ring_overfill():
    """Refill of the slot being consumed: the readers had the slot's old stage (published),
    and the refilled stage is consumed in order later, so it is a refill too early (WAR) at
    the TDM issue, with the read as the other access."""
    got = verdict(gemm(prefetch_ahead=3))
    assert {g for g in got if g[0] != Rule.UNINIT_READ} == {
        (Rule.WAR_REUSE, Cause.NO_BARRIER, 40, 20), (Rule.WAR_REUSE, Cause.NO_BARRIER, 41, 21)}
    # the stage the over-fill skipped is read but never written
    assert {g[0] for g in got if g[0] == Rule.UNINIT_READ} == {Rule.UNINIT_READ}


def test_gemm_epilogue_without_reuse_barrier():
    """C staging overwrites ring bytes other waves still read; the C data is consumed in
    order later (the TDM store), so this is the arena re-purpose WAR, reported at the store."""
    got = verdict(gemm(epilogue_reuse=False))
    assert got == {(Rule.WAR_REUSE, Cause.NO_BARRIER, 30, 20), (Rule.WAR_REUSE, Cause.NO_BARRIER, 30, 21)}


def test_gemm_epilogue_bare_publish_barrier():
    got = verdict(gemm(epilogue_publish="raw"))
    assert rules_of(got) == {(Rule.RAW_UNPUBLISHED, Cause.BARE_BARRIER)}
    assert {(s, o) for _r, _c, s, o in got} == {(50, 30)}


def test_gemm_without_final_tensor_wait():
    got = verdict(gemm(final_wait=False))
    assert rules_of(got) == {(Rule.DMA_NEVER_WAITED, Cause.WAVE_END)}


# -- RMSNorm block_reduce (8 waves, lane 0 of each wave publishes a partial) ----------------------

def block_reduce(*, first="gpu", second="gpu", reuse_for_max=False) -> Program:
    prog = Program(waves=8, lds=64)
    waves = [prog.wave(w) for w in range(8)]
    for w, b in enumerate(waves):
        b.store(10, at=4 * w)  # s_red[wave] = partial
    for b in waves:
        b.barrier(100) if first == "gpu" else b.raw_barrier(100)
    waves[0].load(20, at=0, lanes=range(8)).wait_ds(0).store(11, at=0)  # total into s_red[0]
    for b in waves:
        if second == "gpu":
            b.barrier(101)
        elif second == "raw":
            b.raw_barrier(101)
    for b in waves:
        b.load(30, at=0, lanes=range(32), stride=0)
    if reuse_for_max:  # quant variant: block_reduce_max reuses s_red[0] with no barrier
        waves[0].wait_ds(0).store(12, at=0)
    return prog


def test_block_reduce_with_gpu_barriers_is_clean():
    assert verdict(block_reduce()) == set()


def test_block_reduce_raw_barrier_is_aiter_6344():
    got = verdict(block_reduce(first="raw"))
    assert rules_of(got) == {(Rule.RAW_UNPUBLISHED, Cause.BARE_BARRIER)}
    assert {(s, o) for _r, _c, s, o in got} == {(20, 10)}


def test_block_reduce_missing_broadcast_barrier():
    got = verdict(block_reduce(second=None))
    assert got == {(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, 30, 11)}


def test_block_reduce_slot_reuse_is_caught():
    """The latent reduction-slot reuse (docs/bug-patterns.md, drop-guard): same phase as the reads, so the
    canonical order names it a read racing the store."""
    got = verdict(block_reduce(reuse_for_max=True))
    assert got == {(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, 30, 12)}
