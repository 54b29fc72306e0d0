"""Run-time side of race provenance (`..taint`): the `R.t_*` calls that taint-mode generated
code makes. A taint is int 0 (clean) or a uint64 per-lane bitset; see `..taint`."""

from __future__ import annotations

import numpy as np

from ..taint import current

_ZERO = np.uint64(0)


def _lanes(x, L):
    return np.broadcast_to(np.asarray(x, dtype=np.uint64), (L,))


def t_wave(ctx, taint):
    """Cross-lane op: every lane of a workgroup's wave gets the OR over that wave."""
    if isinstance(taint, int) and taint == 0:
        return 0
    per = _lanes(taint, ctx.L).reshape(-1, 32)
    return np.repeat(np.bitwise_or.reduce(per, axis=1), 32)


def _workgroups(ctx):
    wg = getattr(ctx, "t_wg", None)
    if wg is None:
        (bx, by, bz), (gx, gy, _gz) = ctx.bid, ctx.gdim
        wg = ctx.t_wg = np.broadcast_to(np.asarray(bx + gx * (by + gy * bz), dtype=np.int64), (ctx.L,))
    return wg


def _source_bits(ctx, st, kernel, mask, store: bool):
    """Bits of the racy sources at the LDS op about to run (its site is `ctx.tsite`)."""
    got = st.by_site.get((kernel, getattr(ctx, "tsite", -1)))
    if not got:
        return 0
    bits = 0
    for s in got:
        if not (s.writes if store else s.reads) or (s.waves and ctx.wave not in s.waves):
            continue
        sel = np.asarray(mask, dtype=bool).copy()
        if s.lanes:
            sel &= np.isin(ctx.lane, list(s.lanes))
        if s.workgroups:
            sel &= np.isin(_workgroups(ctx), list(s.workgroups))
        if sel.any():
            bits = bits | np.where(sel, np.uint64(1) << np.uint64(s.bit), _ZERO)
    return bits


def _lds_index(ctx, addr, nbytes, mask):
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (ctx.L,))
    ok = mask & (addr >= 0) & (addr + nbytes <= ctx.lds.lds_bytes)
    idx = (ctx.group_base + np.where(ok, addr, 0))[:, None] + np.arange(nbytes, dtype=np.int64)
    return idx, ok


def t_lds_load(ctx, kernel, addr, nbytes, mask):
    st = current()
    bits = _source_bits(ctx, st, kernel, mask, store=False)
    shadow = getattr(ctx.lds, "t_shadow", None)
    if shadow is not None:
        idx, ok = _lds_index(ctx, addr, nbytes, mask)
        got = np.bitwise_or.reduce(shadow[idx], axis=1)
        bits = bits | np.where(ok, got, _ZERO)
    if isinstance(bits, int) or not bits.any():
        return 0  # clean stays the cheap int
    st.loads_tainted += 1
    return bits


def t_lds_store(ctx, kernel, addr, nbytes, taint, mask):
    taint = taint | _source_bits(ctx, current(), kernel, mask, store=True)
    shadow = getattr(ctx.lds, "t_shadow", None)
    if shadow is None:
        if isinstance(taint, int) or not np.any(taint):
            return
        shadow = ctx.lds.t_shadow = np.zeros(ctx.lds.data.size, dtype=np.uint64)
    idx, ok = _lds_index(ctx, addr, nbytes, mask)
    shadow[idx[ok]] = _lanes(taint, ctx.L)[ok][:, None]


def _words(ctx, addr, nbytes, mask, create_if):
    """(shadow words, per-lane word indices (n, k), lanes) of a global access, or None."""
    st = current()
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (ctx.L,))
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), (ctx.L,))
    if not mask.any() or (not st.gshadow and not create_if):
        return None
    region = ctx.gmem.find(int(addr[mask].min()), nbytes)
    if region is None:
        return None  # the access itself reports the bad address
    words = st.region_words(region, create_if)
    if words is None:
        return None
    rel = addr - region.base
    first, last = rel >> 2, (rel + nbytes - 1) >> 2
    span = np.arange(int((last - first).max()) + 1, dtype=np.int64)
    idx = np.clip(np.minimum(first[:, None] + span, last[:, None]), 0, len(words) - 1)
    return words, idx, mask


def t_global_load(ctx, addr, nbytes, mask):
    got = _words(ctx, addr, nbytes, mask, False)
    if got is None:
        return 0
    words, idx, mask = got
    bits = np.where(mask, np.bitwise_or.reduce(words[idx], axis=1), _ZERO)
    return bits if bits.any() else 0


def t_global_store(ctx, addr, nbytes, taint, mask):
    tainted = not isinstance(taint, int) and bool(np.any(taint))
    got = _words(ctx, addr, nbytes, mask, tainted)
    if got is None:
        return
    words, idx, mask = got
    words[idx[mask]] = _lanes(taint, ctx.L)[mask][:, None]  # a clean store clears the words


def _buffer(ctx, rsrc, voff, soff, nbytes, mask):
    base, _stride, nrec, _flags = rsrc
    off = np.broadcast_to(np.asarray(voff, dtype=np.int64) + np.int64(soff), (ctx.L,))
    inb = mask & (off >= 0) & (off + nbytes <= nrec)
    return base + off, inb


def t_buffer_load(ctx, rsrc, voff, soff, nbytes, mask):
    addr, inb = _buffer(ctx, rsrc, voff, soff, nbytes, mask)
    return t_global_load(ctx, addr, nbytes, inb)


def t_buffer_store(ctx, rsrc, voff, soff, nbytes, taint, mask):
    addr, inb = _buffer(ctx, rsrc, voff, soff, nbytes, mask)
    t_global_store(ctx, addr, nbytes, taint, inb)
