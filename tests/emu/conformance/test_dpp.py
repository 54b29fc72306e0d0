"""rocdl.update.dpp with every DPP16 control of gfx12 wave32, row and bank masks, bound_ctrl
and divergent exec masks, against `definitions.update_dpp`; the GFX9-only controls are
refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp

from . import definitions as D
from ._harness import per_wave, run_op

CONTROLS = {
    "quad_perm[3,2,1,0]": 0x1B, "quad_perm[1,0,3,2]": 0xB1, "quad_perm[2,3,0,1]": 0x4E,
    "quad_perm[0,0,0,0]": 0x00, "quad_perm[0,1,2,3]": 0xE4, "quad_perm[1,2,3,0]": 0x39,
    "row_shl:1": 0x101, "row_shl:4": 0x104, "row_shl:15": 0x10F,
    "row_shr:1": 0x111, "row_shr:3": 0x113, "row_shr:15": 0x11F,
    "row_ror:1": 0x121, "row_ror:8": 0x128, "row_ror:15": 0x12F,
    "row_mirror": 0x140, "row_half_mirror": 0x141,
    "row_share:0": 0x150, "row_share:5": 0x155, "row_share:15": 0x15F,
    "row_xmask:1": 0x161, "row_xmask:7": 0x167, "row_xmask:15": 0x16F,
}


def _check(ctrl, row_mask, bank_mask, bound_ctrl, mask):
    bc = "true" if bound_ctrl else "false"
    op = f"""
      %v = rocdl.update.dpp %old, %src with {ctrl}, {row_mask}, {bank_mask}, {bc} : i32"""
    (got,) = run_op(op, ["%v"], mask)
    want = per_wave(D.update_dpp, mask, ctrl, row_mask, bank_mask, bound_ctrl)
    np.testing.assert_array_equal(got, want, err_msg=f"dpp {ctrl:#x} rows {row_mask:#x} banks "
                                                     f"{bank_mask:#x} bound_ctrl {bound_ctrl} {mask}")


@pytest.mark.parametrize("bound_ctrl", [False, True])
@pytest.mark.parametrize("name", CONTROLS)
def test_each_control(name, bound_ctrl):
    _check(CONTROLS[name], 0xF, 0xF, bound_ctrl, "all")


@pytest.mark.parametrize("name", ["row_shl:4", "row_shr:3", "quad_perm[1,0,3,2]", "row_share:5", "row_xmask:7"])
@pytest.mark.parametrize("bound_ctrl", [False, True])
@pytest.mark.parametrize("mask", ["mod3", "from9"])
def test_inactive_source_lanes_are_invalid(name, bound_ctrl, mask):
    _check(CONTROLS[name], 0xF, 0xF, bound_ctrl, mask)


@pytest.mark.parametrize("row_mask, bank_mask", [(0x1, 0xF), (0x2, 0xF), (0xF, 0x5), (0xF, 0xA), (0x2, 0x6),
                                                 (0x0, 0xF)])
@pytest.mark.parametrize("name", ["row_shr:1", "row_mirror"])
def test_row_and_bank_masks_keep_old(name, row_mask, bank_mask):
    _check(CONTROLS[name], row_mask, bank_mask, False, "all")


def test_the_definition_knows_the_controls_it_is_given():
    # the table above spells each control the way the assembler does; guard the spelling
    for name, ctrl in CONTROLS.items():
        assert D.dpp_source(ctrl, 0) is None or 0 <= D.dpp_source(ctrl, 0) < 32, name
    assert [D.dpp_source(0x111, i) for i in (0, 1, 16, 17)] == [None, 0, None, 16]
    assert [D.dpp_source(0x140, i) for i in (0, 15, 16)] == [15, 0, 31]


@pytest.mark.parametrize("ctrl, what", [(0x138, "wave_shr"), (0x142, "row_bcast"), (0x100, "reserved"),
                                        (0x130, "wave_shl")])
def test_controls_gfx12_lacks_are_refused_by_name(ctrl, what):
    with pytest.raises(UnsupportedOp, match=rf"'rocdl.update.dpp' at .*dpp_ctrl {ctrl:#x}"):
        run_op(f"""
      %v = rocdl.update.dpp %old, %src with {ctrl}, 15, 15, false : i32""", ["%v"])
