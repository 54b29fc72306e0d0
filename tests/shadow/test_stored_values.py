"""shadow/values.py: what two stores wrote, compared where both wrote; bounded memory."""

from __future__ import annotations

import numpy as np

from ldssan.runtime.shadow.operands import lane_payload
from ldssan.runtime.shadow.values import StoredValues

L = 64  # two workgroups of a batch


def _write(sv: StoredValues, eid: int, addr, values, mask=None, slots=None):
    mask = np.ones(L, bool) if mask is None else mask
    pay = lane_payload(np.asarray(addr, np.int64), mask, 4, L)
    sv.note(0, eid, np.asarray(values, np.int32), L)
    sv.attach(0, eid, eid, pay, np.arange(1000) if slots is None else slots)


def test_equal_where_both_wrote_per_workgroup():
    sv = StoredValues()
    lanes = np.arange(L)
    _write(sv, 1, 4 * (lanes % 32), np.where(lanes < 32, 7, lanes))  # group 0: all 7; group 1: lane ids
    _write(sv, 2, 4 * (lanes % 32), np.where(lanes < 32, 7, 0))
    assert sv.same(1, 2, 0) and not sv.same(1, 2, 1)
    # a masked-off lane writes nothing: only the bytes both wrote count
    mask = lanes % 32 < 4
    _write(sv, 3, 4 * (lanes % 32), np.where(lanes % 32 < 4, 7, 99), mask=mask)
    assert sv.same(1, 3, 0)
    assert not sv.same(1, 4, 0)  # unknown bytes: never "same"


def test_events_no_slot_holds_and_the_oldest_over_budget_are_dropped():
    sv = StoredValues()
    sv.BUDGET = 3 * L * 4 - 1  # room for two events' bytes
    lanes = np.arange(L)
    for eid in range(1, 5):
        _write(sv, eid, 4 * (lanes % 32), np.full(L, 7), slots=np.arange(1, 1000))
    # each event over the budget dropped the oldest (down to half the budget): 3 and 4 are left
    assert not sv.same(1, 4, 0) and sv.same(3, 4, 0)
    _write(sv, 5, 4 * (lanes % 32), np.full(L, 7), slots=np.array([5]))  # only event 5 is in a slot
    assert sv.same(5, 5, 0) and not sv.same(3, 5, 0)
