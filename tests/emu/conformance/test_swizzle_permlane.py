"""rocdl.ds_swizzle (quad-perm and bit-mask modes) and the gfx12 permlane family
(permlanex16, permlane16.var, permlanex16.var) with fetch-inactive and bound_ctrl, against
`definitions`; the forms gfx1250 wave32 does not model are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.errors import EmulationError

from . import definitions as D
from ._harness import SRC, per_wave, run_op

SWIZZLES = {
    "quad_perm[3,2,1,0]": 0x801B, "quad_perm[0,0,0,0]": 0x8000, "quad_perm[1,0,3,2]": 0x80B1,
    "xor16": (16 << 10) | 0x1F, "xor1": (1 << 10) | 0x1F, "reverse32": (0x1F << 10) | 0x1F,
    "broadcast8_lane7": (7 << 5) | 0x18, "or_and": (3 << 5) | 0x0C, "and0_or5": 5 << 5,
}


@pytest.mark.parametrize("mask", ["all", "mod3"])
@pytest.mark.parametrize("name", SWIZZLES)
def test_ds_swizzle(name, mask):
    offset = SWIZZLES[name]
    (got,) = run_op(f"""
      %off = arith.constant {offset} : i32
      %v = rocdl.ds_swizzle %src, %off : (i32, i32) -> i32""", ["%v"], mask)
    np.testing.assert_array_equal(got, per_wave(D.ds_swizzle, mask, offset))


@pytest.mark.parametrize("offset", [0xC000 | 0x21, 0xE000 | 0x5])
def test_swizzle_rotate_and_fft_modes_are_refused(offset):
    with pytest.raises(UnsupportedOp, match=rf"'rocdl.ds_swizzle' at .*offset {offset:#06x}"):
        run_op(f"""
      %off = arith.constant {offset} : i32
      %v = rocdl.ds_swizzle %src, %off : (i32, i32) -> i32""", ["%v"])


SELECTORS = {"identity": (0x76543210, 0xFEDCBA98), "reverse": (0x89ABCDEF, 0x01234567),
             "all_lane0": (0, 0), "mixed": (0x0F1E2D3C, 0x4B5A6978)}


@pytest.mark.parametrize("fi, bound_ctrl, mask", [(False, False, "all"), (False, False, "mod3"),
                                                  (False, True, "from9"), (True, False, "mod3")])
@pytest.mark.parametrize("sel", SELECTORS)
def test_permlanex16_reads_the_other_row(sel, fi, bound_ctrl, mask):
    lo, hi = SELECTORS[sel]
    (got,) = run_op(f"""
      %lo = arith.constant {lo} : i32
      %hi = arith.constant {hi} : i32
      %v = rocdl.permlanex16 %old, %src, %lo, %hi, {str(fi).lower()}, {str(bound_ctrl).lower()} : i32, i32""",
                    ["%v"], mask)
    want = per_wave(D.permlane, mask, D.permlane_selects(lo, hi), True, fi, bound_ctrl)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fi, bound_ctrl, mask", [(False, False, "all"), (False, False, "mod3"),
                                                  (False, True, "mod3"), (True, True, "from9")])
@pytest.mark.parametrize("op", ["permlane16.var", "permlanex16.var"])
def test_var_forms_take_a_per_lane_select(op, fi, bound_ctrl, mask):
    # select of lane t: (5t + 3) mod 16 (the op keeps its low 4 bits; 21 + 16k tests that)
    (got,) = run_op(f"""
      %c5 = arith.constant 5 : i32
      %c16 = arith.constant 16 : i32
      %s5 = arith.muli %t, %c5 : i32
      %s = arith.addi %s5, %c3 : i32
      %v = rocdl.{op} %old, %src, %s, {str(fi).lower()}, {str(bound_ctrl).lower()} : (i32, i32, i32) -> i32""",
                    ["%v"], mask)
    selects = [(5 * lane + 3) for lane in range(32)]
    want = per_wave(lambda s, o, a: D.permlane(s, o, a, selects, "x16" in op, fi, bound_ctrl), mask)
    np.testing.assert_array_equal(got, want)


def test_var_form_with_uniform_operands_stays_uniform():
    (got,) = run_op("""
      %v = rocdl.permlane16.var %c3, %c7, %c1, false, false : (i32, i32, i32) -> i32""", ["%v"])
    assert (got == 7).all()


@pytest.mark.parametrize("op", ["permlane16.swap", "permlane32.swap"])
def test_row_swaps_are_refused_by_name(op):
    with pytest.raises(UnsupportedOp, match=rf"'rocdl.{op}' at .*wave64"):
        run_op(f"""
      %v = rocdl.{op} %old, %src, false, false : (i32, i32) -> <(i32, i32)>""", [])


def test_the_reference_tables_are_what_they_say():
    # independent spot checks of the definitions on the named patterns
    src, act = list(range(100, 132)), [True] * 32
    assert D.ds_swizzle(src, src, act, SWIZZLES["xor16"])[:2] == [116, 117]
    assert D.ds_swizzle(src, src, act, SWIZZLES["broadcast8_lane7"])[8:10] == [115, 115]
    assert D.permlane(src, src, act, D.permlane_selects(*SELECTORS["identity"]), True, False, False)[0] == 116
    assert SRC[0] == 3


BATCHED = {
    "shuffle xor 16": ("""
      %off = arith.constant 16 : i32
      %wid = arith.constant 32 : i32
      %v, %ok = gpu.shuffle xor %src, %off, %wid : i32""",
                       lambda s, o, a: [v for v, _ in D.shuffle(s, o, a, "xor", 16, 32)]),
    "dpp row_mirror": ("""
      %v = rocdl.update.dpp %old, %src with 320, 15, 15, false : i32""",
                       lambda s, o, a: D.update_dpp(s, o, a, 0x140, 15, 15, False)),
    "swizzle reverse": (f"""
      %off = arith.constant {SWIZZLES["reverse32"]} : i32
      %v = rocdl.ds_swizzle %src, %off : (i32, i32) -> i32""",
                        lambda s, o, a: D.ds_swizzle(s, o, a, SWIZZLES["reverse32"])),
    "permlanex16 reverse": (f"""
      %lo = arith.constant {SELECTORS["reverse"][0]} : i32
      %hi = arith.constant {SELECTORS["reverse"][1]} : i32
      %v = rocdl.permlanex16 %old, %src, %lo, %hi, false, false : i32, i32""",
                            lambda s, o, a: D.permlane(s, o, a, D.permlane_selects(*SELECTORS["reverse"]),
                                                       True, False, False)),
}


@pytest.mark.parametrize("mask", ["all", "mod3"])
@pytest.mark.parametrize("name", BATCHED)
def test_batched_workgroups_exchange_only_their_own_lanes(name, mask):
    op, ref = BATCHED[name]
    (got,) = run_op(op, ["%v"], mask, groups=2, batch=2)
    np.testing.assert_array_equal(got, per_wave(ref, mask, groups=2))
