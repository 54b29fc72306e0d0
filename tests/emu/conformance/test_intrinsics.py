"""`llvm.call_intrinsic` against the public definitions of the intrinsics the virtual gfx1250
implements (`runtime/emu/ops/intrinsics.py` cites them): V_PERM_B32's byte select with its
special selectors, the f32 transcendental approximations as IEEE operations, the scheduling
hints as no-ops; an unknown intrinsic, or a hardware-register write that may change values,
is refused naming the intrinsic and the op's own line."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..test_ops import module
from .test_arith_ops import N, _run


def byte_permute(s0: int, s1: int, sel: int) -> int:
    """The ISA guide's BYTE_PERMUTE applied to each selector byte, on Python ints."""
    data = ((s0 & 0xFFFFFFFF) << 32) | (s1 & 0xFFFFFFFF)
    src = [(data >> (8 * i)) & 0xFF for i in range(8)]
    out = 0
    for k in range(4):
        b = (sel >> (8 * k)) & 0xFF
        if b >= 13:
            r = 0xFF
        elif b == 12:
            r = 0x00
        elif b >= 8:
            r = 0xFF if src[2 * (b - 8) + 1] & 0x80 else 0x00  # 8..11: sign of byte 1, 3, 5, 7
        else:
            r = src[b]
        out |= r << (8 * k)
    return out


PERM = "\n      %r = llvm.call_intrinsic \"llvm.amdgcn.perm\"(%x, %y, %z) : (i32, i32, i32) -> i32"


