"""Shifts by a constant and unsigned compares of words, which the emitter writes as numpy
expressions of their own (ops/arith.py `shift`, `cmpi`), against numpy on the same lanes:
negative values, counts 0 and width - 1, a count past the width (the `R.shli` / `R.shrui`
path: 0), and a count only known at run time."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu.launch import parse_module, run_kernel

LANES = np.arange(64, dtype=np.int64)
X = ((LANES * 0x9E3779B1) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)  # every sign, every bit


def _run(op: str, rhs: str) -> np.ndarray:
    text = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @kern(%out: !llvm.ptr<1>) kernel {{
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
      %m = arith.constant -1640531535 : i32
      %x = arith.muli %t, %m : i32
      {rhs}
      %r0 = {op}
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>
      gpu.return
    }}
  }}
}}"""
    out = np.zeros(64, np.int32)
    run_kernel(parse_module(text), "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[out], policy="round-robin")
    return out


def _shift(op: str, count: int | None) -> np.ndarray:
    # a per-lane count (t + 7, past the width from lane 25 on) takes the generic path
    rhs = (f"%c = arith.constant {count} : i32" if count is not None else
           "%c7 = arith.constant 7 : i32\n      %c = arith.addi %t, %c7 : i32")
    return _run(f"{op} %x, %c : i32\n      %r = arith.addi %r0, %r0 : i32", rhs)


def _expect(op: str, counts) -> np.ndarray:
    u = X.view(np.uint32).astype(np.uint64)
    n = np.broadcast_to(np.asarray(counts, np.uint64), u.shape)
    got = np.where(n >= 32, 0, (u << (n % 32)) if op == "arith.shli" else (u >> (n % 32)))
    r = (got & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    return (r.astype(np.int64) * 2 & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("op", ["arith.shli", "arith.shrui"])
@pytest.mark.parametrize("count", [0, 1, 31, 32])
def test_a_shift_by_a_constant_matches_numpy(op, count):
    np.testing.assert_array_equal(_shift(op, count), _expect(op, count))


@pytest.mark.parametrize("op", ["arith.shli", "arith.shrui"])
def test_a_shift_by_a_per_lane_count_matches_numpy(op):
    np.testing.assert_array_equal(_shift(op, None), _expect(op, LANES + 7))


@pytest.mark.parametrize("pred,ref", [("ult", np.less), ("ule", np.less_equal), ("ugt", np.greater),
                                      ("uge", np.greater_equal), ("slt", np.less)])
def test_an_unsigned_compare_of_words_matches_numpy(pred, ref):
    # against a constant with the sign bit set, so a signed compare would answer otherwise
    got = _run(f"arith.cmpi {pred}, %x, %c : i32\n      %r = arith.extui %r0 : i1 to i32",
               "%c = arith.constant -1000 : i32")
    signed = pred.startswith("s")
    lhs = X if signed else X.view(np.uint32)
    rhs = np.int32(-1000) if signed else np.int32(-1000).view(np.uint32)
    np.testing.assert_array_equal(got, ref(lhs, rhs).astype(np.int32))
