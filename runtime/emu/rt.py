"""Runtime library called by generated wave code (`R.` in the generated source).

Everything here is per wave and vectorised over the wave's L lanes. Masked lanes never
touch memory. Integer arithmetic keeps MLIR semantics: fixed-width wrap-around, C-style
signed division, unsigned views for unsigned ops.
"""

from __future__ import annotations

import numpy as np

from .memory import EmuMemoryError
from ldssan.passes.ir.types import _FLOATS as DTYPES  # noqa: F401  (generated code names bf16/fp8 dtypes through R)
from ldssan.passes.ir.types import UNSIGNED, parse_type

# ----------------------------------------------------------------------------- shapes


def lanes(x, L: int):
    """Broadcast a uniform value to per-lane shape: scalar -> (L,), vector (n,) -> (L, n)."""
    if isinstance(x, tuple):
        return tuple(lanes(e, L) for e in x)
    a = np.asarray(x)
    if a.ndim == 0:
        return np.full(L, a, dtype=a.dtype)
    return np.broadcast_to(a, (L,) + a.shape).copy()


def _cond(c, x):
    c = np.asarray(c)
    x = np.asarray(x)
    while c.ndim < x.ndim:
        c = c[..., None]
    return c


def select(c, a, b):
    """Per-lane select that broadcasts a per-lane condition over vector lanes."""
    if isinstance(a, tuple):
        return tuple(select(c, x, y) for x, y in zip(a, b))
    a = np.asarray(a)
    return np.where(_cond(c, a), a, b).astype(a.dtype, copy=False)


def merge(c, then, other):
    """Result of a divergent scf.if: `then` where c, else `other` (None = side not run)."""
    if then is None:
        return other
    if other is None:
        return then
    return select(c, then, other)


def keep(active, new, old):
    """Loop-carried value under a loop mask: lanes still looping take `new`."""
    if old is None:
        return new
    return select(active, new, old)


# ----------------------------------------------------------------------------- integers


def _u(x):
    a = np.asarray(x)
    return a.view(UNSIGNED[a.dtype.itemsize * 8]) if a.dtype.kind == "i" else a