def _perm_case(sel_bytes):
    rng = np.random.default_rng(len(sel_bytes))
    s0 = rng.integers(-2**31, 2**31, N).astype(np.int32)
    s1 = rng.integers(-2**31, 2**31, N).astype(np.int32)
    s0[:4] = [0x11223344, -0x7F7F7F80, 0x00800080, -1]  # sign bits set and clear in each byte
    s1[:4] = [0x55667788, 0x7F00FF80, -0x7F00, 0]
    sel = np.array([sum(int(sel_bytes[(i + k) % len(sel_bytes)]) << (8 * k) for k in range(4)) for i in range(N)],
                   dtype=np.uint32).view(np.int32)
    got = _run(PERM, s0, s1, sel).view(np.uint32)
    want = np.array([byte_permute(int(a), int(b), int(c)) for a, b, c in zip(s0, s1, sel.view(np.uint32))],
                    dtype=np.uint32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("block", range(4))
def test_perm_every_selector_value_matches_the_isa_definition(block):
    _perm_case(np.arange(64 * block, 64 * block + 64))  # all 256 selector values, in four runs


def test_perm_special_selectors_are_constants_and_signs():
    s0 = np.full(N, 0x80FF7F01, np.uint32).view(np.int32)
    s1 = np.full(N, 0x00800180, np.uint32).view(np.int32)
    sel = np.full(N, 0x0F0D0C0C, np.uint32).view(np.int32)
    assert np.all(_run(PERM, s0, s1, sel).view(np.uint32) == 0xFFFF0000)  # 0x0c -> 0x00, 0x0d..0x0f -> 0xff
    sel = np.full(N, 0x0B0A0908, np.uint32).view(np.int32)
    # sign of byte 1 (0x01: 0), byte 3 (0x00: 0), byte 5 (0x7f: 0), byte 7 (0x80: 1) ... per selector 8, 9, 10, 11
    want = byte_permute(0x80FF7F01, 0x00800180, 0x0B0A0908)
    assert want == 0xFF000000
    assert np.all(_run(PERM, s0, s1, sel).view(np.uint32) == want)


_SPECIALS = np.array([1.0, 2.0, 0.5, 3.0, 1e-3, 1e30, 0.0, -0.0, -1.0, -4.0, np.inf, -np.inf, np.nan, 1e-40,
                      7.25, 123456.0], dtype=np.float32)
_FLOATS = np.concatenate([_SPECIALS, np.random.default_rng(3).standard_normal(N - 16).astype(np.float32) * 10])
_IEEE = {"rcp": lambda x: np.float32(1) / x, "rsq": lambda x: np.float32(1) / np.sqrt(x), "sqrt": np.sqrt,
         "exp2": np.exp2, "log": np.log2}


@pytest.mark.parametrize("kind", _IEEE)
def test_f32_approximations_are_the_ieee_operation(kind):
    line = f"\n      %r = llvm.call_intrinsic \"llvm.amdgcn.{kind}.f32\"(%x) : (f32) -> f32"
    got = _run(line, _FLOATS, in_type="f32", out_type="f32", out_dtype=np.float32)
    with np.errstate(all="ignore"):
        want = _IEEE[kind](_FLOATS).astype(np.float32)
    np.testing.assert_array_equal(got, want)


_HINTS = """
      %c0 = arith.constant 0 : i32
      %c3 = arith.constant 3 : i32
      %c154 = arith.constant 154 : i32
      %c1 = arith.constant 1 : i32
      llvm.call_intrinsic "llvm.amdgcn.s.setprio"(%c3) : (i32) -> ()
      llvm.call_intrinsic "llvm.amdgcn.sched.barrier"(%c0) : (i32) -> ()
      llvm.call_intrinsic "llvm.amdgcn.sched.group.barrier"(%c0, %c1, %c0) : (i32, i32, i32) -> ()
      llvm.call_intrinsic "llvm.amdgcn.s.sleep"(%c1) : (i32) -> ()
      llvm.call_intrinsic "llvm.amdgcn.s.setreg"(%c154, %c1) : (i32, i32) -> ()
      %r = arith.addi %x, %c3 : i32"""


def test_scheduling_hints_and_the_arbitration_stall_write_change_nothing():
    x = np.arange(N, dtype=np.int32) * 7
    np.testing.assert_array_equal(_run(_HINTS, x), x + 3)


def _refusal(body: str) -> UnsupportedOp:
    view = parse_module(module(body))
    with pytest.raises(UnsupportedOp) as info:
        run_kernel(view, "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[np.zeros(N, np.int32)])
    return info.value


def test_an_unknown_intrinsic_is_refused_naming_it_and_its_line():
    err = _refusal("""
      %r = llvm.call_intrinsic "llvm.amdgcn.frobnicate"(%t) : (i32) -> i32 loc("k.py":7:3)""")
    assert 'llvm.call_intrinsic "llvm.amdgcn.frobnicate"' in str(err) and "k.py:7:3" in str(err), str(err)


def test_a_mode_register_write_is_refused_naming_the_register():
    # hwreg id 1 (MODE), offset 0, size 4: the float rounding mode, which changes values
    imm = 1 | (0 << 6) | ((4 - 1) << 11)
    err = _refusal(f"""
      %c = arith.constant {imm} : i32
      %v = arith.constant 3 : i32
      llvm.call_intrinsic "llvm.amdgcn.s.setreg"(%c, %v) : (i32, i32) -> () loc("k.py":9:5)""")
    assert 'llvm.call_intrinsic "llvm.amdgcn.s.setreg"' in str(err) and "hwreg id 1, offset 0, size 4" in str(err), str(err)
    assert "k.py:9:5" in str(err)


@pytest.mark.parametrize("kind", ["rcp", "rsq", "log"])
def test_f16_approximations_round_the_f32_result_to_f16(kind):
    with np.errstate(over="ignore"):
        h = _FLOATS.astype(np.float16)  # 1e30 becomes inf: a special value too
    line = f"\n      %r = llvm.call_intrinsic \"llvm.amdgcn.{kind}.f16\"(%x) : (f16) -> f16"
    got = _run(line, h, in_type="f16", out_type="f16", out_dtype=np.float16)
    with np.errstate(all="ignore"):
        want = _IEEE[kind](h.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)
