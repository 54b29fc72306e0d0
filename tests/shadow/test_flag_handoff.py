"""Issue #13: two waves hand a flag through LDS without a barrier.

The reader spins on the flag, so how often it reads it depends on the schedule. The race is
a read of data another wave wrote with no publishing barrier: LDS001 (MODEL.md §6), with the
same records under every schedule -- however often the spin ran, whichever wave writes, and
whether the writer reads its flag back.
"""

from __future__ import annotations

import itertools

import pytest

from ldssan.runtime.records import Rule

from .protocol import POLICIES, Program

FLAG, DATA = 128, 0  # data: 32 lanes x 4 bytes, then the flag
INIT, STORE_DATA, STORE_FLAG, REREAD, POLL, LOAD_DATA = 1, 2, 3, 4, 5, 6


def handoff(reader: int, polls: int, *, init_by, reread: bool, data: bool, waves: int = 2) -> Program:
    """`init_by`: None (flag never initialised), or the wave that zeroes it before a barrier."""
    prog = Program(waves=waves)
    writer = (reader + 1) % waves
    if init_by is not None:
        prog.wave(init_by).store(INIT, at=FLAG)
        prog.all().barrier()
    if data:
        prog.wave(writer).store(STORE_DATA, at=DATA, lanes=range(32))
    prog.wave(writer).store(STORE_FLAG, at=FLAG)
    if reread:
        prog.wave(writer).load(REREAD, at=FLAG)
    for _ in range(polls):  # the spin: each poll's result is used (the compiler's dscnt wait)
        prog.wave(reader).load(POLL, at=FLAG).wait_ds(0)
    if data:
        prog.wave(reader).load(LOAD_DATA, at=DATA, lanes=range(32))
    return prog


CASES = list(itertools.product((0, 1), (None, "reader", "writer"), (False, True), (False, True)))


@pytest.mark.parametrize("reader,init,reread,data", CASES)
def test_flag_handoff_is_lds001_with_the_same_records_however_often_the_reader_polls(reader, init, reread, data):
    init_by = {None: None, "reader": reader, "writer": 1 - reader}[init]
    runs = {}
    for polls, policy in itertools.product((1, 2, 5), POLICIES[:5]):
        recs = handoff(reader, polls, init_by=init_by, reread=reread, data=data).run(policy)
        runs[(polls, str(policy))] = recs
    first = next(iter(runs.values()))
    for key, recs in runs.items():
        assert recs == first, f"polls/policy {key}: records differ from {next(iter(runs))}"
    pairs = {(r.rule, r.site, r.other_site) for r in first}
    assert (Rule.RAW_UNPUBLISHED, POLL, STORE_FLAG) in pairs
    if data:
        assert (Rule.RAW_UNPUBLISHED, LOAD_DATA, STORE_DATA) in pairs
    assert {r.rule for r in first} == {Rule.RAW_UNPUBLISHED}, pairs


def test_flag_handoff_among_four_waves_names_the_writer():
    recs = handoff(2, 3, init_by=0, reread=True, data=True, waves=4).run()
    assert {(r.rule, r.site, r.other_site, r.wave, r.other_wave) for r in recs} == {
        (Rule.RAW_UNPUBLISHED, POLL, STORE_FLAG, 2, 3), (Rule.RAW_UNPUBLISHED, LOAD_DATA, STORE_DATA, 2, 3)}


def test_a_refill_consumed_after_the_next_barrier_is_still_a_war():
    """MODEL §6a unchanged where it applies: the readers had published data, the refill races
    them in their phase, and a later phase reads the refill in order -> LDS002 at the refill."""
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier()
    prog.wave(1).barrier().load(30, at=0)
    prog.wave(0).store(11, at=0)  # refill while wave 1 still reads
    prog.all().barrier()
    prog.wave(1).load(31, at=0)
    recs = prog.run()
    assert {(r.rule, r.site, r.other_site) for r in recs} == {(Rule.WAR_REUSE, 11, 30)}


def test_the_writers_own_reread_does_not_make_a_handoff_a_war():
    """The same shape without the later phase: only the writer reads its write back (in its
    own half-phase), which says nothing about what the reader wanted -> LDS001."""
    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).barrier()
    prog.wave(1).barrier().load(30, at=0)
    prog.wave(0).store(11, at=0).load(12, at=0)
    recs = prog.run()
    assert {(r.rule, r.site, r.other_site) for r in recs} == {(Rule.RAW_UNPUBLISHED, 30, 11)}
