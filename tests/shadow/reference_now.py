"""The frozen reference engine (`reference/`, unchanged) plus the verdict changes made on
purpose since it was frozen, so the differential tests keep comparing the live engine's
fast paths against the slow per-byte path on everything else.

Each change is applied from the outside, exactly as MODEL.md states it:

1. Records of one access event are pushed at most once per half-phase (§4 step 5): a
   barrier-free loop (a spin-wait) repeats a race a schedule-dependent number of times.
2. §6a fact 2: only a read in a later half-phase than the write consumes it (the writer's
   own re-read in its half-phase does not).
3. §7: a write that races a read retracts the read's held LDS030 and equal ones held by
   the same wave's earlier reads (a repeated read is one read); at finish each distinct
   held LDS030 record is pushed once.
4. §5: an access before the first barrier is applied only once every wave signalled
   phase 0 or ended (classify.py needs where the issuer's copies completed in that phase).
5. §4 step 4: a wave's own atomic does not hide its last plain ds write from other waves'
   atomics (kept per byte and wave in `hid` while the wave's slot holds a later atomic of
   it; checked only by atomics, superseded like a slot entry).
"""

from __future__ import annotations

import numpy as np

from ldssan.runtime.shadow.kinds import OP_ATOMIC, OP_READ, OP_WRITE

from .reference.engine import ShadowEngine as FrozenEngine
from .reference.lds import Conflicts, LdsShadow


class ReferenceEngine(FrozenEngine):
    def __init__(self, lds_bytes, n_waves, ring, **kw):
        super().__init__(lds_bytes, n_waves, _OncePerSegRing(ring), **kw)
        self._consumed = _LaterSegOnly(self)
        self._uninit = _RetractEqual()
        self._cur_seg = -1
        self._lds.__class__ = _HiddenPlainShadow
        self._lds.hid = np.zeros_like(self._lds.wslot)
        self._lds.hlane = np.zeros_like(self._lds.wlane)

    def _drain(self, *, force: bool = False, final: bool = False) -> None:
        super()._drain(force=force, final=final)
        if final:  # finish() pushes the held LDS030 records next
            seen: set = set()
            for eid in sorted(self._uninit):
                kept = [r for r in self._uninit[eid] if r not in seen]
                seen.update(kept)
                dict.__setitem__(self._uninit, eid, kept)

    def _judgeable(self, A: int) -> bool:
        if A == 0 and not self._acc and self.n_waves > 1:
            return all(w.nsig or not w.live for w in self._waves)
        return super()._judgeable(A)

    def _apply(self, item, wave: int) -> None:
        self._cur_seg = item[0]
        self.ring.seg = item[0]  # only the records pushed while applying an access
        try:
            super()._apply(item, wave)
        finally:
            self.ring.seg = None


class _OncePerSegRing:
    def __init__(self, ring):
        self.inner = ring
        self.seg = None
        self._now = -1
        self._seen: set = set()

    def push(self, rec) -> None:
        if self.seg is not None:
            if self.seg != self._now:
                self._now = self.seg
                self._seen.clear()
            if rec in self._seen:
                return
            self._seen.add(rec)
        self.inner.push(rec)


class _LaterSegOnly(set):
    def __init__(self, engine):
        super().__init__()
        self.engine = engine

    def update(self, writes) -> None:
        events = self.engine._lds.events
        super().update(e for e in writes if events.info(e).seg < self.engine._cur_seg)


class _RetractEqual(dict):
    def pop(self, key, default=None):
        recs = super().pop(key, None)
        if not recs:
            return default if recs is None else recs
        for eid in list(self):
            kept = [r for r in self[eid] if r not in recs]
            if kept:
                self[eid] = kept
            else:
                del self[eid]
        return recs


class _HiddenPlainShadow(LdsShadow):
    def apply(self, eid, wave, op, gb, lane, T):
        if op == OP_READ:
            return super().apply(eid, wave, op, gb, lane, T)
        ev = self.events
        own = self.wslot[gb, wave]
        own_lane = self.wlane[gb, wave]
        H = self.hid[gb]
        HL = self.hlane[gb]
        un = ev.seq[H] > T[ev.wc[H]]
        conf, uninit = super().apply(eid, wave, op, gb, lane, T)
        if op == OP_ATOMIC and un.any():
            r, c = np.nonzero(un)
            two_w = 2 * self.W
            pos = [r * two_w + c]
            prior, plane = [H[r, c]], [HL[r, c]]
            served = [np.zeros(r.size, np.bool_)]
            if conf is not None:
                pos.append(conf.pos)
                prior.append(conf.prior)
                plane.append(conf.prior_lane)
                served.append(conf.served)
            pos, prior, plane, served = (np.concatenate(x) for x in (pos, prior, plane, served))
            order = np.lexsort((pos, pos % two_w >= self.W))  # writes first, by position
            conf = Conflicts([(pos[order], prior[order], plane[order])], two_w, served[order])
        mine = H[:, wave].copy()
        H[~un] = 0
        if op == OP_ATOMIC:
            plain = (own != 0) & (ev.op[own] == OP_WRITE) & ~ev.copy[own]
            H[:, wave] = np.where(plain, own, mine)
            HL[:, wave] = np.where(plain, own_lane, HL[:, wave])
        else:
            H[:, wave] = 0
        self.hid[gb] = H
        self.hlane[gb] = HL
        return conf, uninit
