"""Tensor data mover (TDM) descriptors: decoding and footprints (the copy itself is
`rt.copies.TdmCopy`; the happens-before hooks use the footprints). The descriptors of all
workgroups of a batch decode at once (`decode_batch`: numpy over their words, or Python ints
for a batch of one, cached by the raw words, so the copy and the footprint hook of one op
decode once).

2-D descriptor layout (FlyDSL 0.5.0's encoder, `expr/rocdl/tdm_ops.py`):

| group/word | bits    | field                                                     |
|------------|---------|-----------------------------------------------------------|
| g0[0]      | 0       | pred (0: the op moves nothing, but still counts)          |
| g0[1]      | 31:0    | LDS byte address                                          |
| g0[2..3]   | 29:0 hi | global byte address (48 bits); g0[3] 31:30 = type (2)     |
| g1[0]      | 15:0    | workgroup multicast mask                                  |
|            | 17:16   | data size, log2(bytes per element)                        |
|            | 20      | pad enable                                                |
|            | 24:22   | pad interval, log2(dwords) - 1                            |
|            | 31:25   | pad amount, dwords - 1                                    |
| g1[1..2]   |         | tensor dim0 (innermost extent): g1[1] 31:16 lo, g1[2] 15:0 hi |
| g1[2..3]   |         | tensor dim1: g1[2] 31:16 lo, g1[3] 15:0 hi                |
| g1[3]      | 31:16   | tile dim0                                                 |
| g1[4]      | 15:0    | tile dim1                                                 |
| g1[5..6]   | 47:0    | dim1 stride, in elements (g1[6] 15:0 holds bits 47:32)    |

A load reads the tile box from global memory; elements outside the tensor dims are
zero-filled; in LDS the tile is dense row-major, with `pad amount` bytes skipped after
every `pad interval` bytes (padding bytes are not written). A store moves the dense tile
from LDS to global memory, dropping out-of-bounds elements: it reads only the in-bounds
elements' LDS bytes (`Tdm2D.stored_bytes`), and only those are checked.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ldssan.passes.ir.caches import register_cache, register_reset

_EMPTY = np.zeros(0, np.int64)
_EMPTY.flags.writeable = False


@dataclass(frozen=True)
class Tdm2D:
    pred: bool
    lds_addr: int
    global_addr: int
    elem_bytes: int
    pad_interval: int  # bytes, 0 = no padding
    pad_amount: int  # bytes
    tensor_dim0: int
    tensor_dim1: int
    tile_dim0: int
    tile_dim1: int
    stride1: int  # elements between rows
    mcast_mask: int

    def element_grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(global element offsets, LDS byte offsets, in-bounds mask) of the tile, row-major."""
        return _grid(self.tile_dim0, self.tile_dim1, self.stride1, self.tensor_dim0, self.tensor_dim1,
                     self.elem_bytes, self.pad_interval, self.pad_amount, self.lds_addr)

    def tile_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(global element offsets, LDS byte offsets) of the tile at LDS offset 0, bounds
        not applied: one per tile shape, whatever the addresses and tensor dims."""
        g, lds, _inb = _grid(self.tile_dim0, self.tile_dim1, self.stride1, self.tile_dim0, self.tile_dim1,
                             self.elem_bytes, self.pad_interval, self.pad_amount, 0)
        return g, lds

    def tile_layout(self) -> TileLayout:
        """`tile_grid` in the forms a whole-tile copy uses (cached per tile shape)."""
        return _layout(self.tile_dim0, self.tile_dim1, self.stride1, self.elem_bytes, self.pad_interval,
                       self.pad_amount)

    def lds_bytes(self) -> np.ndarray:
        """Every LDS byte offset the tile covers (padding excluded)."""
        if not self.pred:
            return np.zeros(0, np.int64)
        return self.tile_bytes()

    def tile_bytes(self) -> np.ndarray:
        """The LDS byte offsets of the tile, whatever `pred` (cached, read-only)."""
        return _footprint(self.tile_dim0, self.tile_dim1, self.elem_bytes, self.pad_interval,
                          self.pad_amount, self.lds_addr)

    def stored_bytes(self) -> np.ndarray:
        """The LDS bytes a store reads: the tile's in-bounds elements only (the store drops
        the others, so their LDS bytes never reach global memory)."""
        if not self.pred:
            return _EMPTY
        cols, rows = min(self.tensor_dim0, self.tile_dim0), min(self.tensor_dim1, self.tile_dim1)
        if (cols, rows) == (self.tile_dim0, self.tile_dim1):
            return self.tile_bytes()
        return _in_bounds_footprint(self.tile_dim0, self.tile_dim1, self.elem_bytes, self.pad_interval,
                                    self.pad_amount, self.lds_addr, cols, rows)


# Kernels issue the same few descriptors over and over (per stage and slot): cache the
# index arithmetic. Results are read-only.
@register_cache
@functools.lru_cache(maxsize=4096)
def _grid(tile0, tile1, stride1, tdim0, tdim1, eb, pad_interval, pad_amount, lds_addr):
    r = np.arange(tile1, dtype=np.int64)[:, None]
    c = np.arange(tile0, dtype=np.int64)[None, :]
    g = (r * stride1 + c).reshape(-1)
    inb = ((r < tdim1) & (c < tdim0)).reshape(-1)
    lin = (r * tile0 + c).reshape(-1) * eb
    if pad_interval:
        lin = lin + (lin // pad_interval) * pad_amount
    out = (g, lds_addr + lin, inb)
    for a in out:
        a.flags.writeable = False
    return out


class TileLayout(NamedTuple):
    """A tile shape at LDS offset 0, bounds not applied (read-only arrays)."""

    gbytes: np.ndarray  # (n,) global byte offset of each element from the tile's origin
    lbytes: np.ndarray  # (n, eb) LDS byte offsets of each element's bytes
    lo: int  # lowest / highest LDS element offset (0 / -1 for an empty tile)
    hi: int
    # the tile in LDS as runs of `run` bytes contiguous both in LDS and in a global row (a
    # row, or the bytes between pads), starting at `run_starts` (row-major); run 0: runs of
    # unequal lengths (copies then go element by element)
    run: int
    run_starts: np.ndarray


@register_cache
@functools.lru_cache(maxsize=4096)
def _layout(tile0, tile1, stride1, eb, pad_interval, pad_amount) -> TileLayout:
    g, lin, _inb = _grid(tile0, tile1, stride1, tile0, tile1, eb, pad_interval, pad_amount, 0)
    run, starts = _runs(lin, tile0, eb)
    out = TileLayout(g * eb, lin[:, None] + np.arange(eb, dtype=np.int64),
                     int(lin.min()) if lin.size else 0, int(lin.max()) if lin.size else -1, run, starts)
    out.gbytes.flags.writeable = out.lbytes.flags.writeable = out.run_starts.flags.writeable = False
    return out


def _runs(lin: np.ndarray, tile0: int, eb: int) -> tuple[int, np.ndarray]:
    """(run bytes, LDS offsets of the runs): the elements (LDS offsets `lin`, row-major, rows
    of `tile0`) cut where a row starts or LDS skips a pad; (0, empty) when the runs differ in
    length or the tile is empty."""
    if not lin.size:
        return 0, _EMPTY
    cut = np.ones(lin.size, dtype=bool)
    cut[1:] = lin[1:] != lin[:-1] + eb
    cut[::tile0] = True
    first = np.flatnonzero(cut)
    lengths = np.diff(np.append(first, lin.size))
    if (lengths != lengths[0]).any():
        return 0, _EMPTY
    return int(lengths[0]) * eb, lin[first]


@register_cache
@functools.lru_cache(maxsize=4096)
def _footprint(tile0, tile1, eb, pad_interval, pad_amount, lds_addr):
    _g, lds, _inb = _grid(tile0, tile1, 0, tile0, tile1, eb, pad_interval, pad_amount, lds_addr)
    out = (lds[:, None] + np.arange(eb, dtype=np.int64)).reshape(-1)
    out.flags.writeable = False
    return out


@register_cache
@functools.lru_cache(maxsize=4096)
def _in_bounds_footprint(tile0, tile1, eb, pad_interval, pad_amount, lds_addr, cols, rows):
    _g, lds, inb = _grid(tile0, tile1, 0, cols, rows, eb, pad_interval, pad_amount, lds_addr)
    out = (lds[inb][:, None] + np.arange(eb, dtype=np.int64)).reshape(-1)
    out.flags.writeable = False
    return out


# The fields of a descriptor, in `Tdm2D` order.
FIELDS = ("pred", "lds_addr", "global_addr", "elem_bytes", "pad_interval", "pad_amount", "tensor_dim0",
          "tensor_dim1", "tile_dim0", "tile_dim1", "stride1", "mcast_mask")
# The fields a tile's shape depends on (equal across workgroups: one gather/scatter moves all).
# (Tensor dims may differ: they are the extent left from each tile's origin.)
GEOMETRY = ("elem_bytes", "pad_interval", "pad_amount", "tile_dim0", "tile_dim1", "stride1")


class TdmBatch:
    """The decoded descriptors of the workgroups of a batch: one (B,) int64 array per field
    (`FIELDS`). Read-only: batches are cached by their raw words."""

    __slots__ = (*FIELDS, "B", "_rows", "_same", "_fp", "_sfp")

    def __init__(self, cols: dict):
        for name, col in cols.items():
            col.flags.writeable = False
            setattr(self, name, col)
        self.B = len(self.pred)
        self._rows = self._same = self._fp = self._sfp = None

    def row(self, g: int) -> Tdm2D:
        if self._rows is None:
            self._rows = {}
        d = self._rows.get(g)
        if d is None:
            d = self._rows[g] = Tdm2D(*(getattr(self, f)[g].item() for f in FIELDS))
        return d

    @classmethod
    def of_row(cls, w: list[int]) -> TdmBatch:
        """`decode_words` of one workgroup's words (Python ints, unsigned 32-bit) without
        numpy: a batch of one decodes per TDM op issue, where numpy's per-call cost dominates."""
        if any(w[12:]):
            raise NotImplementedError(_BEYOND_2D)
        if w[4] >> 19 & 1:
            raise NotImplementedError(_ITERATE)
        fields = _fields(w[:4], w[4:12])
        d = Tdm2D(**{**fields, "pred": bool(fields["pred"])})
        col = np.array([getattr(d, f) for f in FIELDS], dtype=np.int64)
        batch = cls({f: col[i:i + 1] for i, f in enumerate(FIELDS) if i} | {"pred": col[:1].astype(bool)})
        batch._rows = {0: d}
        batch._same = True
        return batch

    def same_geometry(self) -> bool:
        """Every workgroup's tile has the same shape (addresses may differ)."""
        if self._same is None:
            self._same = all(bool((getattr(self, f) == getattr(self, f)[0]).all()) for f in GEOMETRY)
        return self._same

    def in_bounds(self, live: np.ndarray) -> np.ndarray | None:
        """(len(live), elements) in-bounds mask of the tiles of `live` (one shape), row-major;
        None when every element is in bounds."""
        if len(live) == 1:  # one tile: Python ints
            d = self.row(int(live[0]))
            if d.tensor_dim0 >= d.tile_dim0 and d.tensor_dim1 >= d.tile_dim1:
                return None
        t0, t1 = int(self.tile_dim0[live[0]]), int(self.tile_dim1[live[0]])
        d0, d1 = self.tensor_dim0[live], self.tensor_dim1[live]
        if (d0 >= t0).all() and (d1 >= t1).all():
            return None
        rows = np.arange(t1)[None, :, None] < d1[:, None, None]
        cols = np.arange(t0)[None, None, :] < d0[:, None, None]
        return (rows & cols).reshape(len(live), -1)

    def footprints(self) -> list[np.ndarray]:
        """`Tdm2D.lds_bytes` of each workgroup; equal footprints are one (cached) array."""
        if self._fp is None:
            if self.B == 1:
                d = self.row(0)
                self._fp = [d.tile_bytes() if d.pred else _EMPTY]
            elif self._one_tile():
                fp = self.row(0).tile_bytes()
                self._fp = [fp if p else _EMPTY for p in self.pred.tolist()]
            else:
                self._fp = [self.row(g).lds_bytes() for g in range(self.B)]
        return self._fp


    def stored_footprints(self) -> list[np.ndarray]:
        """`Tdm2D.stored_bytes` of each workgroup: what a store reads of LDS."""
        if self._sfp is None:
            if self.B > 1 and self._one_tile() and bool((self.tensor_dim0 >= self.tile_dim0).all()
                                                        and (self.tensor_dim1 >= self.tile_dim1).all()):
                # every tile in bounds: each stores its whole tile (one shared array), as
                # `stored_bytes` says row by row -- without decoding 64 rows into Python ints
                fp = self.row(0).tile_bytes()
                self._sfp = [fp if p else _EMPTY for p in self.pred.tolist()]
            else:
                self._sfp = [self.row(g).stored_bytes() for g in range(self.B)]
        return self._sfp

    def _one_tile(self) -> bool:
        """Every workgroup's tile has the same shape at the same LDS address."""
        return self.same_geometry() and bool((self.lds_addr == self.lds_addr[0]).all())


