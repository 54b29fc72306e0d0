"""Asynchronous copies between global memory and LDS, moved when the scheduler completes
them: TDM tiles (TENSORcnt; descriptors decoded by `..tdm`) and per-lane async loads and
stores (ASYNCcnt). A TDM load whose workgroup mask names cluster peers also writes their
LDS (`..multicast`)."""

from __future__ import annotations

import numpy as np

from ..memory import EmuMemoryError, spans
from ..multicast import peers
from ..tdm import Tdm2D, TdmBatch, decode_batch
from ..wave import Copy, workgroups_reached
from .memory import lds_load, lds_store

_U8 = np.dtype(np.uint8)


def tdm_copy(ctx, g0, g1, g2, g3, to_lds, mask=None):
    descs = decode_batch(ctx, g0, g1, g2, g3)
    # tensor stores ignore the workgroup mask; 0: no multicast
    targets = peers(ctx, descs.mcast_mask) if to_lds else []
    # a TDM op is a wave's scalar instruction: only the workgroups whose wave reaches it issue it
    return TdmCopy(ctx, descs, to_lds, workgroups_reached(ctx, mask), [ctx.mcast.lds[i] for i in targets])


class TdmCopy(Copy):
    """One in-flight TDM op of one wave: moves its tiles (one per workgroup) when completed,
    all at once when their shapes agree (else, or on any memory error, one by one, which
    raises the error of the first workgroup at fault)."""

    __slots__ = ("descs", "issued", "peers")

    def __init__(self, ctx, descs: TdmBatch, to_lds: bool, issued: np.ndarray | None = None, peers=()):
        super().__init__(ctx, to_lds)
        self.descs = descs  # shared with other copies of the same words: read-only
        self.issued = issued  # per workgroup: its wave issued the op (None: every one)
        self.peers = peers  # the LocalMemory of each cluster peer the mask names (cluster launches)

    def move(self) -> None:
        b = self.descs
        live = np.flatnonzero(b.pred if self.issued is None else b.pred & self.issued)
        if not live.size:
            return
        for mem in self.peers:  # a cluster launch: one workgroup per wave, row 0
            self._load(0, b.row(0), mem)
        if b.same_geometry() and (self._load_all if self.to_lds else self._store_all)(live):
            return
        for g in live.tolist():
            (self._load if self.to_lds else self._store)(g, b.row(g))

    # -- all workgroups of the batch with one gather and one scatter --------------------------

    def _tiles(self, live: np.ndarray):
        """(global byte addresses of the in-bounds elements, element bytes, their LDS byte
        indices (n, eb), the LDS byte indices of the out-of-bounds ones or None) for the
        workgroups `live`, or None when a tile leaves the LDS (the per-workgroup path raises
        or clips it)."""
        b, lds_bytes = self.descs, self.ctx.lds.lds_bytes
        d = b.row(int(live[0]))
        eb, t = d.elem_bytes, d.tile_layout()
        if len(live) == 1:  # one workgroup (lockstep and resident runs): no numpy on (1,) columns
            la_lo = la_hi = d.lds_addr
            gaddr = (d.global_addr + t.gbytes)[None]
            base = np.array([int(live[0]) * lds_bytes + d.lds_addr])
        else:
            la = b.lds_addr[live]
            la_lo, la_hi = int(la.min()), int(la.max())
            gaddr = b.global_addr[live][:, None] + t.gbytes
            base = live * lds_bytes + la
        if t.lbytes.size and (la_lo + t.lo < 0 or la_hi + t.hi + eb > lds_bytes):
            return None
        lidx = base[:, None, None] + t.lbytes  # (live, elements, eb)
        inb = b.in_bounds(live)
        if inb is None:
            return gaddr.reshape(-1), eb, lidx.reshape(-1, eb), None
        return gaddr[inb], eb, lidx[inb], lidx[~inb]

    def _load_runs(self, live: np.ndarray) -> bool:
        """`_load_all` of whole in-bounds tiles whose LDS form is runs of equal length: every
        row of every tile in one gather, every run in one scatter. False (nothing written)
        when it does not apply; `_load_all` then moves the same bytes element by element."""
        b, lds = self.descs, self.ctx.lds
        d = b.row(int(live[0]))
        t = d.tile_layout()
        if not t.run or b.in_bounds(live) is not None:
            return False
        la = b.lds_addr[live]
        if int(la.min()) + t.lo < 0 or int(la.max()) + t.hi + d.elem_bytes > lds.lds_bytes:
            return False
        row_bytes = d.tile_dim0 * d.elem_bytes
        starts = b.global_addr[live][:, None] + np.arange(d.tile_dim1, dtype=np.int64) * (d.stride1 * d.elem_bytes)
        try:
            data = self.ctx.gmem.read(starts.reshape(-1), _U8, row_bytes)
        except EmuMemoryError:  # e.g. tiles in different tensors: element by element
            return False
        dst = ((live * lds.lds_bytes + la)[:, None] + t.run_starts).reshape(-1)
        spans(lds.data, t.run)[dst] = data.reshape(-1).view(np.dtype((np.void, t.run)))
        return True

    def _load_all(self, live: np.ndarray) -> bool:
        if self._load_runs(live):
            return True
        tiles = self._tiles(live)
        if tiles is None:
            return False
        gaddr, eb, lidx, zidx = tiles
        data = None
        if zidx is None and gaddr.size:  # whole tiles: their rows, no index
            data = self._rows(live, eb)
        try:
            if data is None and gaddr.size:
                data = self.ctx.gmem.read(gaddr, _U8, eb)
        except EmuMemoryError:
            return False
        mem = self.ctx.lds.data
        if data is not None:
            mem[lidx] = data
        if zidx is not None:
            mem[zidx] = 0
        return True

    def _rows(self, live: np.ndarray, eb: int) -> np.ndarray | None:
        """The in-bounds tiles of the workgroups `live` as (elements, eb) bytes, tile after
        tile, copied row by row (None when a tile is not in one registered region)."""
        rows = []
        for g in live.tolist():
            d = self.descs.row(g)
            r = self.ctx.gmem.read_rows(d.global_addr, d.tile_dim1, d.tile_dim0 * eb, d.stride1 * eb)
            if r is None:
                return None
            rows.append(r.reshape(-1, eb))
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def _store_all(self, live: np.ndarray) -> bool:
        tiles = self._tiles(live)
        if tiles is None:
            return False
        gaddr, _eb, lidx, _zidx = tiles
        if gaddr.size:
            try:
                self.ctx.gmem.write(gaddr, self.ctx.lds.data[lidx])
            except EmuMemoryError:  # raised before any byte is written
                return False
        return True

    # -- one workgroup ---------------------------------------------------------------------

    def _lds_index(self, g: int, d: Tdm2D, lds: np.ndarray, lds_mem=None) -> np.ndarray:
        lds_mem = lds_mem or self.ctx.lds
        if lds.size and (lds.min() < 0 or lds.max() + d.elem_bytes > lds_mem.lds_bytes):
            if not self.ctx.lds_oob_ok:
                raise EmuMemoryError(
                    f"TDM tile at LDS offset {d.lds_addr} ({d.tile_dim1}x{d.tile_dim0} x {d.elem_bytes} B) "
                    f"falls outside the workgroup's {lds_mem.lds_bytes} bytes of LDS")
        return (g * lds_mem.lds_bytes + lds)[:, None] + np.arange(d.elem_bytes, dtype=np.int64)

    def _load(self, g: int, d: Tdm2D, mem=None) -> None:
        """Workgroup g's tile into its LDS (`mem`: a cluster peer's LDS instead)."""
        mem = mem or self.ctx.lds
        gel, lds, inb = d.element_grid()
        eb = d.elem_bytes
        data = np.zeros((gel.size, eb), dtype=np.uint8)
        if inb.any():
            data[inb] = self.ctx.gmem.read(d.global_addr + gel[inb] * eb, _U8, eb)
        idx = self._lds_index(g, d, lds, mem)
        ok = (idx[:, -1] < (g + 1) * mem.lds_bytes) & (lds >= 0)
        mem.data[idx[ok]] = data[ok]

    def _store(self, g: int, d: Tdm2D) -> None:
        gel, lds, inb = d.element_grid()
        idx = self._lds_index(g, d, lds)
        ok = inb & (idx[:, -1] < (g + 1) * self.ctx.lds.lds_bytes) & (lds >= 0)
        if ok.any():
            self.ctx.gmem.write(d.global_addr + gel[ok] * d.elem_bytes, self.ctx.lds.data[idx[ok]])


class AsyncCopy(Copy):
    """A per-lane async copy of `nbytes` per active lane between global memory and LDS.

    The immediate offset is added to the global address (the LDS address is per lane)."""

    __slots__ = ("gaddr", "laddr", "nbytes", "mask")

    def __init__(self, ctx, gaddr, laddr, nbytes, offset, to_lds, mask):
        super().__init__(ctx, to_lds)
        self.mask = np.array(mask, dtype=bool)
        self.gaddr = np.asarray(gaddr, dtype=np.int64) + offset
        self.laddr = np.asarray(laddr, dtype=np.int64)
        self.nbytes = nbytes

    def move(self) -> None:
        m = self.mask
        if not m.any():
            return
        if self.to_lds:
            data = np.zeros((self.ctx.L, self.nbytes), np.uint8)
            data[m] = self.ctx.gmem.read(self.gaddr[m], _U8, self.nbytes)
            lds_store(self.ctx, self.laddr, data, m, queued=False)
        else:
            data = lds_load(self.ctx, self.laddr, _U8, self.nbytes, m)
            self.ctx.gmem.write(self.gaddr[m], data[m])
