"""ldssan.runtime.shadow: one minimal firing example and its fixed twin per rule.

Every program runs under all scheduler policies of `protocol.POLICIES`; `verdict()` also
asserts that they all put the very same records into the ring.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Ring, Rule
from ldssan.runtime.shadow import AccessKind, Counter, ShadowEngine

from .protocol import END_SITE, POLICIES, Program, Scheduler, found, lane0_at_zero


def verdict(prog: Program) -> set:
    runs = [prog.run(p) for p in POLICIES]
    for policy, recs in zip(POLICIES, runs):
        assert recs == runs[0], f"policy {policy} disagrees with {POLICIES[0]}"
    return found(runs[0])


RAW, WAR, WAW = Rule.RAW_UNPUBLISHED, Rule.WAR_REUSE, Rule.WAW
DMA_RD, WEAK, OVERLAP, NEVER = (Rule.DMA_READ_BEFORE_WAIT, Rule.WAIT_TOO_WEAK, Rule.DMA_OVERLAP,
                                Rule.DMA_NEVER_WAITED)


# -- LDS001 raw-unpublished ---------------------------------------------------------------------

def test_store_waitds_raw_barrier_load_is_clean():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).wait_ds(0).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == set()


def test_fenced_barrier_is_clean():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier()
    prog.wave(1).barrier().load(30, at=0)
    assert verdict(prog) == set()


def test_bare_barrier_publishes_nothing():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.BARE_BARRIER, 30, 10)}


def test_store_after_last_dswait_is_bare():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).wait_ds(0).store(11, at=4).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0).load(31, at=4)
    assert verdict(prog) == {(RAW, Cause.BARE_BARRIER, 31, 11)}


def test_dscnt_wait_too_weak_is_unpublished_store():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).store(11, at=64).wait_ds(1).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0).load(31, at=64)
    assert verdict(prog) == {(RAW, Cause.UNPUBLISHED_DS_STORE, 31, 11)}


def test_no_barrier_at_all():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).wait_ds(0)
    prog.wave(1).load(30, at=0)
    # A read racing a write in the same phase is RAW whichever runs first.
    assert verdict(prog) == {(RAW, Cause.NO_BARRIER, 30, 10)}


@pytest.mark.parametrize("wave_of_writer", [0, 1])
def test_window_read_is_unprotected(wave_of_writer):
    w, r = wave_of_writer, 1 - wave_of_writer
    prog = Program(waves=2)
    prog.wave(w).store(10, at=0).barrier()
    prog.wave(r).fence().signal().load(30, at=0).wait_barrier().fence("acquire")
    assert verdict(prog) == {(RAW, Cause.SIGNAL_WAIT_WINDOW, 30, 10)}


def test_window_write_is_unpublished():
    prog = Program(waves=2)
    prog.wave(0).signal().store(10, at=0).wait_ds(0).wait_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.SIGNAL_WAIT_WINDOW, 30, 10)}


@pytest.mark.parametrize("scope", ["workgroup-one-as", "wavefront", "one-as"])
def test_fence_that_emits_no_dscnt_wait_does_not_publish(scope):
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).fence("release", scope).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.BARE_BARRIER, 30, 10)}


@pytest.mark.parametrize("scope", ["workgroup", "agent", "", "cluster"])
def test_release_fence_publishes(scope):
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).fence("release", scope).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == set()


def test_non_fence_orderings_do_not_publish():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).fence("monotonic", "workgroup").raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.BARE_BARRIER, 30, 10)}


def test_load_and_store_counters_do_not_complete_ds():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).wait(Counter.LOAD, 0).wait(Counter.STORE, 0).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.BARE_BARRIER, 30, 10)}


def test_exiting_wave_publishes_nothing():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).wait_ds(0)  # then s_endpgm: it drops the barrier
    prog.wave(1).barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.NO_BARRIER, 30, 10)}


def test_same_wave_store_load_never_reported():
    prog = Program(waves=1)
    prog.wave(0).store(10, at=0).load(11, at=0).store(12, at=0, lanes=range(32), stride=0)
    prog.wave(0).atomic(13, at=0).load(14, at=0).barrier().load(15, at=0)
    assert verdict(prog) == set()


def test_only_the_unpublished_writer_is_reported():
    prog = Program(waves=3)
    prog.wave(0).store(10, at=0).wait_ds(0).raw_barrier().raw_barrier()
    prog.wave(1).raw_barrier().store(11, at=0).raw_barrier()  # after 10, but never drained
    prog.wave(2).raw_barrier().raw_barrier().load(30, at=0)
    assert verdict(prog) == {(RAW, Cause.BARE_BARRIER, 30, 11)}


# -- LDS002 war-reuse ---------------------------------------------------------------------------

def test_read_not_drained_before_signal_is_war():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier().raw_barrier().store(11, at=0)
    prog.wave(1).barrier().load(30, at=0).raw_barrier()
    assert verdict(prog) == {(WAR, Cause.UNPUBLISHED_READ, 11, 30)}


def test_read_drained_before_signal_allows_reuse():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier().raw_barrier().store(11, at=0)
    prog.wave(1).barrier().load(30, at=0).wait_ds(0).raw_barrier()
    assert verdict(prog) == set()


def test_refill_inside_signal_wait_window_is_war():
    """Split-barrier ring: the TDM refill issued before the reuse barrier's wait."""
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).wait_tensor(0).barrier()
    prog.wave(0).load(20, at=0).wait_ds(0).fence().signal().tdm_load(41, at=0).wait_barrier()
    prog.wave(0).wait_tensor(0).end()
    prog.wave(1).barrier().load(30, at=0).wait_ds(0).barrier()
    assert verdict(prog) == {(WAR, Cause.SIGNAL_WAIT_WINDOW, 41, 30)}