_BEYOND_2D = "ldssan-emu: TDM descriptors beyond 2-D (non-zero group 2/3) are not emulated"
_ITERATE = "ldssan-emu: TDM iterate mode is not emulated"


def _check_2d(words: np.ndarray) -> None:
    if words[:, 12:].any():
        raise NotImplementedError(_BEYOND_2D)
    if (words[:, 4] >> 19 & 1).any():
        raise NotImplementedError(_ITERATE)


def decode_words(words: np.ndarray) -> TdmBatch:
    """Decode (B, 12 + extra) descriptor words (group 0, group 1, then groups 2/3, which must
    be zero), one row per workgroup, as unsigned 32-bit values in int64."""
    _check_2d(words)
    cols = _fields(words[:, :4].T, words[:, 4:12].T)
    cols["pred"] = cols["pred"].astype(bool)
    return TdmBatch(cols)


def _fields(g0, g1) -> dict:
    """The fields (`FIELDS`) from group 0 and group 1 words, indexed by word: numpy rows (one
    column per workgroup) or one workgroup's Python ints -- one formula for both."""
    cfg = g1[0]
    pad = cfg >> 20 & 1
    return dict(
        pred=g0[0] & 1,
        lds_addr=g0[1],
        global_addr=g0[2] | ((g0[3] & 0x3FFFFFFF) << 32),
        elem_bytes=1 << ((cfg >> 16) & 3),
        pad_interval=pad * ((4 << ((cfg >> 22) & 7)) * 2),  # 2^(enc+1) dwords
        pad_amount=pad * (4 * (((cfg >> 25) & 0x7F) + 1)),
        tensor_dim0=(g1[1] >> 16) | ((g1[2] & 0xFFFF) << 16),
        tensor_dim1=(g1[2] >> 16) | ((g1[3] & 0xFFFF) << 16),
        tile_dim0=g1[3] >> 16,
        tile_dim1=g1[4] & 0xFFFF,
        stride1=g1[5] | ((g1[6] & 0xFFFF) << 32),
        mcast_mask=cfg & 0xFFFF,
    )


