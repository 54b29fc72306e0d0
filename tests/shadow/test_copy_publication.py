"""Copy-fed reads of another wave: a wait problem (LDS010/LDS011) or a publication problem
(LDS001, cause COPY_WAITED_UNPUBLISHED)?

The issuing wave's s_wait_tensorcnt / s_wait_asynccnt completes a copy for that wave only;
other waves see the data after a barrier whose signal came after that wait. When the wave
did wait and no such barrier separates the wait from the read, the fix is a barrier:
LDS001. When the read is ordered before the covering wait (the issuing wave's own read, or
a read after a barrier the wave signalled before waiting), the fix is the wait: LDS010, or
LDS011 with the count that would have sufficed. Every verdict is taken under every
scheduler policy and must be the same (`verdict`).
"""

from __future__ import annotations

import pytest

from ldssan.runtime.records import Cause, Rule

from .protocol import END_SITE, POLICIES, Program, found

RAW, DMA_RD, WEAK, NEVER = Rule.RAW_UNPUBLISHED, Rule.DMA_READ_BEFORE_WAIT, Rule.WAIT_TOO_WEAK, Rule.DMA_NEVER_WAITED
PUBLISH = Cause.COPY_WAITED_UNPUBLISHED
COPY, COPY2, READ, OWN_READ = 40, 41, 30, 20


def runs(prog: Program) -> list:
    out = [prog.run(p) for p in POLICIES]
    assert all(r == out[0] for r in out), "records differ between scheduler policies"
    return out[0]


def verdict(prog: Program) -> set:
    return found(runs(prog))


def _copy(b, kind: str, site: int, at: int):
    """One copy of 64 bytes into LDS at `at`: a TDM load or 16 lanes of 4-byte async loads."""
    if kind == "tdm":
        return b.tdm_load(site, at=at, size=64)
    return b.dma_load(site, at=at, lanes=range(16))


def _wait(b, kind: str, n: int):
    return b.wait_tensor(n) if kind == "tdm" else b.wait_async(n)


# -- (a)/(b) the issuing wave waited, no barrier after the wait: LDS001 --------------------------

@pytest.mark.parametrize("kind", ["tdm", "async"])
@pytest.mark.parametrize("issuer, reader", [(0, 1), (1, 0)])
@pytest.mark.parametrize("after_barrier", [False, True])
def test_waited_copy_read_by_another_wave_without_barrier_is_unpublished(kind, issuer, reader, after_barrier):
    prog = Program(waves=2)
    if after_barrier:  # the same inside a later phase: phase 0 must not matter
        prog.all().barrier(101)
    _wait(_copy(prog.wave(issuer), kind, COPY, 0), kind, 0).load(OWN_READ, at=0)
    prog.wave(reader).load(READ, at=16)
    assert verdict(prog) == {(RAW, PUBLISH, READ, COPY)}


@pytest.mark.parametrize("kind", ["tdm", "async"])
def test_fixed_twin_with_barrier_after_the_wait_is_clean(kind):
    prog = Program(waves=2)
    _wait(_copy(prog.wave(0), kind, COPY, 0), kind, 0).barrier()
    prog.wave(1).barrier().load(READ, at=16)
    assert verdict(prog) == set()


def test_copy_completed_by_wait_asyncmark_is_unpublished_too():
    prog = Program(waves=2)
    prog.wave(0).dma_load(COPY, at=0, lanes=range(16)).mark().wait_mark(0)
    prog.wave(1).load(READ, at=16)
    assert verdict(prog) == {(RAW, PUBLISH, READ, COPY)}


def test_waited_copy_read_in_the_readers_signal_wait_window():
    """The reader sits between its signal and its wait: LDS001, and the window is the cause
    (its fix, reading after the barrier wait, is the one to give)."""
    prog = Program(waves=2)
    prog.wave(0).tdm_load(COPY, at=0, size=64).wait_tensor(0).fence().signal().wait_barrier()
    prog.wave(1).fence().signal().load(READ, at=16).wait_barrier()
    assert verdict(prog) == {(RAW, Cause.SIGNAL_WAIT_WINDOW, READ, COPY)}


def test_exiting_issuer_publishes_nothing():
    """The issuer waits and ends; the reader passes later barriers alone: still LDS001."""
    prog = Program(waves=2)
    prog.wave(0).barrier().tdm_load(COPY, at=0, size=64).wait_tensor(0)
    prog.wave(1).barrier().barrier().load(READ, at=16)
    assert verdict(prog) == {(RAW, PUBLISH, READ, COPY)}


# -- the copy was never waited for in that phase: still a wait problem --------------------------

def test_copy_never_waited_and_no_barrier_stays_lds010():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(COPY, at=0, size=64)
    prog.wave(1).load(READ, at=16)
    assert verdict(prog) == {(DMA_RD, Cause.NO_BARRIER, READ, COPY), (NEVER, Cause.WAVE_END, COPY, END_SITE)}


def test_copy_waited_only_in_a_later_phase_stays_lds010():
    """The reader's phase ends before the issuer's wait: the read precedes the covering
    wait, so the read (not a missing barrier) is what is early."""
    prog = Program(waves=2)
    prog.wave(0).tdm_load(COPY, at=0, size=64).barrier(101).wait_tensor(0)
    prog.wave(1).load(READ, at=16).barrier(101)
    got = verdict(prog)
    assert got == {(DMA_RD, Cause.NO_BARRIER, READ, COPY)}