def test_refill_after_reuse_barrier_is_clean():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).wait_tensor(0).barrier()
    prog.wave(0).load(20, at=0).barrier().tdm_load(41, at=0).wait_tensor(0)
    prog.wave(1).barrier().load(30, at=0).barrier()
    assert verdict(prog) == set()


def test_refill_in_the_same_phase_as_the_reads_is_a_read_racing_a_copy():
    """No reuse barrier at all: same phase, so canonically the copy write comes first."""
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).wait_tensor(0).barrier()
    prog.wave(0).load(20, at=0).wait_ds(0).tdm_load(41, at=0).wait_tensor(0)
    prog.wave(1).barrier().load(30, at=0)
    # wave 0 waited for the refill in that phase: the read races completed, unpublished data
    assert verdict(prog) == {(RAW, Cause.COPY_WAITED_UNPUBLISHED, 30, 41)}


# -- LDS003 waw ---------------------------------------------------------------------------------

def test_two_waves_store_same_bytes():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0)
    prog.wave(1).store(11, at=2)  # overlaps bytes 2..3
    assert verdict(prog) == {(WAW, Cause.NO_BARRIER, 11, 10)}


def test_atomics_to_same_word_are_not_a_race():
    prog = Program(waves=3)
    prog.wave(0).store(10, at=0).barrier().atomic(12, at=0).barrier().load(31, at=0)
    prog.wave(1).barrier().atomic(13, at=0).barrier().load(32, at=0)
    prog.wave(2).barrier().atomic(14, at=0).barrier().load(33, at=0)
    assert verdict(prog) == set()


def test_atomic_vs_plain_store_races():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier().atomic(12, at=0)
    prog.wave(1).barrier().store(11, at=0)
    assert verdict(prog) == {(WAW, Cause.NO_BARRIER, 11, 12)}


def test_write_after_published_write_is_clean():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier()
    prog.wave(1).barrier().store(11, at=0)
    assert verdict(prog) == set()


# -- LDS010 / LDS011 ----------------------------------------------------------------------------

def test_tdm_waited_then_barrier_is_clean():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0, size=64).wait_tensor(0).barrier()
    prog.wave(1).barrier().load(30, at=16)
    assert verdict(prog) == set()


def test_tdm_never_waited_before_barrier():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0, size=64).barrier()  # fences never complete TDM
    prog.wave(1).barrier().load(30, at=16)
    got = verdict(prog)
    assert (DMA_RD, Cause.COPY_NOT_WAITED, 30, 40) in got
    assert got == {(DMA_RD, Cause.COPY_NOT_WAITED, 30, 40), (NEVER, Cause.WAVE_END, 40, END_SITE)}


def test_tdm_waited_after_the_signal():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).fence().signal().wait_tensor(0).wait_barrier()
    prog.wave(1).barrier().load(30, at=0)
    assert verdict(prog) == {(DMA_RD, Cause.COPY_WAITED_NOT_PUBLISHED, 30, 40)}


