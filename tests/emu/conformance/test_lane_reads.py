"""readlane, readfirstlane, ballot, mbcnt and ds_bpermute against `definitions`, under full and
divergent exec masks (each wave of the kernel is checked on its own 32 lanes)."""

from __future__ import annotations

import numpy as np
import pytest

from . import definitions as D
from ._harness import active, per_wave, run_op

MASKS = ["all", "mod3", "from9", "lt20"]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("lane", [0, 5, 31])
def test_readlane_reads_its_lane_whatever_exec_says(lane, mask):
    (got,) = run_op(f"""
      %ln = arith.constant {lane} : i32
      %v = rocdl.readlane %src, %ln : (i32, i32) -> i32""", ["%v"], mask)
    np.testing.assert_array_equal(got, per_wave(D.readlane, mask, lane))


@pytest.mark.parametrize("mask", MASKS)
def test_readfirstlane_takes_the_lowest_active_lane(mask):
    (got,) = run_op("""
      %v = rocdl.readfirstlane %src : i32""", ["%v"], mask)
    np.testing.assert_array_equal(got, per_wave(D.readfirstlane, mask))


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("cond", ["odd", "lt7"])
def test_ballot_sets_the_bits_of_active_lanes_where_cond_holds(cond, mask):
    pred = {"odd": ("""
      %par = arith.andi %t, %c1 : i32
      %cnd = arith.cmpi eq, %par, %c1 : i32""", lambda t: t % 2 == 1),
            "lt7": ("""
      %cnd = arith.cmpi slt, %t, %c7 : i32""", lambda t: t < 7)}[cond]
    (got,) = run_op(pred[0] + """
      %v = rocdl.ballot %cnd : i32""", ["%v"], mask)
    # each lane's thread id, recovered from its src value 7t + 3
    want = per_wave(lambda s, o, a: D.ballot([pred[1]((v - 3) // 7) for v in s], a), mask)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [0xFFFFFFFF, 0x0, 0xA5A5F00F, 0x80000001])
@pytest.mark.parametrize("hi", [False, True])
def test_mbcnt_counts_the_mask_bits_below_the_lane(bits, hi):
    name = "hi" if hi else "lo"
    (got,) = run_op(f"""
      %bits = arith.constant {bits} : i32
      %v = rocdl.mbcnt.{name} %bits, %c3 : (i32, i32) -> i32""", ["%v"])
    np.testing.assert_array_equal(got, per_wave(lambda s, o, a: D.mbcnt(bits, 3, hi), "all"))


@pytest.mark.parametrize("mask", ["all", "mod3", "from9"])
@pytest.mark.parametrize("pattern", ["reverse", "plus37", "negative"])
def test_bpermute_reads_the_lane_its_address_names(pattern, mask):
    # address = 4 * f(lane); f = 31 - lane, lane + 37 (wraps), lane - 40 (negative)
    f = {"reverse": ("%a0 = arith.subi %c31, %lane : i32", lambda ln: 31 - ln),
         "plus37": ("%a0 = arith.addi %lane, %c37 : i32", lambda ln: ln + 37),
         "negative": ("%a0 = arith.subi %lane, %c40 : i32", lambda ln: ln - 40)}[pattern]
    (got,) = run_op(f"""
      %c4 = arith.constant 4 : i32
      %c31 = arith.constant 31 : i32
      %c37 = arith.constant 37 : i32
      %c40 = arith.constant 40 : i32
      %lane = arith.remsi %t, %c32 : i32
      {f[0]}
      %addr = arith.muli %a0, %c4 : i32
      %v = rocdl.ds_bpermute %addr, %src : (i32, i32) -> i32""", ["%v"], mask)
    want = per_wave(lambda s, o, a: [D.bpermute_read(s, a, f[1](ln)) for ln in range(32)], mask)
    np.testing.assert_array_equal(got, want)


def test_the_masks_are_the_ones_the_tests_name():
    assert active("from9")[[8, 9, 40, 41]].tolist() == [False, True, False, True]
    assert active("lt20").sum() == 20
