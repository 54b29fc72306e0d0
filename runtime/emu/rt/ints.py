"""Integer semantics of MLIR on numpy: fixed-width wrap-around, C-style signed division
(x / 0 is not trapped: the divisor is replaced by 1, the result is then unspecified as in
LLVM), unsigned views for unsigned ops, shift counts past the width, comparisons and bit
counts."""

from __future__ import annotations

import numpy as np

from ldssan.passes.ir.types import UNSIGNED


def as_unsigned(x):
    a = np.asarray(x)
    return a.view(UNSIGNED[a.dtype.itemsize * 8]) if a.dtype.kind == "i" else a


def _like(x, like):
    return np.asarray(x).view(np.asarray(like).dtype)


def divsi(a, b):
    a, b = np.asarray(a), np.asarray(b)
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where((a < 0) != (safe < 0), -q, q).astype(a.dtype)


def remsi(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.fmod(a, np.where(b == 0, 1, b)).astype(a.dtype)


def divui(a, b):
    ua, ub = as_unsigned(a), as_unsigned(b)
    return _like(ua // np.where(ub == 0, 1, ub), a)


def remui(a, b):
    ua, ub = as_unsigned(a), as_unsigned(b)
    return _like(ua % np.where(ub == 0, 1, ub), a)


def floordivsi(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a // np.where(b == 0, 1, b)).astype(a.dtype)


def ceildivsi(a, b):
    # floor, then one up when inexact: negating a first would overflow at INT_MIN
    a, b = np.asarray(a), np.asarray(b)
    safe = np.where(b == 0, 1, b).astype(a.dtype)
    q = a // safe
    return (q + (a - q * safe != 0)).astype(a.dtype)


def ceildivui(a, b):
    # unsigned quotient rounded up; a zero divisor is replaced by 1 like divui (LLVM: undefined)
    ua, ub = as_unsigned(a), as_unsigned(b)
    safe = np.where(ub == 0, 1, ub)
    q = ua // safe + (ua % safe != 0)
    return _like(q.astype(ua.dtype), a)


def perm(s0, s1, sel):
    """V_PERM_B32: result byte k = BYTE_PERMUTE({s0, s1}, sel byte k) (s1 is the low dword);
    selectors 0..7 pick a byte, 8..11 spread the sign bit of byte 1/3/5/7, 12 gives 0x00 and
    13..255 give 0xff (the ISA guide's definition)."""
    s0, s1, sel = np.broadcast_arrays(*(as_unsigned(np.asarray(v)).astype(np.uint64) for v in (s0, s1, sel)))
    data = (s0 << np.uint64(32)) | s1
    out = np.zeros(data.shape, np.uint64)
    for k in range(4):
        b = (sel >> np.uint64(8 * k)) & np.uint64(0xFF)
        byte = (data >> (np.minimum(b, 7) * np.uint64(8))) & np.uint64(0xFF)
        signs = [((data >> np.uint64(8 * i + 7)) & np.uint64(1)) * np.uint64(0xFF) for i in (1, 3, 5, 7)]
        r = np.select([b >= 13, b == 12, b == 11, b == 10, b == 9, b == 8],
                      [np.uint64(0xFF), np.uint64(0), signs[3], signs[2], signs[1], signs[0]], byte)
        out |= r.astype(np.uint64) << np.uint64(8 * k)
    return out.astype(np.uint32).view(np.int32)


def shli(a, b):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    return np.where(np.asarray(b) >= bits, 0, np.left_shift(a, np.asarray(b) % bits)).astype(a.dtype)


def shrsi(a, b):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    return np.right_shift(a, np.minimum(np.asarray(b), bits - 1)).astype(a.dtype)


def shrui(a, b):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    ua = as_unsigned(a)
    sb = np.asarray(b).astype(np.int64)
    r = np.where(sb >= bits, 0, np.right_shift(ua, (sb % bits).astype(ua.dtype)))
    return _like(r.astype(ua.dtype), a)


def umax(a, b):
    return _like(np.maximum(as_unsigned(a), as_unsigned(b)), a)


def umin(a, b):
    return _like(np.minimum(as_unsigned(a), as_unsigned(b)), a)


_ICMP = {
    0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
    5: np.greater_equal,
}


def cmpi(pred: int, a, b):
    if pred <= 5:
        return _ICMP[pred](a, b)
    ua, ub = as_unsigned(a), as_unsigned(b)
    return _ICMP[pred - 4](ua, ub)


_FCMP_ORDERED = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
                 6: np.not_equal}


def cmpf(pred: int, a, b):
    a = np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind == "V" else np.asarray(a)
    unordered = np.isnan(a) | np.isnan(b)
    if pred == 0:
        return np.zeros(np.broadcast(a, b).shape, bool)
    if pred == 15:
        return np.ones(np.broadcast(a, b).shape, bool)
    if pred == 7:
        return ~unordered
    if pred == 14:
        return unordered
    if pred <= 6:
        return _FCMP_ORDERED[pred](a, b) & ~unordered
    return _FCMP_ORDERED[pred - 7](a, b) | unordered


def _popcount(a):
    u = as_unsigned(np.asarray(a))
    bytes_ = np.ascontiguousarray(u).reshape(u.shape + (1,)).view(np.uint8)
    return np.unpackbits(bytes_, axis=-1).sum(axis=-1)


def ctpop(x):
    a = np.asarray(x)
    return _popcount(a).astype(a.dtype)[()]


def cttz(x):
    a = np.asarray(x)
    bits = a.dtype.itemsize * 8
    u = a.view(UNSIGNED[bits]).astype(np.uint64)
    low = u & (~u + np.uint64(1))  # isolate lowest set bit
    out = np.where(u == 0, bits, np.log2(np.where(low == 0, 1, low).astype(np.float64)).astype(np.int64))
    return out.astype(a.dtype)[()]


def ctlz(x):
    a = np.asarray(x)
    bits = a.dtype.itemsize * 8
    u = a.view(UNSIGNED[bits]).astype(np.float64)
    out = np.where(u == 0, bits, bits - 1 - np.floor(np.log2(np.where(u == 0, 1, u))).astype(np.int64))
    return out.astype(a.dtype)[()]
