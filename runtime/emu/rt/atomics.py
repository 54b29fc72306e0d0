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
    apply_rmw(mem, idx, lanes[ok[lanes]], _RMW_FN[kind], np.broadcast_to(val, (ctx.L,)), old)
    return old


def apply_rmw(mem, idx, lanes, fn, val, old) -> None:
    """`lanes` (ascending) apply `fn` to their words of `mem` (byte indices `idx`, (L, n))
    as if one after another in lane order, `old` getting each lane's prior value. Done in
    rounds: round k takes the k-th lane of every word, so lanes of one word keep lane order
    and each round's words are distinct (one vector operation). Words that overlap without
    being equal are done lane by lane."""
    rounds = _rounds(idx, lanes)
    if rounds is None:
        _apply_serial(mem, idx, lanes, fn, val, old)
        return
    dt = old.dtype
    for rnd in rounds:
        words = idx[rnd]
        cur = mem[words].view(dt).reshape(len(rnd))
        old[rnd] = cur
        mem[words] = np.asarray(fn(cur, val[rnd]), dtype=dt).reshape(len(rnd), 1).view(np.uint8)


def _rounds(idx, lanes) -> list | None:
    """`lanes` split so that each part's words are distinct, a word's lanes in lane order
    across the parts; None when two words overlap without being equal (or a word's bytes
    are not consecutive)."""
    if lanes.size == 0:
        return []
    nb = idx.shape[1]
    start = idx[lanes, 0]
    if nb > 1 and not (idx[lanes] == start[:, None] + np.arange(nb)).all():
        return None
    order = np.argsort(start, kind="stable")  # stable: a word's lanes stay in lane order
    s = start[order]
    first = np.ones(len(s), dtype=bool)
    first[1:] = s[1:] != s[:-1]
    if (np.diff(s[first]) < nb).any():
        return None
    if first.all():
        return [lanes]
    heads = np.flatnonzero(first)
    rank = np.arange(len(s)) - np.repeat(heads, np.diff(np.append(heads, len(s))))
    by_word = lanes[order]
    return [by_word[rank == k] for k in range(int(rank.max()) + 1)]


def _apply_serial(mem, idx, lanes, fn, val, old) -> None:
    dt = old.dtype
    for lane in lanes:
        cur = mem[idx[lane]].view(dt)[0]
        old[lane] = cur
        mem[idx[lane]] = np.asarray(fn(cur, val[lane]), dtype=dt).reshape(1).view(np.uint8)


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
