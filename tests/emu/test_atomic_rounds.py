"""Atomics apply their lanes in rounds of distinct words (rt/atomics.apply_rmw); the result
must be exactly the lane-by-lane serialisation: every kind, repeated and overlapping
addresses, integer wrap-around and float rounding order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ldssan.runtime.emu.rt import atomics as A

_INTS = ("int32", "uint32", "int64")
_FLOATS = ("float32", "float16")


@st.composite
def _case(draw):
    kind = draw(st.sampled_from(sorted(A._RMW_FN)))
    # float kinds on floats, integer kinds on integers, xchg on either
    names = _FLOATS if kind.startswith("f") else _INTS + _FLOATS if kind == "xchg" else _INTS
    dt = np.dtype(draw(st.sampled_from(names)))
    n = draw(st.integers(1, 64))
    # few distinct addresses: many lanes share a word; an odd step: words may overlap
    step = draw(st.sampled_from([dt.itemsize, dt.itemsize, 1, 2]))
    slots = draw(st.integers(1, 8))
    offs = draw(st.lists(st.integers(0, slots - 1), min_size=n, max_size=n))
    active = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return kind, dt, np.asarray(offs, np.int64) * step, np.asarray(active), draw(st.integers(0, 2**32 - 1))


def _run(apply, kind, dt, offs, active, seed):
    rng = np.random.default_rng(seed)
    mem = rng.integers(0, 256, 256, dtype=np.uint8)
    if dt.kind == "f":  # finite start values and operands, some large: rounding matters
        mem[: 8 * dt.itemsize * 4] = (rng.standard_normal(8 * 4) * 1000).astype(dt).view(np.uint8)
        val = (rng.standard_normal(len(offs)) * 1000).astype(dt)
    else:
        val = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, len(offs), dtype=dt, endpoint=True)
    idx = offs[:, None] + np.arange(dt.itemsize, dtype=np.int64)
    old = np.zeros(len(offs), dtype=dt)
    with np.errstate(over="ignore"):
        apply(mem, idx, np.flatnonzero(active), A._RMW_FN[kind], val, old)
    return mem, old


@settings(max_examples=300, deadline=None)
@given(_case())
def test_rounds_equal_the_lane_by_lane_serialisation(case):
    kind, dt, offs, active, seed = case
    mem, old = _run(A.apply_rmw, kind, dt, offs, active, seed)
    mem_ref, old_ref = _run(A._apply_serial, kind, dt, offs, active, seed)
    np.testing.assert_array_equal(mem, mem_ref)
    np.testing.assert_array_equal(old.view(np.uint8), old_ref.view(np.uint8))


def test_a_word_shared_by_all_lanes_takes_one_round_per_lane_in_lane_order():
    idx = np.zeros((4, 4), np.int64) + np.arange(4)
    rounds = A._rounds(idx, np.array([0, 1, 2, 3]))
    assert [r.tolist() for r in rounds] == [[0], [1], [2], [3]]
    distinct = np.arange(4)[:, None] * 4 + np.arange(4)
    assert [r.tolist() for r in A._rounds(distinct, np.array([0, 2, 3]))] == [[0, 2, 3]]
    overlapping = np.array([0, 2])[:, None] + np.arange(4)
    assert A._rounds(overlapping, np.array([0, 1])) is None
