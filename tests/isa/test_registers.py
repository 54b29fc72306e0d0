"""LDS052 isa-use-before-wait (register form) on hand-written gfx1250 assembly: a VGPR used
while the load writing it may be in flight on some path, the wait that fixes it, the
in-order exemption, returning atomics (loadcnt), and the golden report."""

from __future__ import annotations

from pathlib import Path

from ldssan.isa.asm import parse_kernel
from ldssan.isa.check import check_kernel
from ldssan.isa.findings import KernelResult
from ldssan.isa.output import render_text
from ldssan.isa.registers import use_before_wait, vgprs
from tests.isa.test_counters import kernel

GOLDEN = Path(__file__).parent / "golden"


def uses(*body: str) -> set[tuple[int, int]]:
    """(load line, use line) of every LDS052 finding."""
    return {(f.other.line, f.this.line) for f in use_before_wait(parse_kernel(kernel(*body), "k"))}


def test_register_ranges_are_read_whole():
    assert vgprs("v[4:7], v1, s[0:1], vcc_lo, v_dual_mov_b32") == {1, 4, 5, 6, 7}


def test_use_of_a_loaded_register_before_its_wait_is_found():
    assert uses("global_load_b32 v1, v0, s[0:1]", "v_add_f32_e32 v2, v1, v1") == {(1, 2)}
    assert uses("global_load_b32 v1, v0, s[0:1]", "s_wait_loadcnt 0x0", "v_add_f32_e32 v2, v1, v1") == set()


def test_the_wait_one_instruction_too_late():
    body = ("ds_load_b32 v1, v0", "v_mov_b32_e32 v3, v1", "s_wait_dscnt 0x0", "v_mov_b32_e32 v4, v1")
    assert uses(*body) == {(1, 2)}


def test_a_partial_wait_retires_only_the_older_load():
    body = ("global_load_b128 v[4:7], v0, s[0:1]", "global_load_b32 v8, v0, s[0:1] offset:16",
            "s_wait_loadcnt 0x1", "v_add_f32_e32 v9, v4, v7", "v_add_f32_e32 v10, v8, v8")
    assert uses(*body) == {(2, 5)}


def test_an_in_order_successor_may_overwrite_the_register():
    assert uses("ds_load_b32 v1, v0", "ds_load_b32 v1, v0 offset:4", "s_wait_dscnt 0x0", "v_mov_b32_e32 v2, v1") \
        == set()
    # ... but not use it as its address
    assert uses("ds_load_b32 v1, v0", "ds_load_b32 v2, v1") == {(1, 2)}


def test_returning_atomics_count_on_loadcnt():
    ret = "global_atomic_add_u32 v2, v2, v3, s[6:7] th:TH_ATOMIC_RETURN"
    assert uses(ret, "s_wait_loadcnt 0x0", "v_readfirstlane_b32 s5, v2") == set()
    assert uses(ret, "s_wait_storecnt 0x0", "v_readfirstlane_b32 s5, v2") == {(1, 3)}
    # no return: it writes no register
    assert uses("global_atomic_add_u32 v2, v3, s[6:7]", "v_readfirstlane_b32 s5, v2") == set()


def test_vgpr_remapping_kernels_are_noted_not_checked():
    text = kernel("s_set_vgpr_msb 0x41", "global_load_b32 v1, v0, s[0:1]", "v_add_f32_e32 v2, v1, v1")
    findings, notes = check_kernel(parse_kernel(text, "k"))
    assert findings == [] and notes == ["LDS052 not checked: s_set_vgpr_msb remaps VGPR numbers"]


def test_lds052_report_golden():
    findings, _ = check_kernel(parse_kernel(kernel("ds_load_b32 v1, v0", "v_mov_b32_e32 v3, v1",
                                                   "s_wait_dscnt 0x0"), "k"))
    text = render_text([KernelResult("k", 4, "byte offsets not measured", tuple(findings))])
    assert text == (GOLDEN / "lds052_use_before_wait.txt").read_text()
