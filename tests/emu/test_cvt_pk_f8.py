"""rocdl.cvt.pk.fp8.f32 / cvt.pk.bf8.f32 (v_cvt_pk_{fp8,bf8}_f32) on the virtual gfx1250: two f32
to OCP e4m3 / e5m2 bytes, packed into one half of the old word; a finite value that overflows
the format is refused by name (the unclamped result is not documented publicly)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp

from .test_ops import STORE_R, T, run

# a = tid * 0.75 - 20, b = 3 - tid / 8: normals, subnormal-free values of both signs, and ties
VALUES = """
      %tf = arith.sitofp %t : i32 to f32
      %k1 = arith.constant 0.75 : f32
      %k2 = arith.constant 20.0 : f32
      %k3 = arith.constant 0.125 : f32
      %k4 = arith.constant 3.0 : f32
      %m = arith.mulf %tf, %k1 : f32
      %a = arith.subf %m, %k2 : f32
      %d = arith.mulf %tf, %k3 : f32
      %b = arith.subf %k4, %d : f32
      %old = arith.constant 305419896 : i32"""


def _bytes(x, fmt):
    return np.asarray(x, np.float32).astype(fmt).view(np.uint8).astype(np.uint32)


@pytest.mark.parametrize("name, fmt", [("fp8", ml_dtypes.float8_e4m3fn), ("bf8", ml_dtypes.float8_e5m2)])
def test_cvt_pk_packs_both_halves_and_keeps_the_other(name, fmt):
    body = VALUES + f"""
      %lo = rocdl.cvt.pk.{name}.f32 %a, %b -> %old[false] : i32
      %r = rocdl.cvt.pk.{name}.f32 %b, %a -> %lo[true] : i32""" + STORE_R
    a = T.astype(np.float32) * 0.75 - 20
    b = 3 - T.astype(np.float32) / 8
    lo = (0x12345678 & 0xFFFF0000) | _bytes(a, fmt) | (_bytes(b, fmt) << 8)
    want = (lo & 0xFFFF) | ((_bytes(b, fmt) | (_bytes(a, fmt) << 8)) << 16)
    np.testing.assert_array_equal(run(body).view(np.uint32), want.astype(np.uint32))


def test_cvt_pk_fp8_uniform_operands_give_a_uniform_word():
    body = """
      %a = arith.constant -1.5 : f32
      %b = arith.constant 448.0 : f32
      %z = arith.constant 0 : i32
      %r = rocdl.cvt.pk.fp8.f32 %a, %b -> %z[false] : i32""" + STORE_R
    f8 = ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(run(body).view(np.uint32), _bytes(-1.5, f8) | (_bytes(448.0, f8) << 8))


def test_cvt_pk_fp8_refuses_a_finite_overflow_naming_the_op():
    body = """
      %tf = arith.sitofp %t : i32 to f32
      %k = arith.constant 16.0 : f32
      %a = arith.mulf %tf, %k : f32
      %z = arith.constant 0 : i32
      %r = rocdl.cvt.pk.fp8.f32 %a, %a -> %z[false] : i32""" + STORE_R
    with pytest.raises(UnsupportedOp, match=r"rocdl\.cvt\.pk\.fp8\.f32.*overflows"):
        run(body)  # lane 30 and up: 480 and more, past e4m3's 448 (464 still rounds to it)
