"""arith ops against their MLIR definitions (mlir.llvm.org, 'arith' dialect): integer division
rounded up/down for signed and unsigned operands, unsigned min/max, the borrow of
subui_extended, flush_denormals and convertf. Expected values are plain Python on the inputs.

A zero divisor is undefined behaviour in MLIR/LLVM; the virtual gfx1250 replaces it by 1 for
every division (divui, ceildivui, ...), so x / 0 == x: the tests pin that it is consistent,
never a crash. INT_MIN / -1 (signed overflow, also undefined) is left out."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..test_ops import module

N = 64
_EDGES = [0, 1, 2, 3, 7, -1, -2, -3, -7, 2**31 - 1, -2**31, 2**31 - 2, 100, -100, 12345, -12345]
_DIVS = [1, 2, 3, 7, -1, -2, -3, -7, 2**31 - 1, -2**31, 5, -5, 16, 1000, 0, 0]


def _pairs():
    rng = np.random.default_rng(26)
    a = np.array(_EDGES * 2 + list(rng.integers(-2**31, 2**31, N - 32)), dtype=np.int64)
    b = np.array(_DIVS + _DIVS[::-1] + list(rng.integers(-2**31, 2**31, N - 32)), dtype=np.int64)
    keep = ~((a == -2**31) & (b == -1))
    a = np.where(keep, a, 5)
    return a.astype(np.int32), b.astype(np.int32)


A, B = _pairs()
U32 = 1 << 32


def _run(op_lines: str, *inputs, in_type="i32", out_type="i32", out_dtype=np.int32):
    """Run `op_lines` (reading %x, %y, %z: lane t's element of each input, of `in_type`) in 64
    lanes; return the 64 values of %r."""
    names = ("x", "y", "z")[:len(inputs)]
    loads = "".join(f"""
      %p{n} = llvm.getelementptr %{n}in[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {in_type}
      %{n} = llvm.load %p{n} : !llvm.ptr<1> -> {in_type}""" for n in names)
    body = loads + op_lines + f"""
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {out_type}
      llvm.store %r, %p : {out_type}, !llvm.ptr<1>"""
    params = "%out: !llvm.ptr<1>" + "".join(f", %{n}in: !llvm.ptr<1>" for n in names)
    out = np.zeros(N, dtype=out_dtype)
    run_kernel(parse_module(module(body, params)), "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[out, *inputs])
    return out


def _wrap(v: int) -> int:
    v %= U32
    return v - U32 if v >= 2**31 else v


def _u(v) -> int:
    return int(v) % U32


def _ceil_u(a, b):
    ua, ub = _u(a), _u(b) or 1
    return _wrap(-(-ua // ub))


def _ceil_s(a, b):
    a, b = int(a), int(b) or 1
    return _wrap(-(-a // b))


def _floor_s(a, b):
    a, b = int(a), int(b) or 1
    return _wrap(a // b)


DEFINITIONS = {
    "ceildivui": _ceil_u,
    "ceildivsi": _ceil_s,
    "floordivsi": _floor_s,
    "divui": lambda a, b: _wrap(_u(a) // (_u(b) or 1)),
    "maxui": lambda a, b: _wrap(max(_u(a), _u(b))),
    "minui": lambda a, b: _wrap(min(_u(a), _u(b))),
    "maxsi": lambda a, b: max(int(a), int(b)),
    "minsi": lambda a, b: min(int(a), int(b)),
}


@pytest.mark.parametrize("name", DEFINITIONS)
def test_integer_op_matches_its_definition(name):
    got = _run(f"\n      %r = arith.{name} %x, %y : i32", A, B)
    want = np.array([DEFINITIONS[name](a, b) for a, b in zip(A, B)], dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(got, want, err_msg=f"arith.{name} on {list(zip(A, B))}")


def test_ceildivui_rounds_up_on_unsigned_values_not_signed_ones():
    # -1 is 0xFFFFFFFF unsigned: ceil(4294967295 / 2) = 2147483648, which is -2**31 as i32
    a = np.full(N, -1, np.int32)
    b = np.full(N, 2, np.int32)
    np.testing.assert_array_equal(_run("\n      %r = arith.ceildivui %x, %y : i32", a, b), -2**31)


def test_ceildivui_by_zero_is_treated_like_divui_by_zero():
    b = np.zeros(N, np.int32)
    ceil = _run("\n      %r = arith.ceildivui %x, %y : i32", A, b)
    div = _run("\n      %r = arith.divui %x, %y : i32", A, b)
    np.testing.assert_array_equal(ceil, div)


def test_subui_extended_returns_the_difference_and_the_borrow():
    diff = _run("\n      %r, %o = arith.subui_extended %x, %y : i32, i1", A, B)
    borrow = _run("\n      %d, %o = arith.subui_extended %x, %y : i32, i1"
                  "\n      %r = arith.extui %o : i1 to i32", A, B)
    np.testing.assert_array_equal(diff, [_wrap(int(a) - int(b)) for a, b in zip(A, B)])
    np.testing.assert_array_equal(borrow, [int(_u(a) < _u(b)) for a, b in zip(A, B)])


def test_flush_denormals_zeroes_subnormals_keeping_their_sign():
    tiny = np.finfo(np.float32).tiny
    vals = np.array([tiny, -tiny, tiny / 2, -tiny / 2, tiny / 1024, -tiny / 1024, 0.0, -0.0, 1.5, -2.5,
                     np.inf, -np.inf, np.nan, 1e-38, -1e-39, 3e-45] * 4, dtype=np.float32)
    got = _run("\n      %r = arith.flush_denormals %x : f32", vals, in_type="f32", out_type="f32",
               out_dtype=np.float32)
    sub = (vals != 0) & (np.abs(vals) < tiny)
    want = np.where(sub, np.copysign(np.float32(0), vals), vals)
    np.testing.assert_array_equal(got.view(np.int32), want.astype(np.float32).view(np.int32))


def test_convertf_f16_to_bf16_rounds_to_nearest_even():
    rng = np.random.default_rng(7)
    h = np.concatenate([np.array([1.0, -1.0, 65504.0, 6.1e-5, 1.0009765625, 3.140625, np.inf, -0.0]),
                        rng.standard_normal(N - 8) * 100]).astype(np.float16)
    got = _run("\n      %r = arith.convertf %x : f16 to bf16", h, in_type="f16", out_type="bf16",
               out_dtype=ml_dtypes.bfloat16)
    want = h.astype(np.float32).astype(ml_dtypes.bfloat16)  # f16 -> f32 is exact: one rounding
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