@pytest.mark.parametrize("n, needed", [(2, 1), (3, 1)])
def test_tensor_wait_too_weak_reports_the_count_that_suffices(n, needed):
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).tdm_load(41, at=64).tdm_load(42, at=128).wait_tensor(n).barrier()
    prog.wave(0).wait_tensor(0)
    prog.wave(1).barrier().load(30, at=64)
    recs = [r for r in prog.run() if r.rule == WEAK]
    assert [(r.site, r.other_site, r.extra, r.other_wave) for r in recs] == [(30, 41, needed, 0)]
    assert verdict(prog) == {(WEAK, Cause.NONE, 30, 41)}


def test_tensor_wait_strong_enough_is_clean():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).tdm_load(41, at=64).tdm_load(42, at=128).wait_tensor(1).barrier()
    prog.wave(0).wait_tensor(0)
    prog.wave(1).barrier().load(30, at=64)
    assert verdict(prog) == set()


def test_same_wave_read_before_tensor_wait():
    prog = Program(waves=1)
    prog.wave(0).tdm_load(40, at=0).tdm_load(41, at=64).load(20, at=0)
    prog.wave(0).wait_tensor(1).load(21, at=0).load(22, at=64).wait_tensor(0).load(23, at=64)
    recs = prog.run()
    assert found(recs) == {(DMA_RD, Cause.COPY_NOT_WAITED, 20, 40), (WEAK, Cause.NONE, 22, 41)}
    assert [r.extra for r in recs if r.rule == WEAK] == [0]


def test_async_copy_needs_asynccnt_not_tensorcnt():
    prog = Program(waves=2)
    prog.wave(0).dma_load(50, at=0, lanes=range(32)).wait_tensor(0).barrier().wait_async(0)
    prog.wave(1).barrier().load(30, at=8)
    assert verdict(prog) == {(DMA_RD, Cause.COPY_WAITED_NOT_PUBLISHED, 30, 50)}


def test_async_copy_waited_is_clean():
    prog = Program(waves=2)
    prog.wave(0).dma_load(50, at=0, lanes=range(32)).wait_async(0).barrier()
    prog.wave(1).barrier().load(30, at=8)
    assert verdict(prog) == set()


def test_dma_with_empty_mask_still_counts():
    prog = Program(waves=1)
    prog.wave(0).dma_load(50, at=0).dma_load(51, at=64, lanes=()).wait_async(1).load(20, at=0)
    prog.wave(0).wait_async(0)
    assert verdict(prog) == set()


# -- LDS012 dma-overlap -------------------------------------------------------------------------

def test_ds_store_into_in_flight_tdm_destination():
    prog = Program(waves=1)
    prog.wave(0).tdm_load(40, at=0).store(10, at=4).wait_tensor(0)
    assert verdict(prog) == {(OVERLAP, Cause.COPY_NOT_WAITED, 10, 40)}


def test_tdm_store_source_overwritten_before_tensor_wait():
    prog = Program(waves=1)
    prog.wave(0).store(10, at=0, lanes=range(4)).wait_ds(0).tdm_store(50, at=0, size=16)
    prog.wave(0).store(11, at=8).wait_tensor(0).store(12, at=8)
    assert verdict(prog) == {(OVERLAP, Cause.COPY_NOT_WAITED, 11, 50)}


def test_copy_issued_over_own_undrained_ds_store():
    prog = Program(waves=1)
    prog.wave(0).store(10, at=0, lanes=range(4)).tdm_store(50, at=0, size=16).wait_tensor(0)
    assert verdict(prog) == {(OVERLAP, Cause.NONE, 50, 10)}


def test_two_copies_in_flight_to_the_same_bytes():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, at=0).wait_tensor(0).barrier()
    prog.wave(1).barrier().dma_load(51, at=4).wait_async(0)
    prog.wave(0).tdm_load(41, at=0).wait_tensor(0)
    assert verdict(prog) == {(OVERLAP, Cause.NO_BARRIER, 51, 41)}


# -- LDS013 dma-never-waited --------------------------------------------------------------------

def test_copy_never_waited_at_wave_end():
    prog = Program(waves=1)
    prog.wave(0).tdm_load(40, at=32).end(site=77)
    recs = prog.run()
    assert found(recs) == {(NEVER, Cause.WAVE_END, 40, 77)}
    assert (recs[0].lds_offset, recs[0].wave, recs[0].other_lane) == (32, 0, NO_LANE)


