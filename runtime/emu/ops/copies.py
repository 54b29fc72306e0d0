"""Asynchronous copies into and out of LDS: TDM (TENSORcnt) and per-lane async loads (ASYNCcnt).

Issuing queues the copy on the wave (`ctx.issue`) and yields `('issue', counter)`; the copy
moves its data when completed — at the covering wait, at issue (`+early`), or at a random
point in between (`+random`), as the scheduler's async policy decides. A wave that ends
drains its copies.
"""

from __future__ import annotations

import numpy as np

from ldssan.passes.abi import ASYNC_WIDTH_BYTES
from ldssan.passes.ir.irview import Op
from ..wave import Copy
from . import emits


@emits("rocdl.tensor.load.to.lds", "rocdl.tensor.store.from.lds")
def tensor_copy(t, op: Op) -> None:
    g = ", ".join(t.v(x) for x in op.operands[:4])
    to_lds = op.name.endswith("to.lds")
    t.out(f"ctx.issue('tensor', R.tdm_copy(ctx, {g}, {to_lds}))")
    t.mark_yield()
    t.out("yield ('issue', 'tensor')")


def _async_copy(t, op: Op) -> None:
    gptr, lptr = op.operands[:2]
    nbytes = ASYNC_WIDTH_BYTES[op.name.rsplit(".", 1)[1]]
    offset = int(op.attr("offset", 0) or 0)
    to_lds = ".load." in op.name
    t.out(f"ctx.issue('async', R.AsyncCopy(ctx, {t.lanes(gptr)}, {t.lanes(lptr)}, {nbytes}, {offset}, "
          f"{to_lds}, {t.mask}))")
    t.mark_yield()
    t.out("yield ('issue', 'async')")


for _suffix in ASYNC_WIDTH_BYTES:
    emits(f"rocdl.global.load.async.to.lds.{_suffix}", f"rocdl.global.store.async.from.lds.{_suffix}")(_async_copy)


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
        from ..rt import lds_load, lds_store

        m = self.mask
        if not m.any():
            return
        if self.to_lds:
            data = np.zeros((self.ctx.L, self.nbytes), np.uint8)
            data[m] = self.ctx.gmem.read(self.gaddr[m], np.dtype(np.uint8), self.nbytes)
            lds_store(self.ctx, self.laddr, data, m, queued=False)
        else:
            data = lds_load(self.ctx, self.laddr, np.dtype(np.uint8), self.nbytes, m)
            self.ctx.gmem.write(self.gaddr[m], data[m])
