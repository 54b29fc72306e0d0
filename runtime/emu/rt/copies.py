"""Asynchronous copies between global memory and LDS, moved when the scheduler completes
them: TDM tiles (TENSORcnt; descriptors decoded by `..tdm`) and per-lane async loads and
stores (ASYNCcnt). TDM multicast to other workgroups of a cluster is refused (`_local_only`)."""

from __future__ import annotations

import numpy as np

from ..memory import EmuMemoryError
from ..tdm import Tdm2D, decode_batch
from ..wave import Copy
from .memory import lds_load, lds_store

_U8 = np.dtype(np.uint8)


def tdm_copy(ctx, g0, g1, g2, g3, to_lds):
    descs = decode_batch(ctx, g0, g1, g2, g3)
    if to_lds:  # tensor stores ignore the workgroup mask
        for d in descs:
            _local_only(ctx, d.mcast_mask)
    return TdmCopy(ctx, descs, to_lds)


def _local_only(ctx, mask: int) -> None:
    """Refuse a TDM load whose workgroup mask (D# group 1 bits 15:0) names a workgroup of the
    cluster other than this one (bit i: the cluster's workgroup of flat id i, x fastest).

    Mask 0 (no multicast) and the workgroup's own bit load into its own LDS, as modeled.
    Delivery to peers is not modeled: public sources do not pin down whether every named
    workgroup must issue the matching load (a rendezvous) or one issue fills them all, nor
    how completion reaches the receiving waves; and each workgroup's happens-before engine
    tracks only its own LDS, so a write into a peer's LDS would go unchecked there."""
    cx, cy, _cz = (int(c) for c in ctx.cdim)
    wx, wy, wz = (int(np.asarray(c).reshape(-1)[0]) for c in ctx.cwg)
    own = 1 << (wx + cx * (wy + cy * wz))
    if mask & ~own:
        peers = [i for i in range(16) if mask >> i & 1 and 1 << i != own]
        raise NotImplementedError(
            f"TDM multicast: the load's workgroup mask 0x{mask:04x} names cluster workgroup(s) {peers} besides "
            f"this one (bit {own.bit_length() - 1}); multicast into other workgroups' LDS is not modeled "
            "(its rendezvous and completion semantics are not pinned down by public documentation, and the "
            "sanitizer checks each workgroup's own LDS): unsupported, please report")


class TdmCopy(Copy):
    """One in-flight TDM op of one wave: moves its tiles (one per workgroup) when completed."""

    __slots__ = ("descs",)

    def __init__(self, ctx, descs: list[Tdm2D], to_lds: bool):
        super().__init__(ctx, to_lds)
        self.descs = descs

    def move(self) -> None:
        for g, d in enumerate(self.descs):
            if d.pred:
                (self._load if self.to_lds else self._store)(g, d)

    def _lds_index(self, g: int, d: Tdm2D, lds: np.ndarray) -> np.ndarray:
        lds_mem = self.ctx.lds
        if lds.size and (lds.min() < 0 or lds.max() + d.elem_bytes > lds_mem.lds_bytes):
            if not self.ctx.lds_oob_ok:
                raise EmuMemoryError(
                    f"TDM tile at LDS offset {d.lds_addr} ({d.tile_dim1}x{d.tile_dim0} x {d.elem_bytes} B) "
                    f"falls outside the workgroup's {lds_mem.lds_bytes} bytes of LDS")
        return (g * lds_mem.lds_bytes + lds)[:, None] + np.arange(d.elem_bytes, dtype=np.int64)

    def _load(self, g: int, d: Tdm2D) -> None:
        gel, lds, inb = d.element_grid()
        eb = d.elem_bytes
        data = np.zeros((gel.size, eb), dtype=np.uint8)
        if inb.any():
            data[inb] = self.ctx.gmem.read(d.global_addr + gel[inb] * eb, _U8, eb)
        idx = self._lds_index(g, d, lds)
        ok = (idx[:, -1] < (g + 1) * self.ctx.lds.lds_bytes) & (lds >= 0)
        self.ctx.lds.data[idx[ok]] = data[ok]

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