def test_copies_waited_before_end_are_not_lds013():
    prog = Program(waves=1)
    prog.wave(0).tdm_load(40, at=32).dma_store(50, at=0).wait_tensor(0).wait_async(0)
    assert verdict(prog) == {(Rule.UNINIT_READ, Cause.NONE, 50, NO_SITE)}


def test_asyncmark_groups_are_clean():
    prog = Program(waves=1)
    prog.wave(0).dma_load(50, at=0).mark().dma_load(51, at=64).mark().wait_mark(1).load(20, at=0)
    prog.wave(0).wait_mark(0).load(21, at=64)
    assert verdict(prog) == set()


def test_wait_asyncmark_never_completes_unmarked_copies():
    prog = Program(waves=1)
    prog.wave(0).dma_load(50, at=0).mark().dma_load(51, at=64).wait_mark(0, site=206)
    prog.wave(0).load(20, at=0).load(21, at=64)
    assert verdict(prog) == {(DMA_RD, Cause.ASYNCMARK_UNMARKED, 21, 51),
                             (NEVER, Cause.ASYNCMARK_UNMARKED, 51, 206)}


def test_wait_asyncmark_too_weak():
    prog = Program(waves=1)
    prog.wave(0).dma_load(50, at=0).mark().dma_load(51, at=64).mark().wait_mark(2)
    prog.wave(0).load(21, at=64).wait_mark(0)
    recs = prog.run()
    assert found(recs) == {(WEAK, Cause.NONE, 21, 51)}
    assert recs[0].extra == 0


# -- LDS020 barrier-divergence ------------------------------------------------------------------

def test_different_barrier_sites_at_one_phase():
    prog = Program(waves=3)
    prog.wave(0).barrier(100).barrier(100)
    prog.wave(1).barrier(101).barrier(100)
    prog.wave(2).barrier(101).barrier(100)
    assert verdict(prog) == {(Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, 101, 100)}


def test_double_signal_without_wait():
    prog = Program(waves=2)
    prog.wave(0).signal(100).signal(101).wait_barrier(100).wait_barrier(101)
    prog.wave(1).raw_barrier(100).raw_barrier(101)
    assert verdict(prog) == {(Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, 101, 100)}


def test_early_exit_is_legal():
    prog = Program(waves=3)
    prog.wave(0).barrier().barrier()
    prog.wave(1).barrier()
    prog.wave(2).end()
    assert verdict(prog) == set()


def test_barrier_divergence_helper_records_lds020():
    ring = Ring()
    eng = ShadowEngine(64, 2, ring, groups=(4, 5), launch=3)
    eng.barrier_divergence(1, 100)
    eng.barrier_divergence(0, 100, 101, 1, cause=Cause.BARRIER_MISMATCH, group=1)
    eng.wave_end(0, 9)
    eng.wave_end(1, 9)
    eng.finish()
    assert ring.records() == [
        Record(20, Cause.BARRIER_MISMATCH, 100, 101, 0, 0, 1, NO_LANE, NO_LANE, 0, 5, 3),
        Record(20, Cause.BARRIER_DIVERGENT_LANES, 100, NO_SITE, 0, 1, NO_WAVE, NO_LANE, NO_LANE, 0, 4, 3),
        Record(20, Cause.BARRIER_DIVERGENT_LANES, 100, NO_SITE, 0, 1, NO_WAVE, NO_LANE, NO_LANE, 0, 5, 3),
    ]


def test_wait_before_phase_complete_is_an_api_error():
    eng = ShadowEngine(64, 2, Ring())
    eng.barrier_signal(0, 100)
    with pytest.raises(RuntimeError, match="before every live wave signalled"):
        eng.barrier_wait(0, 100)


# -- LDS030 uninit-read -------------------------------------------------------------------------

def test_read_of_never_written_bytes():
    prog = Program(waves=1)
    prog.wave(0).store(10, at=0).load(20, at=2).load(21, at=8)
    recs = prog.run()
    assert found(recs) == {(Rule.UNINIT_READ, Cause.NONE, 20, NO_SITE),
                           (Rule.UNINIT_READ, Cause.NONE, 21, NO_SITE)}
    assert [r.lds_offset for r in recs] == [4, 8]


def test_tdm_padding_is_not_written():
    rows = [np.arange(r * 32, r * 32 + 16) for r in range(4)]  # 16 data + 16 pad bytes per row
    prog = Program(waves=2)
    prog.wave(0).tdm_load(40, offsets=np.concatenate(rows)).wait_tensor(0).barrier()
    prog.wave(1).barrier().load(30, at=32).load(31, at=48)
    assert verdict(prog) == {(Rule.UNINIT_READ, Cause.NONE, 31, NO_SITE)}