# -- (c) reads that precede the covering wait: LDS010 -------------------------------------------

@pytest.mark.parametrize("kind", ["tdm", "async"])
def test_issuing_wave_reads_before_its_wait(kind):
    prog = Program(waves=1)
    _wait(_copy(prog.wave(0), kind, COPY, 0).load(OWN_READ, at=16), kind, 0)
    assert verdict(prog) == {(DMA_RD, Cause.COPY_NOT_WAITED, OWN_READ, COPY)}


@pytest.mark.parametrize("use_after_wait", [False, True])
def test_wait_placed_after_the_barrier_stays_lds010(use_after_wait):
    """No wait before the barrier at all: the barrier came before the only wait; the fix is
    moving the wait up (LDS010 'waited only after its signal'), used afterwards or not."""
    prog = Program(waves=2)
    w0 = prog.wave(0).tdm_load(COPY, at=0, size=64).barrier().wait_tensor(0)
    if use_after_wait:
        w0.load(OWN_READ, at=0)
    prog.wave(1).barrier().load(READ, at=16)
    assert verdict(prog) == {(DMA_RD, Cause.COPY_WAITED_NOT_PUBLISHED, READ, COPY)}


# -- (d) a wait before the barrier, too weak: LDS011 with the count that suffices ---------------

@pytest.mark.parametrize("kind", ["tdm", "async"])
@pytest.mark.parametrize("final_wait", [False, True])
def test_wait_too_weak_before_barrier(kind, final_wait):
    prog = Program(waves=2, lds=512)
    w0 = prog.wave(0)
    _copy(_copy(_copy(w0, kind, COPY, 0), kind, COPY2, 64), kind, 42, 128)
    _wait(w0, kind, 2).barrier()  # leaves COPY2 (and 42) outstanding; 1 would have sufficed
    if final_wait:  # the covering wait right before the wave ends: no LDS use after it
        _wait(w0, kind, 0)
    prog.wave(1).barrier().load(READ, at=64)
    recs = runs(prog)
    weak = [(r.site, r.other_site, r.extra) for r in recs if r.rule == WEAK]
    assert weak == [(READ, COPY2, 1)]
    assert {(r.rule, r.cause) for r in recs} <= {(WEAK, Cause.NONE), (NEVER, Cause.WAVE_END)}


def test_wait_too_weak_fixed_twin_is_clean():
    prog = Program(waves=2, lds=512)
    w0 = prog.wave(0).tdm_load(COPY, at=0, size=64).tdm_load(COPY2, at=64, size=64).tdm_load(42, at=128, size=64)
    w0.wait_tensor(1).barrier().wait_tensor(0)
    prog.wave(1).barrier().load(READ, at=64)
    assert verdict(prog) == set()


# -- pipelines: which barrier is missing --------------------------------------------------------

def pipeline(*, stages=4, ready=True, count=1, waves=2) -> Program:
    """Three buffers, one copy per stage by wave 0, READY and REUSE barriers per stage:

        copy[0]; for i: copy[i+1]; wait(count); READY; read buf[i % 3]; REUSE

    Every wave reads the buffer. `count` 1 is right; 2 leaves copy[i] in flight (and no
    buffer is refilled while its copy is in flight)."""
    prog = Program(waves=waves, lds=3 * 128)
    w0 = prog.wave(0)
    w0.tdm_load(COPY, at=0, size=64)
    for i in range(stages):
        if i + 1 < stages:
            w0.tdm_load(COPY, at=((i + 1) % 3) * 128, size=64)
        w0.wait_tensor(count if i + 1 < stages else 0)
        if ready:
            prog.all().barrier(110)
        for w in range(waves):
            prog.wave(w).load(READ if w else OWN_READ, at=(i % 3) * 128 + 4 * w, lanes=range(8)).wait_ds(0)
        prog.all().barrier(111)
    return prog


@pytest.mark.parametrize("waves", [2, 4])
def test_pipeline_is_clean(waves):
    assert verdict(pipeline(waves=waves)) == set()


@pytest.mark.parametrize("waves", [2, 4])
def test_pipeline_without_ready_barrier_is_unpublished(waves):
    """wait(1) of stage i-1 was for copy[i-1]; copy[i] is completed by stage i's wait, which
    wave 0 then reads after -- the READY barrier between them is what is missing."""
    got = verdict(pipeline(ready=False, waves=waves))
    assert got == {(RAW, PUBLISH, READ, COPY)}


def test_pipeline_wait_count_too_weak_is_lds011():
    """wait(2) leaves copy[i] in flight at READY; the covering wait is the next stage's,
    after wave 0's own read -- the count, not a barrier, is the bug (wave 0's own read is
    LDS011 too)."""
    prog = pipeline(count=2)
    recs = runs(prog)
    assert {(r.rule, r.cause, r.site, r.other_site) for r in recs} == {
        (WEAK, Cause.NONE, READ, COPY), (WEAK, Cause.NONE, OWN_READ, COPY)}
    assert {r.extra for r in recs} == {1}  # wait(1) would have sufficed
