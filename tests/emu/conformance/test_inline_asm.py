"""`llvm.inline_asm` by table: the strings real gfx1250 kernels use (ROCm/aiter's FlyDSL
kernels) against the ISA's definitions -- `s_and_b32` (bitwise AND with the immediate), the
empty asm (no instruction: the operand), `s_nop` (nothing), `s_wait_dscnt N` / `s_wait_idle`
(counter waits, instrumented as the rocdl waits) -- and everything else refused naming the
asm text and the op's own line."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.passes.instrument import InstrumentationError
from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..sanitized import sanitize_mlir
from ..test_ops import STORE_R, module

N = 64


def _run(body: str, policy="round-robin") -> np.ndarray:
    out = np.zeros(N, np.int32)
    run_kernel(parse_module(module(body + STORE_R)), "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[out],
               policy=policy)
    return out


@pytest.mark.parametrize("policy", ["round-robin", "lockstep"])
def test_value_asm_matches_the_isa(policy):
    body = """
      %big = arith.constant -7 : i32
      %x = arith.muli %t, %big : i32
      %a = llvm.inline_asm has_side_effects "s_and_b32 $0, $1, 0x8000000f", "=s,s,~{scc}" %x : (i32) -> i32
      %b = llvm.inline_asm "", "=v,v" %a : (i32) -> i32
      llvm.inline_asm has_side_effects "s_nop 7", "" : () -> ()
      %r = arith.addi %b, %t : i32"""
    x = (np.arange(N) * -7).astype(np.int64)
    expected = ((x & 0x8000000F).astype(np.uint32).view(np.int32) + np.arange(N)).astype(np.int32)
    np.testing.assert_array_equal(_run(body, policy), expected)


# Each lane stores t at word t; `wait` then a bare s_barrier (no fence: only a completed
# store is published); every lane reads word 63 - t (line 15).
EXCHANGE = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c63 = arith.constant 63 : i32
      %w = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %t, %w : i32, !llvm.ptr<3> loc("k.py":11:5)
      {wait}
      rocdl.s.barrier
      %j = arith.subi %c63, %t : i32
      %q = llvm.getelementptr %base[%j] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q : !llvm.ptr<3> -> i32 loc("k.py":15:9)""" + STORE_R


@pytest.mark.parametrize("wait", ['"s_wait_dscnt 0x0"', '"s_wait_idle"'])
def test_asm_waits_complete_the_stores_they_cover(wait):
    clean = sanitize_mlir(module(EXCHANGE.format(wait=f"llvm.inline_asm has_side_effects {wait}, \"\" : () -> ()")),
                          [np.zeros(N, np.int32)])
    assert clean.clean, clean.violations
    racy = sanitize_mlir(module(EXCHANGE.format(wait="llvm.inline_asm has_side_effects \"s_nop 0\", \"\" : () -> ()")),
                         [np.zeros(N, np.int32)])
    assert ("LDS001", 15, 11) in {(v.code, v.site.line, v.other_site.line) for v in racy.violations}


def test_other_asm_is_refused_naming_its_text_and_line():
    body = """
      %r = llvm.inline_asm "v_permlanex16_b32 $0, $1, 0, 0", "=v,0" %t : (i32) -> i32 loc("k.py":9:3)"""
    with pytest.raises(UnsupportedOp, match=r'llvm.inline_asm "v_permlanex16_b32 \$0, \$1, 0, 0"\' at k.py:9:3'):
        _run(body)


def test_a_table_string_in_an_unmodelled_form_is_refused():
    # an output tied to the operand with no result: a register changed behind the IR's back
    body = """
      llvm.inline_asm has_side_effects "s_and_b32 $0, $1, 1", "=s,0" %t : (i32) -> () loc("k.py":9:3)
      %r = arith.addi %t, %t : i32"""
    with pytest.raises(UnsupportedOp, match=r'llvm.inline_asm "s_and_b32.*k.py:9:3'):
        _run(body)


def test_the_pass_refuses_unknown_asm_that_may_touch_lds():
    body = """
      llvm.inline_asm has_side_effects "ds_write_b32 $0, $1", "v,v" %t, %t : (i32, i32) -> () loc("k.py":9:3)
      %r = arith.addi %t, %t : i32"""
    with pytest.raises(InstrumentationError, match=r"llvm.inline_asm' at k.py:9 \(asm \"ds_write_b32"):
        sanitize_mlir(module(body + STORE_R), [np.zeros(N, np.int32)])