def test_atomic_on_uninitialized_bytes():
    prog = Program(waves=1)
    prog.wave(0).atomic(12, at=0)
    assert verdict(prog) == {(Rule.UNINIT_READ, Cause.NONE, 12, NO_SITE)}


# -- LDS031 oob ---------------------------------------------------------------------------------

def test_access_straddling_the_end_is_oob_and_in_bounds_part_is_tracked():
    prog = Program(waves=1, lds=64)
    prog.wave(0).store(10, at=62).load(20, at=62, nbytes=2).load(21, at=61)
    recs = prog.run()
    assert found(recs) == {(Rule.OOB, Cause.NONE, 10, NO_SITE), (Rule.UNINIT_READ, Cause.NONE, 21, NO_SITE),
                           (Rule.OOB, Cause.NONE, 21, NO_SITE)}
    oob = [r for r in recs if r.rule == Rule.OOB]
    assert [(r.site, r.lds_offset) for r in oob] == [(10, 64), (21, 64)]


def test_negative_address_and_tdm_footprint_oob():
    prog = Program(waves=1, lds=64)
    prog.wave(0).store(10, at=-4, lanes=(3,)).tdm_load(40, at=48, size=32).wait_tensor(0)
    recs = prog.run()
    assert [(r.rule, r.site, r.lds_offset, r.lane) for r in recs] == [
        (Rule.OOB, 10, 0xFFFFFFFC, 3), (Rule.OOB, 40, 64, NO_LANE)]


# -- records: one per event and pair, fields ----------------------------------------------------

def test_one_record_per_pair_per_event_not_per_byte():
    prog = Program(waves=3)
    prog.wave(0).store(10, at=0, lanes=range(32))  # bytes 0..127
    prog.wave(1).store(11, at=128, lanes=range(32))  # bytes 128..255
    prog.wave(2).load(30, at=0, lanes=range(32), nbytes=8)  # all 256 bytes, 32 lanes
    prog.wave(2).load(30, at=0, lanes=range(32)).load(31, at=0, nbytes=256)
    recs = prog.run()
    # the second load at site 30 repeats the first one's record exactly: pushed once per
    # half-phase (a spin-wait repeats a race a schedule-dependent number of times)
    assert [(r.site, r.other_site, r.lds_offset) for r in recs] == [
        (30, 10, 0), (30, 11, 128), (31, 10, 0), (31, 11, 128)]


def test_a_repeated_race_is_reported_again_in_a_later_phase():
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0)
    prog.wave(1).load(30, at=0).load(30, at=0)  # same record twice: once
    prog.all().barrier()
    prog.wave(0).store(10, at=0)
    prog.wave(1).load(30, at=0)  # the same race again, after a barrier: again
    recs = prog.run()
    assert [(r.rule, r.site, r.other_site) for r in recs] == [(RAW, 30, 10), (RAW, 30, 10)]


def test_record_fields_name_both_lanes_and_the_first_byte():
    prog = Program(waves=2, groups=(17,))
    prog.wave(0).store(10, at=0, lanes=range(32))
    prog.wave(1).load(30, at=21, lanes=(5, 6))
    (rec,) = prog.run(launch=4)
    assert rec == Record(RAW, Cause.NO_BARRIER, 30, 10, 21, 1, 0, 5, 5, 0, 17, 4)


def test_ring_overflow_is_counted():
    prog = Program(waves=1, lds=64)
    for i in range(5):
        prog.wave(0).load(20 + i, at=4 * i)
    ring = Ring(2)
    prog.run(ring=ring)
    assert (len(ring), ring.written, ring.dropped) == (2, 5, 3)
    assert [r.site for r in ring.records()] == [20, 21]


def test_groups_of_a_batch_are_independent():
    prog = Program(waves=2, groups=(7, 9))
    prog.wave(0).store(10, at=0).wait_ds(0).raw_barrier().store(11, at=64, groups=[1])
    prog.wave(1).raw_barrier().load(30, at=0).load(31, at=64)
    recs = prog.run()
    assert {(r.rule, r.cause, r.site, r.other_site, r.workgroup) for r in recs} == {
        (RAW, Cause.NO_BARRIER, 31, 11, 9), (Rule.UNINIT_READ, Cause.NONE, 31, NO_SITE, 7)}
    assert verdict(prog) == found(recs)


