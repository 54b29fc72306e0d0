"""gpu.shuffle in every mode and width against the definition of FlyDSL's lowering
(`definitions.shuffle`), value and valid bit, under full and divergent exec masks."""

from __future__ import annotations

import numpy as np
import pytest

from . import definitions as D
from ._harness import SRC, T, per_wave, run_op

CASES = (
    [("xor", w, o) for w in (1, 2, 4, 8, 16, 32) for o in (1, 2, 5, 16)]
    + [(m, w, o) for m in ("up", "down") for w in (4, 8, 32) for o in (0, 1, 3, 17)]
    + [("idx", w, o) for w in (4, 8, 32) for o in (0, 3, 7, 19, 35)]
)
DIVERGENT = [(m, 8, o, mask) for m, o in (("xor", 3), ("up", 2), ("down", 5), ("idx", 11))
             for mask in ("mod3", "from9", "lt20")]


def _check(mode, width, offset, mask):
    op = f"""
      %off = arith.constant {offset} : i32
      %wid = arith.constant {width} : i32
      %v, %bvalid = gpu.shuffle {mode} %src, %off, %wid : i32"""
    got, valid = run_op(op, ["%v", "%bvalid"], mask, i1=("%bvalid",))
    want_v = per_wave(lambda s, o, a: [v for v, _ in D.shuffle(s, o, a, mode, offset, width)], mask)
    want_ok = per_wave(lambda s, o, a: [ok for _, ok in D.shuffle(s, o, a, mode, offset, width)], mask)
    np.testing.assert_array_equal(got, want_v, err_msg=f"value of shuffle {mode} {offset} width {width}, {mask}")
    np.testing.assert_array_equal(valid, want_ok, err_msg=f"valid of shuffle {mode} {offset} width {width}")


@pytest.mark.parametrize("mode, width, offset", CASES)
def test_shuffle_matches_the_lowering(mode, width, offset):
    _check(mode, width, offset, "all")


@pytest.mark.parametrize("mode, width, offset, mask", DIVERGENT)
def test_shuffle_under_a_divergent_mask_reads_zero_from_inactive_lanes(mode, width, offset, mask):
    _check(mode, width, offset, mask)


def test_idx_names_an_absolute_lane_as_flydsl_warp_broadcast_passes_it():
    # warp_broadcast(x, 3, width=4) shuffles idx with offset group_base + 3: group g of 4
    # lanes gets lane 4g + 3 (issue #10: it once got each lane's own value from group 1 on)
    op = """
      %c4 = arith.constant 4 : i32
      %wid = arith.constant 4 : i32
      %lane = arith.remsi %t, %c32 : i32
      %in = arith.remsi %lane, %c4 : i32
      %base = arith.subi %lane, %in : i32
      %off = arith.addi %base, %c3 : i32
      %v, %bvalid = gpu.shuffle idx %src, %off, %wid : i32"""
    got, valid = run_op(op, ["%v", "%bvalid"], i1=("%bvalid",))
    lane = T % 32
    np.testing.assert_array_equal(got, SRC[T - lane + lane // 4 * 4 + 3])
    assert valid.all()


def test_a_lane_outside_its_group_reads_itself_and_is_invalid():
    # idx beyond the group's end: the lowering selects the lane itself, valid = false
    got, valid = run_op("""
      %off = arith.constant 40 : i32
      %wid = arith.constant 32 : i32
      %v, %bvalid = gpu.shuffle idx %src, %off, %wid : i32""", ["%v", "%bvalid"], i1=("%bvalid",))
    np.testing.assert_array_equal(got, SRC)
    assert not valid.any()
