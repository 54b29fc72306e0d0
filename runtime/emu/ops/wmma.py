"""gfx1250 WMMA (wave32, 16x16xK): D = A·Bᵀ + C with the hardware lane layouts.

Lane layouts (as FlyDSL's gfx1250 MMA atoms define them; re-derived, not copied):
- A (16xK) and B (16xK, i.e. N x K): lane l holds row l % 16; its value i (of K/2) sits at
  K = (i // 8) * 16 + (l // 16) * 8 + i % 8 for 8/16-bit elements, K = (l // 16) * 2 + i for f32.
- C/D (16x16): lane l, value v: M = (l // 16) * 8 + v, N = l % 16.
Products are exact and accumulate in float64, rounded once to the accumulator type: within
tolerance of the hardware, whose internal accumulation order is undocumented.
"""

from __future__ import annotations

import functools
import re

import ml_dtypes
import numpy as np

from ldssan.passes.ir.irview import Op
from . import emits

_ELEM = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32,
         "fp8": ml_dtypes.float8_e4m3fn, "bf8": ml_dtypes.float8_e5m2, "iu8": np.int8, "i8": np.int8}
_NAME = re.compile(r"rocdl\.wmma\.(\w+)\.16x16x(\d+)\.(\w+)$")


@functools.lru_cache(maxsize=None)
def _layout_ab(K: int, elem_bits: int) -> tuple[np.ndarray, np.ndarray]:
    lane = np.arange(32)[:, None]
    i = np.arange(K // 2)[None, :]
    if elem_bits == 32:
        k = (lane // 16) * 2 + i
    else:
        k = (i // 8) * 16 + (lane // 16) * 8 + i % 8
    rows = np.broadcast_to(lane % 16, k.shape).copy()
    rows.flags.writeable = False
    k.flags.writeable = False
    return rows, k


_LANE = np.arange(32)[:, None]
_CD_M = (_LANE // 16) * 8 + np.arange(8)[None, :]
_CD_N = np.broadcast_to(_LANE % 16, (32, 8))


def _matrix(frag: np.ndarray, dtype, K: int) -> np.ndarray:
    """Per-lane fragments (L, bytes) -> (B, 16, K) float64 matrices."""
    raw = np.ascontiguousarray(frag)
    vals = raw.view(np.uint8).reshape(raw.shape[0], -1).view(dtype).astype(np.float64)
    B = vals.shape[0] // 32
    if vals.shape[1] != K // 2:
        raise ValueError(f"WMMA fragment has {vals.shape[1]} elements per lane, expected {K // 2}")
    rows, ks = _layout_ab(K, np.dtype(dtype).itemsize * 8)
    mat = np.zeros((B, 16, K))
    mat[:, rows, ks] = vals.reshape(B, 32, K // 2)
    return mat


def wmma(a, b, c, a_dtype, b_dtype, K: int):
    A = _matrix(a, a_dtype, K)
    Bm = _matrix(b, b_dtype, K)
    c = np.asarray(c)
    Bn = A.shape[0]
    acc_dtype = c.dtype
    C = np.zeros((Bn, 16, 16))
    C[:, _CD_M, _CD_N] = c.reshape(Bn, 32, 8).astype(np.float64)
    D = A @ Bm.transpose(0, 2, 1) + C
    return D[:, _CD_M, _CD_N].reshape(Bn * 32, 8).astype(acc_dtype)


def _types(op: Op):
    m = _NAME.match(op.name)
    if not m:
        return None
    K, ab = int(m.group(2)), m.group(3)  # the accumulator type comes from the C operand
    parts = ab.split("_")
    a_t, b_t = (parts[0], parts[1]) if len(parts) == 2 else (parts[0], parts[0])
    if a_t not in _ELEM or b_t not in _ELEM:
        return None
    return K, a_t, b_t


def emit_wmma(t, op: Op) -> None:
    parsed = _types(op)
    if parsed is None or len(op.operands) != 3:
        raise t.unsupported(op, "WMMA variant not emulated")
    modc = op.attr("modC")
    if modc not in (None, 0, False) and "none" not in str(getattr(modc, "text", modc)):
        raise t.unsupported(op, f"WMMA C modifier {getattr(modc, 'text', modc)}")
    if op.attr("signA") or op.attr("signB"):
        raise t.unsupported(op, "WMMA sign modifiers")
    K, a_t, b_t = parsed
    a, b, c = (t.lanes(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = R.wmma({a}, {b}, {c}, R.WMMA_ELEM[{a_t!r}], R.WMMA_ELEM[{b_t!r}], {K})")


# The gfx1250 shapes the layouts above describe (FlyDSL's gfx1250 atom verifier agrees);
# other rocdl.wmma variants (gfx11/gfx12 shapes) have other layouts and stay unsupported.
_GFX1250_K = {"f32": (4,), "f16": (32,), "bf16": (32,), "fp8": (64, 128), "bf8": (64, 128), "iu8": (64,)}


def register_variants(names) -> None:
    for name in names:
        m = _NAME.match(name)
        if not m or m.group(1) not in ("f32", "f16", "bf16", "i32"):
            continue
        K, ab = int(m.group(2)), m.group(3).split("_")
        if all(K in _GFX1250_K.get(x, ()) for x in ab):
            emits(name)(emit_wmma)


def _rocdl_wmma_names() -> list[str]:
    from flydsl._mlir.dialects import _rocdl_ops_gen as gen

    return sorted({v.OPERATION_NAME for v in vars(gen).values()
                   if isinstance(getattr(v, "OPERATION_NAME", None), str) and v.OPERATION_NAME.startswith("rocdl.wmma.")})


register_variants(_rocdl_wmma_names())