def _s(x, like):
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
    ua, ub = _u(a), _u(b)
    return _s(ua // np.where(ub == 0, 1, ub), a)


def remui(a, b):
    ua, ub = _u(a), _u(b)
    return _s(ua % np.where(ub == 0, 1, ub), a)


def floordivsi(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a // np.where(b == 0, 1, b)).astype(a.dtype)


def ceildivsi(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (-((-a) // np.where(b == 0, 1, b))).astype(a.dtype)


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
    ua = _u(a)
    sb = np.asarray(b).astype(np.int64)
    r = np.where(sb >= bits, 0, np.right_shift(ua, (sb % bits).astype(ua.dtype)))
    return _s(r.astype(ua.dtype), a)


def umax(a, b):
    return _s(np.maximum(_u(a), _u(b)), a)


def umin(a, b):
    return _s(np.minimum(_u(a), _u(b)), a)


_ICMP = {
    0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
    5: np.greater_equal,
}


def cmpi(pred: int, a, b):
    if pred <= 5:
        return _ICMP[pred](a, b)
    ua, ub = _u(a), _u(b)
    return _ICMP[pred - 4](ua, ub)


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
    base = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal,
            6: np.not_equal}
    if pred <= 6:
        return base[pred](a, b) & ~unordered
    return base[pred - 7](a, b) | unordered


def trunci(x, dtype):
    x = np.asarray(x)
    if dtype == np.bool_:
        return (x & 1).astype(np.bool_)
    return x.astype(dtype)


def extui(x, dtype):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x.astype(dtype)
    return _u(x).astype(dtype)


def extsi(x, dtype):
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return np.where(x, -1, 0).astype(dtype)
    return x.astype(dtype)


def uitofp(x, dtype):
    x = np.asarray(x)
    return (x if x.dtype == np.bool_ else _u(x)).astype(np.float64).astype(dtype)


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


def erf(x):
    from math import erf as _erf

    return np.vectorize(_erf, otypes=[np.float64])(x)


def _popcount(a):
    a = np.asarray(a)
    u = a.view(UNSIGNED[a.dtype.itemsize * 8]) if a.dtype.kind == "i" else a
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


# ----------------------------------------------------------------------------- memory


def _active(ctx, mask):
    return mask is ctx.mask and ctx.mask_full


def lds_load(ctx, addr, dtype, count, mask):
    """ds_load: per-lane LDS byte offsets -> (L, count) elements (0 for inactive lanes)."""
    L = ctx.L
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (L,))
    nb = dtype.itemsize * count
    if ctx.ds_queue:
        ctx.flush_ds()  # the wave's own LDS queue is in order: it reads its earlier stores
    arr, idx, ok = ctx.lds.index(ctx.group_base, addr, nb)
    ok &= mask
    raw = arr[idx]
    if not ok.all():
        if not ctx.lds_oob_ok:
            _lds_oob(ctx, addr, nb, mask)
        raw[~ok] = 0
    return raw.view(dtype).reshape(L, count)


def lds_store(ctx, addr, data, mask, *, queued: bool = True):
    """ds_store (queued in the wave's LDS queue under delaying policies); `queued=False` for
    copy engines, whose data lands when the copy completes."""
    L = ctx.L
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (L,))
    raw = np.ascontiguousarray(np.broadcast_to(data, (L,) + np.shape(data)[1:] if np.ndim(data) else (L,)))
    raw = raw.view(np.uint8).reshape(L, -1)
    arr, idx, ok = ctx.lds.index(ctx.group_base, addr, raw.shape[1])
    if arr is not ctx.lds.data:
        raw = raw.view(np.uint32)
    ok &= mask
    if not ok.all():
        if not ctx.lds_oob_ok:
            _lds_oob(ctx, addr, raw.shape[1] * raw.itemsize, mask)
        idx, raw = idx[ok], raw[ok]
    if queued and ctx.ds_queue is not None:
        ctx.ds_queue.append((arr, idx, raw))  # lands at the wave's next dscnt wait / fence / barrier
    else:
        arr[idx] = raw


def _lds_oob(ctx, addr, nbytes, mask):
    bad = mask & ((addr < 0) | (addr + nbytes > ctx.lds.lds_bytes))
    if bad.any():
        lane = int(np.argmax(bad))
        raise EmuMemoryError(
            f"LDS access of {nbytes} bytes at offset {int(addr[lane])} (lane {lane % 32}) is outside "
            f"the workgroup's {ctx.lds.lds_bytes} bytes of LDS")


def global_load(ctx, addr, dtype, count, mask):
    L = ctx.L
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (L,))
    if _active(ctx, mask):
        return ctx.gmem.read(addr, dtype, count)
    out = np.zeros((L, count), dtype=dtype)
    if mask.any():
        out[mask] = ctx.gmem.read(addr[mask], dtype, count)
    return out


def global_load_uniform(ctx, addr, dtype, count):
    return ctx.gmem.read(np.asarray([addr], dtype=np.int64), dtype, count)[0]


def global_store(ctx, addr, data, mask):
    L = ctx.L
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (L,))
    data = np.asarray(data)
    rows = data.reshape(L, -1) if data.ndim >= 1 and data.shape[0] == L else np.broadcast_to(
        data.reshape(1, -1), (L, max(1, data.size)))
    if _active(ctx, mask):
        ctx.gmem.write(addr, rows)
    elif mask.any():
        ctx.gmem.write(addr[mask], rows[mask])


def make_rsrc(base, stride, num_records, flags):
    return (np.int64(base), np.int64(stride), np.int64(num_records), np.int64(flags))


