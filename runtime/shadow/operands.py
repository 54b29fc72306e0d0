"""Access operands as the engine keeps them: private, shared, memo-carrying payloads.

Kernels reissue the same few address patterns and TDM descriptors, and the shadow memoizes
the rows of a footprint per payload (lds.py), so one payload per distinct operand *content*
is kept process-wide:

| Name         | Key                                   | Value                                   |
|--------------|---------------------------------------|-----------------------------------------|
| _LANES_SEEN  | (addr bytes, mask bytes, nbytes)      | ("lanes", addr, mask, nbytes, memo)     |
| _TDM_SEEN    | int64 bytes of one group's offsets    | (private offsets copy, memo)            |

Keys are contents, never object identities: a caller may free, reuse or mutate its arrays
freely. Both caches are dropped whole past `_SEEN_MAX_BYTES` of operand bytes (the memoized
rows are about as large again), and by `clear_caches()`.
"""

from __future__ import annotations

import numpy as np

from ldssan.passes.ir.caches import register_reset
from .tables import clear_read_groups

__all__ = ["clear_caches", "lane_payload", "tdm_payload"]

_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
_LANES_SEEN: dict = {}
_TDM_SEEN: dict = {}
_SEEN_MAX_BYTES = 16 << 20
_seen_bytes = [0]


@register_reset
def clear_caches() -> None:
    """Drop every process-wide operand, footprint and read-group memo of the engine."""
    _LANES_SEEN.clear()
    _TDM_SEEN.clear()
    _seen_bytes[0] = 0
    clear_read_groups()


def _seen_room(nbytes: int) -> None:
    """Account for `nbytes` more cached operand bytes; clear the caches when full."""
    _seen_bytes[0] += nbytes
    if _seen_bytes[0] > _SEEN_MAX_BYTES:
        _TDM_SEEN.clear()
        _LANES_SEEN.clear()
        _seen_bytes[0] = nbytes


def lane_payload(addr, mask, nbytes, n_lanes: int) -> tuple:
    """("lanes", addr, mask, nbytes, memo) for a per-lane access of `n_lanes` lanes."""
    nbytes = int(nbytes)
    if nbytes <= 0:
        raise ValueError(f"ldssan: access size must be positive, got {nbytes!r}")
    shape = (n_lanes,)
    a = m = None
    # the emulator's own operand arrays: no conversion (the common case, kept cheap)
    if type(addr) is np.ndarray and addr.shape == shape and (addr.dtype is _I64 or addr.dtype == _I64):
        a = addr
    if type(mask) is np.ndarray and mask.shape == shape and (mask.dtype is _BOOL or mask.dtype == _BOOL):
        m = mask
    if a is None:
        a = _lanes(addr, np.int64, "addr", n_lanes)
    if m is None:
        m = _lanes(mask, np.bool_, "mask", n_lanes)
    key = (a.tobytes(), m.tobytes(), nbytes)
    pay = _LANES_SEEN.get(key)
    if pay is None:
        _seen_room(a.nbytes + m.nbytes)
        pay = _LANES_SEEN[key] = ("lanes", a.copy() if a is addr else a, m.copy() if m is mask else m,
                                  nbytes, {})
    return pay


def _lanes(arr, dtype, what: str, n_lanes: int) -> np.ndarray:
    out = np.array(arr, dtype=dtype)
    if out.ndim == 0:  # a wave-uniform operand
        out = np.full(n_lanes, out, dtype)
    elif out.shape != (n_lanes,):
        raise ValueError(f"ldssan: {what} must have shape ({n_lanes},), got {out.shape}")
    return out


def tdm_payload(offsets, G: int) -> tuple:
    """("offsets", per-group private copies, their memos) for a TDM footprint: an array
    (G, k), a sequence of G 1-D arrays (ragged), or for G = 1 a 1-D array."""
    if isinstance(offsets, np.ndarray) and offsets.ndim == 2:
        rows = list(offsets)
    elif isinstance(offsets, np.ndarray) and offsets.ndim == 1 and G == 1:
        rows = [offsets]
    else:
        rows = list(offsets)
    if len(rows) != G:
        raise ValueError(f"ldssan: tdm footprint has {len(rows)} groups, batch has {G}")
    per_group, memos = [], []
    prev_o = hit = None
    for o in rows:
        if o is not prev_o:  # groups sharing one array (one descriptor): one lookup
            prev_o = o
            hit = _tdm_seen(o)
        per_group.append(hit[0])
        memos.append(hit[1])
    return ("offsets", per_group, memos)


def _tdm_seen(o) -> tuple:
    """(private copy, memo) of one group's offsets, one per distinct content."""
    flat = np.asarray(o, np.int64).ravel()
    key = flat.tobytes()
    hit = _TDM_SEEN.get(key)
    if hit is None:
        mine = flat.copy()  # private: the caller may mutate its array later
        _seen_room(2 * mine.nbytes)
        hit = _TDM_SEEN[key] = (mine, {})
    return hit