def test_api_validates_shapes_and_kinds():
    eng = ShadowEngine(64, 2, Ring(), groups=(0, 1))
    with pytest.raises(ValueError, match="shape"):
        eng.ds(0, 1, np.zeros(32, np.int64), 4, AccessKind.READ, np.ones(32, bool))
    with pytest.raises(ValueError, match="wave"):
        eng.wait(2, 1, Counter.DS, 0)
    with pytest.raises(ValueError, match="count"):
        eng.wait(0, 1, Counter.DS, -1)
    eng.wave_end(0, 1)
    with pytest.raises(RuntimeError, match="after its wave_end"):
        eng.wait(0, 1, Counter.DS, 0)


def test_wave_uniform_operands_broadcast():
    ring = Ring()
    eng = ShadowEngine(64, 1, ring, groups=(0, 1))
    eng.ds(0, 10, 8, 4, AccessKind.READ, True)  # every lane of both groups reads bytes 8..11
    eng.wave_end(0, 1)
    eng.finish()
    assert [(r.rule, r.lds_offset, r.lane, r.workgroup) for r in ring.records()] == [
        (Rule.UNINIT_READ, 8, 0, 0), (Rule.UNINIT_READ, 8, 0, 1)]


# -- engine mechanics ---------------------------------------------------------------------------

def test_other_barrier_ids_create_no_order():
    ring = Ring()
    eng = ShadowEngine(64, 2, ring)
    addr, one = lane0_at_zero()
    eng.ds(0, 10, addr, 4, AccessKind.WRITE, one)
    eng.wait(0, 1, Counter.DS, 0)
    for w in (0, 1):
        eng.barrier_signal(w, 100, -3)  # cluster barrier: not a workgroup phase
    for w in (0, 1):
        eng.barrier_wait(w, 100, -3)
    eng.ds(1, 30, addr, 4, AccessKind.READ, one)
    eng.wave_end(0, 9)
    eng.wave_end(1, 9)
    eng.finish()
    assert found(ring.records()) == {(RAW, Cause.NO_BARRIER, 30, 10)}


def test_wave_stuck_in_a_barrier_at_finish_is_divergence():
    ring = Ring()
    eng = ShadowEngine(64, 2, ring)
    eng.barrier_signal(0, 100)  # wave 1 never arrives, never ends (the emulator saw a deadlock)
    eng.finish()
    assert found(ring.records()) == {(Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, 100, NO_SITE)}
    with pytest.raises(RuntimeError, match="after finish"):
        eng.wait(0, 1, Counter.DS, 0)


def test_ragged_tdm_footprint_per_group():
    ring = Ring()
    eng = ShadowEngine(64, 1, ring, groups=(3, 8))
    eng.tdm(0, 40, [np.arange(0, 8), np.arange(0, 4)], 1)  # group 1: a shorter (clipped) tile
    eng.wait(0, 1, Counter.TENSOR, 0)
    mask = np.zeros(64, bool)
    mask[[0, 32]] = True
    eng.ds(0, 20, np.full(64, 4, np.int64), 4, AccessKind.READ, mask)
    eng.wave_end(0, 9)
    eng.finish()
    assert [(r.rule, r.site, r.workgroup, r.lds_offset) for r in ring.records()] == [
        (Rule.UNINIT_READ, 20, 8, 4)]


def test_pending_cap_bounds_the_buffer_of_barrier_free_waves():
    """Wave-private scratch, no barriers: nothing is settled until wave 0 ends, so the cap
    makes the engine apply in arrival order -- race-free, hence still silent."""
    prog = Program(waves=3, lds=3 * 64)
    for w in range(3):
        for i in range(40):
            prog.wave(w).store(10 + w, at=64 * w + 4 * (i % 16)).load(20 + w, at=64 * w + 4 * (i % 16))
    for policy in POLICIES:
        ring = Ring()
        eng = ShadowEngine(prog.lds, prog.n_waves, ring)
        eng.PENDING_CAP = 16
        Scheduler(prog, eng, policy).run()
        eng.finish()
        assert ring.records() == []
        assert eng.forced_drains > 0 or policy != "rr"  # rr interleaves: the cap is hit
    prog.wave(2).load(29, at=0)  # a racy read of wave 0's scratch is still found
    assert (RAW, Cause.NO_BARRIER, 29, 10) in found(prog.run("rr", pending_cap=16))