def buffer_load(ctx, rsrc, voffset, soffset, dtype, count, mask):
    """raw.ptr.buffer.load: bytes at or past num_records read as 0 (AMD range checking)."""
    base, _stride, nrec, _flags = rsrc
    L = ctx.L
    off = np.broadcast_to(np.asarray(voffset, dtype=np.int64) + np.int64(soffset), (L,))
    nb = dtype.itemsize * count
    inb = mask & (off >= 0) & (off + nb <= nrec)
    addr = base + off
    if inb.all():
        return ctx.gmem.read(addr, dtype, count)
    out = np.zeros((L, count), dtype=dtype)
    if inb.any():
        out[inb] = ctx.gmem.read(addr[inb], dtype, count)
    return out


def buffer_store(ctx, data, rsrc, voffset, soffset, mask):
    base, _stride, nrec, _flags = rsrc
    L = ctx.L
    data = np.asarray(data)
    rows = data.reshape(L, -1) if data.ndim >= 1 and data.shape[0] == L else np.broadcast_to(
        data.reshape(1, -1), (L, max(1, data.size)))
    nb = rows.view(np.uint8).shape[1] if rows.flags.c_contiguous else np.ascontiguousarray(rows).view(np.uint8).shape[1]
    off = np.broadcast_to(np.asarray(voffset, dtype=np.int64) + np.int64(soffset), (L,))
    inb = mask & (off >= 0) & (off + nb <= nrec)
    addr = base + off
    if inb.all():
        ctx.gmem.write(addr, rows)
    elif inb.any():
        ctx.gmem.write(addr[inb], rows[inb])


# ----------------------------------------------------------------------------- cross-lane


def shuffle(ctx, value, offset, width, mode: str, mask):
    """gpu.shuffle within groups of 32 lanes; returns (value, valid)."""
    L = ctx.L
    lane = ctx.lane
    value = np.broadcast_to(value, (L,) + np.shape(value)[1:]) if np.ndim(value) else np.full(L, value)
    width = int(width)
    off = np.asarray(offset, dtype=np.int64)
    base = lane - lane % width
    if mode == "xor":
        src = lane ^ off
    elif mode == "up":
        src = lane - off
    elif mode == "down":
        src = lane + off
    else:  # idx
        src = base + off
    valid = (src >= base) & (src < base + width) & (src < 32)
    src = np.where(valid, src, lane)
    # source lanes that are inactive return their (stale) register contents; we use the value
    return value[ctx.lane_base + src], valid


def readfirstlane(ctx, value, mask):
    first = int(np.argmax(mask)) if mask.any() else 0
    v = np.asarray(value)
    return v[first] if v.ndim >= 1 and v.shape[0] == ctx.L else v


def _group_lanes(ctx, value):
    v = np.asarray(value)
    return np.broadcast_to(v, (ctx.L,) + v.shape[1:]) if v.ndim else np.full(ctx.L, v)


def readfirstlane_groups(ctx, value, mask):
    """readfirstlane under batching: each workgroup's first active lane, broadcast to its lanes."""
    v = _group_lanes(ctx, value)
    B = ctx.L // 32
    first = np.argmax(np.asarray(mask).reshape(B, 32), axis=1) + np.arange(B) * 32
    return np.repeat(v[first], 32, axis=0)


def readlane_groups(ctx, value, lane, uniform: bool):
    v = _group_lanes(ctx, value)
    B = ctx.L // 32
    src = np.arange(B) * 32 + (np.asarray(lane, dtype=np.int64).reshape(-1)[::32] if np.ndim(lane) else int(lane))
    picked = v[src]
    return picked[0] if uniform else np.repeat(picked, 32, axis=0)


def ballot(ctx, cond, mask, dtype, uniform: bool = True):
    """Bitmask of the lanes (of each workgroup) where `cond` holds."""
    bits = np.asarray(np.broadcast_to(cond, (ctx.L,)) & mask).reshape(-1, 32)
    packed = np.packbits(bits, axis=1, bitorder="little").view(np.uint32)[:, 0].astype(np.uint64)
    out = packed.astype(np.dtype(dtype).newbyteorder("=")) if np.dtype(dtype).itemsize >= 4 else packed
    out = out.astype(dtype)
    return out[0] if uniform else np.repeat(out, 32)


