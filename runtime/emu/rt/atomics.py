"""Atomics on LDS and global memory: the active lanes apply their read-modify-write one
after another in lane order (one legal serialisation), each returning the old value."""

from __future__ import annotations

import numpy as np

from .ints import umax, umin
from .memory import out_of_range

_RMW_FN = {
    "xchg": lambda old, v: v, "add": lambda old, v: old + v, "sub": lambda old, v: old - v,
    "and": lambda old, v: old & v, "or": lambda old, v: old | v, "xor": lambda old, v: old ^ v,
    "max": np.maximum, "min": np.minimum, "umax": umax, "umin": umin,
    "fadd": lambda old, v: old + v, "fsub": lambda old, v: old - v, "fmax": np.fmax, "fmin": np.fmin,
}


def _atomic_views(ctx, space, addr, nbytes, mask):
    """(byte array, flat byte indices (L, nbytes), in-range lanes) of an atomic's target
    words. An LDS atomic outside the workgroup's allocation changes nothing and returns 0,
    like any out-of-range ds access (`memory.out_of_range`)."""
    if space == 3:
        if ctx.ds_queue:
            ctx.flush_ds()
        idx, ok = ctx.lds.flat_index(ctx.group_base, addr, nbytes)
        if not (ok | ~mask).all():
            out_of_range(ctx, addr, nbytes, mask)
        return ctx.lds.data, idx, ok
    r, off = ctx.gmem.locate(addr, nbytes)
    return r.view, off[:, None] + np.arange(nbytes, dtype=np.int64), np.ones(len(addr), bool)


def atomic_rmw(ctx, space, kind, addr, val, mask):
    """Returns the old value per lane (0 for inactive lanes)."""
    val = np.asarray(val)
    dt = val.dtype
    addr = np.asarray(addr, dtype=np.int64)
    old = np.zeros(ctx.L, dtype=dt)
    lanes = np.flatnonzero(mask)
    if lanes.size == 0:
        return old
    mem, idx, ok = _atomic_views(ctx, space, np.where(mask, addr, addr[lanes[0]]), dt.itemsize, mask)
    fn = _RMW_FN[kind]
    for lane in lanes[ok[lanes]]:
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
    mem, idx, in_range = _atomic_views(ctx, space, np.where(mask, addr, addr[lanes[0]]), dt.itemsize, mask)
    for lane in lanes[in_range[lanes]]:
        cur = mem[idx[lane]].view(dt)[0]
        old[lane] = cur
        if cur == cmp[lane]:
            ok[lane] = True
            mem[idx[lane]] = np.asarray(new[lane], dtype=dt).reshape(1).view(np.uint8)
    return (old, ok)
