"""Loads and stores: LDS (ds_load / ds_store, through the wave's LDS queue), global memory
and buffer resources. Masked lanes never touch memory."""

from __future__ import annotations

import warnings

import numpy as np

from ldssan.passes.ir.caches import register_cache

from ..memory import EmuMemoryError


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
    if raw.ndim == 1:  # one element of nb bytes per lane
        raw = raw.view(np.uint8).reshape(L, nb)
    if not ok.all():
        out_of_range(ctx, addr, nb, mask)
        raw[~ok] = 0
    return raw.view(dtype).reshape(L, count)


def lds_load_uniform(ctx, addr, dtype, count, mask):
    """ds_load of one address by every lane of a lockstep workgroup at one instant -> the
    (count,) elements the active lanes all read (zeros when no lane is active)."""
    m = np.broadcast_to(mask, (ctx.L,))
    if not m.any():
        return np.zeros(count, dtype)
    first = int(np.argmax(m))
    one = np.zeros(ctx.L, dtype=bool)
    one[first] = True
    return lds_load(ctx, addr, dtype, count, one)[first]


def lds_store(ctx, addr, data, mask, *, queued: bool = True):
    """ds_store (queued in the wave's LDS queue under delaying policies); `queued=False` for
    copy engines, whose data lands when the copy completes."""
    L = ctx.L
    addr = np.broadcast_to(np.asarray(addr, dtype=np.int64), (L,))
    raw = np.ascontiguousarray(np.broadcast_to(data, (L,) + np.shape(data)[1:] if np.ndim(data) else (L,)))
    raw = raw.view(np.uint8).reshape(L, -1)
    nb = raw.shape[1]
    arr, idx, ok = ctx.lds.index(ctx.group_base, addr, nb)
    if arr is not ctx.lds.data:  # one element of all the lane's bytes per lane
        raw = raw.view(arr.dtype).reshape(L)
    ok &= mask
    if not ok.all():
        out_of_range(ctx, addr, nb, mask)
        idx, raw = idx[ok], raw[ok]
    if queued and ctx.ds_queue is not None:
        ctx.ds_queue.append((arr, idx, raw))  # lands at the wave's next dscnt wait / fence / barrier
    else:
        arr[idx] = raw


class LdsOutOfRange(UserWarning):
    """A plain (unsanitized) run made a ds access outside the workgroup's LDS allocation."""


def out_of_range(ctx, addr, nbytes, mask) -> None:
    """Active lanes of a ds access left the workgroup's LDS: as on the hardware, their reads
    return 0 and their writes are dropped (the callers do that; docs/memory-model.md). A
    sanitized run reports each as LDS031 with its line; a plain run warns once per launch."""
    if ctx.lds_oob_ok or ctx.lds.oob_warned:
        return
    bad = mask & ((addr < 0) | (addr + nbytes > ctx.lds.lds_bytes))
    if bad.any():
        ctx.lds.oob_warned = True
        lane = int(np.argmax(bad))
        warnings.warn(LdsOutOfRange(
            f"ldssan-emu: an LDS access of {nbytes} bytes at offset {int(addr[lane])} (lane {lane % 32}) is "
            f"outside the workgroup's {ctx.lds.lds_bytes} bytes of LDS: it read 0 / was dropped, as on "
            "gfx1250 (further ones in this launch are not repeated); ldssan.sanitize() reports each as "
            "LDS031 with its line"), stacklevel=2)


def _lane_addrs(addr, L: int) -> np.ndarray:
    """The (L,) int64 addresses of an access (a uniform one repeated): per-lane addresses
    of the generated code already are, and pass through untouched (the hot path)."""
    if type(addr) is np.ndarray and addr.dtype == np.int64 and addr.shape == (L,):
        return addr
    return np.broadcast_to(np.asarray(addr, dtype=np.int64), (L,))


def global_load(ctx, addr, dtype, count, mask):
    L = ctx.L
    addr = _lane_addrs(addr, L)
    if _active(ctx, mask):
        return ctx.gmem.read(addr, dtype, count)
    out = np.zeros((L, count), dtype=dtype)
    if mask.any():
        out[mask] = ctx.gmem.read(addr[mask], dtype, count)
    return out


def global_load_uniform(ctx, addr, dtype, count):
    return ctx.gmem.read(np.asarray([addr], dtype=np.int64), dtype, count)[0]


def _rows(L: int, data: np.ndarray) -> np.ndarray:
    """Stored data as one row per lane (a uniform value is broadcast)."""
    if data.ndim >= 1 and data.shape[0] == L:
        return data.reshape(L, -1)
    return np.broadcast_to(data.reshape(1, -1), (L, max(1, data.size)))


def global_store(ctx, addr, data, mask):
    L = ctx.L
    addr = _lane_addrs(addr, L)
    rows = _rows(L, np.asarray(data))
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
    rows = _rows(L, np.asarray(data))
    nb = rows.view(np.uint8).shape[1] if rows.flags.c_contiguous else np.ascontiguousarray(rows).view(np.uint8).shape[1]
    off = np.broadcast_to(np.asarray(voffset, dtype=np.int64) + np.int64(soffset), (L,))
    inb = mask & (off >= 0) & (off + nb <= nrec)
    addr = base + off
    if inb.all():
        ctx.gmem.write(addr, rows)
    elif inb.any():
        ctx.gmem.write(addr[inb], rows[inb])


# the arrays behind constant memref.globals, kept alive for the process (their addresses are
# what kernels load through), one per (name, initial value, element type)
_CONSTANTS: dict[tuple[str, str, str], np.ndarray] = register_cache({})


def constant_global(ctx, name: str, initial: str, dtype: np.dtype, count: int) -> np.int64:
    """The address of a constant `memref.global`'s data, registered read-only in the launch's
    global memory: `count` elements of `dtype` from its `dense<...>` initial value (a splat
    fills them all)."""
    key = (name, initial, dtype.str)
    arr = _CONSTANTS.get(key)
    if arr is None:
        arr = _dense_elements(initial, dtype, count)
        arr.flags.writeable = False
        _CONSTANTS[key] = arr
    addr = arr.ctypes.data
    if ctx.gmem.find(addr, arr.nbytes) is None:
        ctx.gmem.add(addr, arr.nbytes, f"constant memref.global @{name}")
        ctx.gmem.find(addr).view.flags.writeable = False  # a store to it fails, naming the op
    return np.int64(addr)


def _dense_elements(text: str, dtype: np.dtype, count: int) -> np.ndarray:
    body = text[text.index("<") + 1: text.rindex(">", 0, text.rindex(":"))].strip()
    if body.startswith('"0x'):
        arr = np.frombuffer(bytes.fromhex(body[3:-1]), dtype=dtype).copy()
    else:
        words = body.replace("[", " ").replace("]", " ").replace(",", " ").split()
        if dtype == np.bool_:
            arr = np.array([w == "true" for w in words], dtype=dtype)
        else:
            conv = float if dtype.kind in "fV" else int
            arr = np.array([conv(w) for w in words], dtype=np.float64 if dtype.kind in "fV" else None).astype(dtype)
    if arr.size == 1:
        arr = np.full(count, arr[0], dtype=dtype)
    if arr.size != count:
        raise ValueError(f"the initial value of memref.global has {arr.size} elements, its type {count}")
    return arr
