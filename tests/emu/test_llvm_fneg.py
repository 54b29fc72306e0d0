"""llvm.fneg (aiter's gfx1250 fmha builds it through the llvm dialect): the float's sign flips,
zero included, on scalars and vectors."""

from __future__ import annotations

import numpy as np

from .test_ops import T, run

STORE_F = """
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %r, %p : f32, !llvm.ptr<1>"""


def test_llvm_fneg_flips_the_sign_of_scalars_and_vectors():
    # x = tid - 32 (so lane 32 is +0.0); r = fneg(x) + lane 0 of fneg(<x, x>) ... kept per lane
    body = """
      %c32 = arith.constant 32 : i32
      %d = arith.subi %t, %c32 : i32
      %x = arith.sitofp %d : i32 to f32
      %n = llvm.fneg %x : f32
      %u = llvm.mlir.undef : vector<2xf32>
      %i0 = llvm.mlir.constant(0 : i32) : i32
      %v = llvm.insertelement %n, %u[%i0 : i32] : vector<2xf32>
      %nv = llvm.fneg %v : vector<2xf32>
      %r = llvm.extractelement %nv[%i0 : i32] : vector<2xf32>"""
    got = run(body.replace("%r = llvm.extractelement", "%r0 = llvm.extractelement") +
              "\n      %r = llvm.fneg %r0 : f32" + STORE_F, dtype=np.float32)
    want = -(T - 32).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[32]), "fneg(fneg(fneg(+0.0))) is -0.0"
