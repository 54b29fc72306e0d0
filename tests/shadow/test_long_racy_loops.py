"""Long racy loops at every wave count (issue 29, finding 1): the engine reports the race and
never fails itself.

Each wave reads its neighbour wave's words and writes its own in one barrier phase, loop
after loop (the FlyDSL kernel `barrier; lds[tid] = lds[(tid + 32) % n] + 1; barrier`). Its
4-byte lanes share 16-byte granules, so every access is a per-byte event whose lanes the
shadow keeps for naming a race; after 4096 of them the ones no slot holds are pruned. The
pruning dropped the event being registered, and the next race with it ended in a KeyError.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldssan.runtime.records import Cause, Rule
from ldssan.runtime.shadow.errors import ShadowLimitError
from ldssan.runtime.shadow.kinds import OP_READ
from ldssan.runtime.shadow.lds import LdsShadow
from ldssan.runtime.shadow.tables import EventTable

from .protocol import POLICIES, Program, found

INIT, READ, WRITE = 10, 20, 30
WORDS = 32 * 4  # bytes of one wave's 32 words
# the race, both ways round: the read of the neighbour's words and this wave's write
RACE = {(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, READ, WRITE), (Rule.WAR_REUSE, Cause.NO_BARRIER, WRITE, READ)}


def neighbour_loop(waves: int, iterations: int, reads: int = 1) -> Program:
    """`reads` > 1: the neighbour's words are read that many times in a row (a run of reads
    the engine checks and records as one group)."""
    prog = Program(waves=waves, lds=WORDS * waves)
    lanes = range(32)
    for w in range(waves):
        b = prog.wave(w).store(INIT, at=w * WORDS, lanes=lanes)
        for _ in range(iterations):
            b.barrier()
            for _r in range(reads):
                b.load(READ, at=(w + 1) % waves * WORDS, lanes=lanes)
            b.store(WRITE, at=w * WORDS, lanes=lanes).barrier()
    return prog


def past_pruning(waves: int, prune_at: int, times: int = 1, reads: int = 1) -> int:
    """Iterations whose per-byte events (reads and a write per wave) pass `prune_at`
    `times` times over."""
    return times * prune_at // ((reads + 1) * waves) + 2


def expected(waves: int) -> set:
    # one wave: (tid + 32) % 32 is the lane itself, and one wave's LDS ops are in order
    return RACE if waves > 1 else set()


@pytest.fixture
def prune_often(monkeypatch):
    """Prune the per-byte lanes every 64 events: the loops stay short and prune many times."""
    monkeypatch.setattr(LdsShadow, "PRUNE_AT", 64)
    return 64


@pytest.mark.parametrize("waves", range(1, 33))
def test_long_racy_loop_reports_the_race_at_every_wave_count(prune_often, waves):
    prog = neighbour_loop(waves, past_pruning(waves, prune_often, times=6))
    assert found(prog.run("rr")) == expected(waves)


def clean_then_grouped_race(extra: int, group: int) -> Program:
    """Two waves exchange words cleanly; then wave 0 reads `group` distinct regions in one
    run (clean when applied: one group) while wave 1 writes the first of them in the same
    phase: a race with the group's first read. `extra` more stores shift where the pruning
    falls."""
    prog = Program(waves=2, lds=WORDS * (2 + group))
    lanes = range(32)
    iterations = 12  # 4 per-byte events each: the 64-event pruning falls near the group
    for _ in range(extra):
        prog.wave(0).store(INIT, at=0, lanes=lanes)
    for k in range(group):  # written before the first barrier: ordered before every later read
        prog.wave(0).store(INIT + 1, at=(2 + k) * WORDS, lanes=lanes)
    for w in range(2):
        b = prog.wave(w)
        for _ in range(iterations):
            b.store(INIT, at=w * WORDS, lanes=lanes).barrier().load(READ, at=(1 - w) * WORDS, lanes=lanes).barrier()
    r = prog.wave(0)
    for k in range(group):
        r.load(READ + 1 + k, at=(2 + k) * WORDS, lanes=lanes)
    prog.wave(1).store(WRITE, at=2 * WORDS, lanes=lanes)
    return prog


@pytest.mark.parametrize("extra", range(12))
def test_a_pruning_inside_a_group_of_reads_keeps_the_whole_group(prune_often, extra):
    # a group's events are registered one by one, then stored together: a pruning between two
    # registrations must keep the earlier ones (`extra` moves the pruning through the group)
    recs = found(clean_then_grouped_race(extra, group=4).run("seq"))
    assert (Rule.WAR_REUSE, Cause.NO_BARRIER, WRITE, READ + 1) in recs or \
        (Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, READ + 1, WRITE) in recs, recs


@settings(max_examples=10, deadline=None)
@given(waves=st.integers(1, 32), extra=st.integers(0, 40), policy=st.sampled_from(POLICIES))
def test_long_racy_loops_under_any_schedule(waves, extra, policy):
    saved = LdsShadow.PRUNE_AT
    LdsShadow.PRUNE_AT = 64  # (a fixture would not be reset between hypothesis examples)
    try:
        prog = neighbour_loop(waves, past_pruning(waves, 64, times=3) + extra)
        assert found(prog.run(policy)) == expected(waves)
    finally:
        LdsShadow.PRUNE_AT = saved


@pytest.mark.parametrize("waves", [2, 32])
def test_the_issue_loop_lengths_at_the_real_pruning_threshold(waves):
    # 64 iterations at 32 waves is the probe of the issue (1024 threads); 1026 at 2 waves
    prog = neighbour_loop(waves, past_pruning(waves, LdsShadow.PRUNE_AT))
    assert found(prog.run("rr")) == expected(waves)


@pytest.mark.slow
@pytest.mark.parametrize("waves", range(1, 33))
def test_long_racy_loops_at_the_real_threshold_under_every_policy(waves):
    prog = neighbour_loop(waves, past_pruning(waves, LdsShadow.PRUNE_AT, times=3))
    for policy in POLICIES:
        assert found(prog.run(policy)) == expected(waves), policy


# -- the shadow's fixed-width numbers: a named error at their bound, never a wrap ---------------


def test_event_ids_past_the_shadow_bound_are_a_named_error(monkeypatch):
    monkeypatch.setattr(EventTable, "ID_MAX", 1000)  # stands in for int32's 2**31 - 1
    with pytest.raises(ShadowLimitError, match=r"more than 1,000 LDS accesses"):
        neighbour_loop(2, 400).run("rr")
    assert found(neighbour_loop(2, 200).run("rr")) == RACE  # 801 events: within the bound


def test_barrier_counters_past_32_bits_are_a_named_error():
    table = EventTable()
    table.append(1, 0, OP_READ, False, 7, 2**31, 2**31 + 1, 0)  # A, seg past int32
    with pytest.raises(ShadowLimitError, match="more than 2\\*\\*31 barrier events"):
        table.sync()
