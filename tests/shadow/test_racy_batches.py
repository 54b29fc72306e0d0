"""A race in every workgroup of a batch: naming each one is linear in the workgroups.

A kernel with a missing barrier races in every workgroup, so one conflicting access names
a pair per workgroup of its batch (FlyDSL's softmax at 2048 rows: 14336 pairs a launch).
Two steps were quadratic there: the same-phase pairs held for finish were kept in a list
searched before each append, and the other access's lane (a per-byte event's) was found by
scanning its whole footprint once per workgroup. Now an ordered set and `LaneIndex` (one
sort per event, then a binary search each). Both must still name exactly what the
reference engine names (tests/shadow/test_fastpath.py's `_same`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ldssan.runtime.records import Rule
from ldssan.runtime.shadow.tables import LaneIndex, byte_footprint

from .protocol import Program
from .test_fastpath import _same


def _scan(pay, g: int, byte: int) -> int | None:
    """The plain answer: the last lane of the footprint, in footprint order, on that byte."""
    grp, b, lane = byte_footprint(pay)
    hit = np.flatnonzero((grp == g) & (b == byte))
    return int(lane[hit[-1]]) if hit.size else None


@settings(max_examples=60, deadline=None)
@given(groups=st.integers(1, 4), nbytes=st.sampled_from([1, 2, 4, 8, 16]), seed=st.integers(0, 2**31),
       far=st.booleans())
def test_lane_index_answers_as_a_scan(groups, nbytes, seed, far):
    """Random lane addresses with collisions (several lanes on one byte: the last wins),
    inactive lanes, and with `far` one address past 2**32 (left out of the index)."""
    rng = np.random.default_rng(seed)
    n = 32 * groups
    addr = rng.integers(0, 64, n).astype(np.int64) * rng.choice([1, nbytes], n)
    if far:
        addr[rng.integers(n)] = (1 << 32) + 3
    mask = rng.random(n) < 0.8
    pay = ("lanes", addr, mask, nbytes)
    grp, b, _lane = byte_footprint(pay)
    asked_g = np.concatenate([grp, rng.integers(0, groups, 8)]).astype(np.int64)
    asked_b = np.concatenate([b, rng.integers(0, 1100, 8)]).astype(np.int64)
    want = [_scan(pay, int(g), int(x)) for g, x in zip(asked_g, asked_b)]
    idx = LaneIndex(pay)
    lds = asked_b < 1 << 32  # an LDS byte: the only kind the engine asks about
    touched = [i for i, w in enumerate(want) if w is not None and lds[i]]
    got = idx.last(asked_g[touched], asked_b[touched])
    assert got is not None and got.tolist() == [want[i] for i in touched]
    for i, w in enumerate(want):
        if w is None or not lds[i]:
            assert idx.last(asked_g[i:i + 1], asked_b[i:i + 1]) is None


def _neighbour_race(groups: int, waves: int = 4) -> Program:
    """In every workgroup, each wave reads its neighbour's 32 words and writes its own in
    one phase (a missing barrier). Its 4-byte lanes share 16-byte granules: per-byte events,
    whose lanes the shadow keeps to name the other side of a race (`lanes_at`)."""
    words = 32 * 4
    prog = Program(waves=waves, lds=words * waves, groups=range(groups))
    for w in range(waves):
        prog.wave(w).store(10, at=w * words, lanes=range(32))
    prog.all().barrier(100)
    for w in range(waves):
        prog.wave(w).load(20, at=(w + 1) % waves * words, lanes=range(32))
        prog.wave(w).store(30, at=w * words + 20, lanes=range(27))  # from word 5: lane 5 of a reader
    return prog


def test_a_race_in_every_workgroup_is_named_in_every_workgroup():
    groups = 48
    recs = _same(_neighbour_race(groups), policies=("rr", ("random", 3)))
    raced = {r.workgroup for r in recs if r.rule in (Rule.RAW_UNPUBLISHED, Rule.WAR_REUSE)}
    assert raced == set(range(groups)), sorted(raced)
    assert {r.lane for r in recs} | {r.other_lane for r in recs} >= {5}, "the per-byte lanes were not asked"