def decode(g0, g1, g2=None, g3=None) -> Tdm2D:
    """Decode one workgroup's descriptor groups (uniform (4,) / (8,) arrays)."""
    parts = [g0, g1] + [x for x in (g2, g3) if x is not None]
    return decode_words(np.concatenate([_row_words(x) for x in parts])[None, :]).row(0)


def _row_words(x) -> np.ndarray:
    return np.asarray(x).reshape(-1).astype(np.int64) & 0xFFFFFFFF


def _group_words(B: int, value) -> np.ndarray:
    """A descriptor group as (B, n) words, one row per workgroup of the batch."""
    a = np.asarray(value)
    if a.ndim == 2:  # per-lane under batching: one descriptor per workgroup (its lane 0)
        a = a[::32]
    return np.broadcast_to(a.astype(np.int64) & 0xFFFFFFFF, (B, a.shape[-1]))


# Decoded batches by their raw words: the copy and the sanitizer's footprint hook decode the
# same words, and kernels reissue the same descriptors (per stage and slot).
_DECODED: dict[tuple, TdmBatch] = {}
_DECODED_MAX = 8192  # keys are B x 24 words; kernels issue one descriptor per stage, slot and tile (per-wave
# and batched runs of one kernel decode different batches: both fit, neither evicts the other)


