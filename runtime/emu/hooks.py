"""The `__ldssan_*` hook ABI on the virtual gfx1250: one adapter per wave (`ctx.san`).

Translates the ABI's integer operands (passes/abi.py) into happens-before engine calls,
and decodes TDM descriptors into LDS footprints.
"""

from __future__ import annotations

import numpy as np

from ldssan.passes.abi import ORDERINGS, SCOPES, WAIT_ASYNCMARK, BarrierForm

from ..shadow import AccessKind, CopyKind, Counter
from .tdm import lds_footprint


class ShadowHooks:
    """`interfaces.Hooks` on a happens-before engine: each hook call as the engine's event."""

    __slots__ = ("engine", "wave", "ctx", "ds_count", "ds_last")

    def __init__(self, engine, ctx):
        self.engine = engine
        self.wave = ctx.wave
        self.ctx = ctx
        self.ds_count = 0  # ds ops this wave issued (DScnt is per instruction)
        self.ds_last: dict[int, int] = {}  # site -> ds_count after its latest issue

    def ds(self, site, ptr, nbytes, kind, mask):
        self.ds_count += 1
        self.ds_last[site] = self.ds_count
        self.engine.ds(self.wave, site, ptr, nbytes, _enum(_ACCESS, AccessKind, kind), mask)

    def stored(self, site, data, mask):
        # emulator only (not an ABI hook): the bytes the store after the last `ds` writes
        self.engine.stored(self.wave, data)

    def use(self, site, mask):
        # the compiler's s_wait_dscnt before the load's result is read: it leaves only the
        # ds ops issued after that load outstanding
        issued = self.ds_last.get(site)
        if issued is not None:
            self.engine.wait(self.wave, site, Counter.DS, self.ds_count - issued)

    def dma(self, site, ptr, nbytes, kind, mask):
        self.engine.dma(self.wave, site, ptr, nbytes, _enum(_COPY, CopyKind, kind), mask)

    def tdm(self, site, g0, g1, g2, g3, kind, mask):
        kind = _enum(_COPY, CopyKind, kind)
        offsets = lds_footprint(self.ctx, g0, g1, g2, g3, store=kind == CopyKind.FROM_LDS)
        self.engine.tdm(self.wave, site, offsets, kind)

    def wait(self, site, counter, n, mask):
        n &= 0xFFFF  # a 16-bit immediate, as the hardware reads it
        if counter == WAIT_ASYNCMARK:
            self.engine.wait_asyncmark(self.wave, site, n)
        else:
            self.engine.wait(self.wave, site, _enum(_COUNTER, Counter, counter), n)

    def mark(self, site, mask):
        self.engine.asyncmark(self.wave, site)

    def barrier(self, site, form, bid, mask):
        e, w = self.engine, self.wave
        if form in _ARRIVALS and mask is not self.ctx.mask:
            self._partial_mask(site, mask)
        if form == BarrierForm.FENCED_ARRIVE:
            e.fence(w, site, "release", "workgroup")
            e.barrier_signal(w, site, bid)
        elif form == BarrierForm.FENCED_DONE:
            e.barrier_wait(w, site, bid)
            e.fence(w, site, "acquire", "workgroup")
        elif form in (BarrierForm.SIGNAL, BarrierForm.BARE_ARRIVE):
            e.barrier_signal(w, site, bid)
        elif form in (BarrierForm.WAIT, BarrierForm.BARE_DONE):
            e.barrier_wait(w, site, bid)
        else:
            raise ValueError(f"ldssan: unknown barrier form {form}")

    def _partial_mask(self, site, mask):
        """LDS020 for a barrier reached with lanes masked off (divergent control flow), per
        workgroup of the batch, with the lanes that reached it."""
        live = self.ctx.mask
        mask = np.asarray(mask)
        missing = (live & ~mask).reshape(-1, 32)
        if not missing.any():
            return
        here = (live & mask).reshape(-1, 32)
        for g in np.flatnonzero(missing.any(axis=1)):
            self.engine.barrier_divergence(self.wave, site, group=int(g),
                                           lanes=np.flatnonzero(here[g]).tolist())

    def fence(self, site, ordering, scope, mask):
        self.engine.fence(self.wave, site, ORDERINGS.get(ordering, "monotonic"), SCOPES[scope])


_ARRIVALS = (BarrierForm.FENCED_ARRIVE, BarrierForm.SIGNAL, BarrierForm.BARE_ARRIVE)
# The ABI's integer operands as the engine's enums: a dict look-up on the hot path (an enum
# call costs about a microsecond); an unknown value falls through to the enum, which names it.
_ACCESS = {int(k): k for k in AccessKind}
_COPY = {int(k): k for k in CopyKind}
_COUNTER = {int(k): k for k in Counter}


def _enum(table: dict, enum, value):
    try:
        return table[value]
    except (KeyError, TypeError):
        return enum(value)
