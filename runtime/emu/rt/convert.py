"""Conversions between integer and float types, bit casts, float math widening and dense
constants. Floats round to nearest even (ml_dtypes for bf16 / fp8)."""

from __future__ import annotations

import math

import numpy as np

from ldssan.passes.ir.types import _FLOATS as DTYPES  # noqa: F401  (generated code names bf16/fp8 dtypes through R)
from ldssan.passes.ir.types import UNSIGNED, parse_type

from .ints import as_unsigned


def trunci(x, dtype):
    x = np.asarray(x)
    if dtype == np.bool_:
        return (x & 1).astype(np.bool_)
    return x.astype(dtype)


def extui(x, dtype):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x.astype(dtype)
    return as_unsigned(x).astype(dtype)


def extsi(x, dtype):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return np.where(x, -1, 0).astype(dtype)
    return x.astype(dtype)


def uitofp(x, dtype):
    x = np.asarray(x)
    return (x if x.dtype == np.bool_ else as_unsigned(x)).astype(np.float64).astype(dtype)


def fptosi(x, dtype):
    info = np.iinfo(dtype)
    f = np.asarray(x, dtype=np.float64)
    return np.clip(np.nan_to_num(np.trunc(f)), info.min, info.max).astype(dtype)


def fptoui(x, dtype):
    u = UNSIGNED[np.dtype(dtype).itemsize * 8]
    info = np.iinfo(u)
    f = np.asarray(x, dtype=np.float64)
    return np.clip(np.nan_to_num(np.trunc(f)), 0, info.max).astype(u).view(dtype)


def fconv(x, dtype):
    """Float conversion with round-to-nearest-even (ml_dtypes for bf16/fp8)."""
    x = np.asarray(x)
    if x.dtype.itemsize < 4 and np.dtype(dtype).itemsize < 4 and x.dtype != dtype:
        x = x.astype(np.float32)
    return x.astype(dtype)


def flush_denormals(x):
    """arith.flush_denormals: a subnormal becomes a zero of its sign; everything else is kept."""
    import ml_dtypes

    x = np.asarray(x)
    tiny = ml_dtypes.finfo(x.dtype).smallest_normal
    sub = (x != 0) & (np.abs(x) < tiny)
    return np.where(sub, np.copysign(np.zeros_like(x), x), x).astype(x.dtype)


_APPROX = {
    "rcp": lambda x: np.float32(1) / x, "rsq": lambda x: np.float32(1) / np.sqrt(x), "sqrt": np.sqrt,
    "exp2": np.exp2, "log": np.log2,
}


def amdgcn_approx(kind: str, x, dtype):
    """V_RCP/RSQ/SQRT/EXP/LOG (log and exp are base 2) as correctly rounded f32 IEEE operations,
    rounded to `dtype`: the hardware's approximations differ by their documented error."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        return _APPROX[kind](np.asarray(x, dtype=np.float32)).astype(dtype)


def bitcast_lanes(x, dtype, vec: int | None):
    """bitcast of a per-lane value: scalar (L,) or vector (L, n)."""
    a = np.ascontiguousarray(x)
    if a.ndim == 1:
        a = a[:, None]
    out = a.view(dtype)
    return out[:, 0] if vec is None else out


def bitcast_uniform(x, dtype, vec: int | None):
    a = np.ascontiguousarray(np.asarray(x)).reshape(-1)
    out = a.view(dtype)
    return out[0] if vec is None else out


def fwide(x):
    """Float math operand: float32 (bf16/f16/fp8 widened), float64 kept."""
    a = np.asarray(x)
    return a if a.dtype == np.float64 else a.astype(np.float32)


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _ERF(x)


def dense(text: str, type_text: str):
    """A dense elements constant (`dense<...> : vector<..>`) as a uniform value."""
    t = parse_type(type_text)
    dt = t.scalar.dtype
    body = text[text.index("<") + 1: text.rindex(">", 0, text.rindex(":"))].strip()
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        arr = np.frombuffer(raw, dtype=dt).copy()
        if arr.size == 1 and t.count > 1:
            arr = np.full(t.count, arr[0], dtype=dt)
    else:
        vals = body.strip("[]").split(",")
        conv = (lambda s: s.strip() == "true") if dt == np.bool_ else (float if dt.kind in "fV" else int)
        nums = [conv(v) for v in vals]
        arr = np.array(nums, dtype=np.float64 if dt.kind in "fV" else None).astype(dt)
        if arr.size == 1:
            arr = np.full(t.count or 1, arr[0], dtype=dt)
    return arr if t.kind == "vector" else arr[0]
