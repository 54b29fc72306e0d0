"""Asynchronous copies between global memory and LDS, moved when the scheduler completes
them: TDM tiles (TENSORcnt; descriptors decoded by `..tdm`) and per-lane async loads and
stores (ASYNCcnt)."""

from __future__ import annotations

import numpy as np

from ..memory import EmuMemoryError
from ..tdm import Tdm2D, decode_batch
from ..wave import Copy
from .memory import lds_load, lds_store

_U8 = np.dtype(np.uint8)


def tdm_copy(ctx, g0, g1, g2, g3, to_lds):
    return TdmCopy(ctx, decode_batch(ctx, g0, g1, g2, g3), to_lds)


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