def decode_batch(ctx, g0, g1, g2, g3) -> TdmBatch:
    B = ctx.L // 32
    groups = (g0, g1, g2, g3)
    words = None
    if all(type(g) is np.ndarray and g.ndim in (1, 2) for g in groups):
        # keyed by each group's descriptor rows as given (lane 0 of each workgroup when per
        # lane), which skips building the words of a descriptor seen before
        key = (B, *[(g.dtype.str, g.ndim, (g[::32] if g.ndim == 2 else g).tobytes()) for g in groups])
    else:
        words = np.concatenate([_group_words(B, g) for g in groups], axis=1)
        key = (words.shape, words.tobytes())
    hit = _DECODED.get(key)
    if hit is None:
        if words is None and B == 1 and FAST_ROW and all(_one_row(g) for g in groups):
            hit = TdmBatch.of_row([x & 0xFFFFFFFF for g in groups for x in (g[0] if g.ndim == 2 else g).tolist()])
        else:
            if words is None:
                words = np.concatenate([_group_words(B, g) for g in groups], axis=1)
            hit = decode_words(words)
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        _DECODED[key] = hit
    return hit


@register_reset
def clear_cache() -> None:
    """Forget the decoded descriptors (tests comparing decoders)."""
    _DECODED.clear()


FAST_ROW = True  # batches of one decode with `TdmBatch.of_row` (False: numpy; tests compare)


def _one_row(g: np.ndarray) -> bool:
    """`g` holds one workgroup's descriptor group as integers: (n,), or (32, n) per lane."""
    return g.dtype.kind in "iu" and (g.ndim == 1 or g.shape[0] == 32)


def lds_footprint(ctx, g0, g1, g2, g3, store: bool = False) -> list[np.ndarray]:
    """LDS byte offsets per workgroup of the batch (for the happens-before engine): a load
    writes the whole box (out-of-bounds elements zero-filled), a store reads its in-bounds
    elements only."""
    batch = decode_batch(ctx, g0, g1, g2, g3)
    return batch.stored_footprints() if store else batch.footprints()