def mbcnt(ctx, mask_bits, acc, hi: bool):
    lane = ctx.lane
    bits = np.uint64(int(mask_bits) & 0xFFFFFFFF)
    shift = np.where(hi, np.maximum(lane - 32, 0), np.minimum(lane, 32)).astype(np.uint64)
    below = (bits & ((np.uint64(1) << shift) - np.uint64(1)))
    cnt = np.array([bin(int(x)).count("1") for x in below], dtype=np.int32) if below.ndim else bin(int(below)).count("1")
    return (np.asarray(acc, dtype=np.int32) + cnt).astype(np.int32)


# ----------------------------------------------------------------------------- copies


def tdm_copy(ctx, g0, g1, g2, g3, to_lds):
    from .tdm import TdmCopy, decode_batch

    return TdmCopy(ctx, decode_batch(ctx, g0, g1, g2, g3), to_lds)


from .ops.copies import AsyncCopy  # noqa: E402,F401  (generated code builds copies through R)
from .ops.wmma import _ELEM as WMMA_ELEM  # noqa: E402,F401
from .ops.wmma import wmma  # noqa: E402,F401


# ----------------------------------------------------------------------------- atomics

_RMW_FN = {
    "xchg": lambda old, v: v, "add": lambda old, v: old + v, "sub": lambda old, v: old - v,
    "and": lambda old, v: old & v, "or": lambda old, v: old | v, "xor": lambda old, v: old ^ v,
    "max": np.maximum, "min": np.minimum, "umax": lambda o, v: umax(o, v), "umin": lambda o, v: umin(o, v),
    "fadd": lambda old, v: old + v, "fsub": lambda old, v: old - v, "fmax": np.fmax, "fmin": np.fmin,
}


def _atomic_views(ctx, space, addr, nbytes):
    """(byte array, flat byte indices (L, nbytes)) of an atomic's target words."""
    if space == 3:
        if ctx.ds_queue:
            ctx.flush_ds()
        idx, ok = ctx.lds.flat_index(ctx.group_base, addr, nbytes)
        if not ok.all() and not ctx.lds_oob_ok:
            _lds_oob(ctx, addr, nbytes, np.ones(ctx.L, bool))
        return ctx.lds.data, idx
    r, off = ctx.gmem.locate(addr, nbytes)
    return r.view, off[:, None] + np.arange(nbytes, dtype=np.int64)


def atomic_rmw(ctx, space, kind, addr, val, mask):
    """Lanes apply the read-modify-write one after another (lane order); returns old values."""
    val = np.asarray(val)
    dt = val.dtype
    addr = np.asarray(addr, dtype=np.int64)
    old = np.zeros(ctx.L, dtype=dt)
    lanes = np.flatnonzero(mask)
    if lanes.size == 0:
        return old
    mem, idx = _atomic_views(ctx, space, np.where(mask, addr, addr[lanes[0]]), dt.itemsize)
    fn = _RMW_FN[kind]
    for lane in lanes:
        cur = mem[idx[lane]].view(dt)[0]
        old[lane] = cur
        mem[idx[lane]] = np.asarray(fn(cur, val[lane]), dtype=dt).reshape(1).view(np.uint8)
    return old


def atomic_cmpxchg(ctx, space, addr, cmp, new, mask):
    """Returns the (old value, success) pair per lane, as llvm.cmpxchg's struct result."""
    cmp, new = np.asarray(cmp), np.asarray(new)
    dt = new.dtype
    addr = np.asarray(addr, dtype=np.int64)
    old = np.zeros(ctx.L, dtype=dt)
    ok = np.zeros(ctx.L, dtype=bool)
    lanes = np.flatnonzero(mask)
    if lanes.size == 0:
        return (old, ok)
    mem, idx = _atomic_views(ctx, space, np.where(mask, addr, addr[lanes[0]]), dt.itemsize)
    for lane in lanes:
        cur = mem[idx[lane]].view(dt)[0]
        old[lane] = cur
        if cur == cmp[lane]:
            ok[lane] = True
            mem[idx[lane]] = np.asarray(new[lane], dtype=dt).reshape(1).view(np.uint8)
    return (old, ok)
