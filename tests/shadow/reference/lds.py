"""FROZEN REFERENCE: the byte-exact engine as of commit 111a1e2 (before the granule/clock-lineage
fast paths), kept verbatim for the differential tests in test_fastpath.py. Do not optimise.

Per-byte shadow of the batch's LDS, and the event table its slots point into.

Dimension letters: G workgroups in the batch, B LDS bytes per workgroup, W waves,
C counters, E processed access events. Byte b of group g is row `g*B + b`.

| Name         | Storage    | Shape    | Meaning                                                 |
|--------------|------------|----------|---------------------------------------------------------|
| wslot        | LdsShadow  | (G*B, W) | int32 event of wave w's last write/atomic of the byte   |
|              |            |          | that is still unordered with a later access; 0 = none   |
| rslot        | LdsShadow  | (G*B, W) | int32 event of wave w's last read, same rule; 0 = none  |
| wlane, rlane | LdsShadow  | (G*B, W) | uint8 lane of that event (255 = wave-level TDM op)      |
| init         | LdsShadow  | (G*B,)   | bool: some write of this workgroup covered the byte     |
| seq          | EventTable | (E,)     | int64 sequence number of the event on its counter       |
| wc           | EventTable | (E,)     | int32 wave*C + counter: the column of the clock table T |
| op, copy     | EventTable | (E,)     | OP_READ / OP_WRITE / OP_ATOMIC; async/TDM copy?         |
| site, A, seg | EventTable | (E,)     | site id, phases acquired, half-phase position at issue  |

Event 0 is a sentinel ("no access") with seq -1, so an empty slot is always ordered and
the hot path needs no validity mask. An access `a` checks a prior event `p` with one
gather from the clock table T of `a` (shape (W, C), flattened):

    p happens-before a   <=>   seq[p] <= T[wc[p]]

where T's row for another wave v is what `a`'s wave acquired from v through barriers (v's
completed ops at its signals), and its own row is its own completion state at `a` (+inf
for DS when `a` is itself a ds op: one wave's LDS queue is in order).
"""

from __future__ import annotations

import numpy as np

from ldssan.runtime.records import NO_LANE
from ldssan.runtime.shadow.kinds import N_COUNTERS, OP_ATOMIC, OP_READ
from ldssan.runtime.shadow.classify import AccessInfo


class EventTable:
    """Columns of every processed access event; row 0 is the sentinel."""

    _COLUMNS = (("seq", np.int64), ("wc", np.int32), ("op", np.int8), ("copy", np.bool_),
                ("site", np.int64), ("A", np.int32), ("seg", np.int32))

    def __init__(self, capacity: int = 1024):
        self.n = 1
        for name, dtype in self._COLUMNS:
            setattr(self, name, np.zeros(capacity, dtype))
        self.seq[0] = -1

    def __len__(self) -> int:
        return self.n - 1

    def append(self, seq, wc, op, copy, site, A, seg) -> int:
        i = self.n
        if i == len(self.seq):
            for name, _dtype in self._COLUMNS:
                col = getattr(self, name)
                grown = np.zeros(2 * len(col), col.dtype)
                grown[: len(col)] = col
                setattr(self, name, grown)
        self.seq[i] = seq
        self.wc[i] = wc
        self.op[i] = op
        self.copy[i] = copy
        self.site[i] = site
        self.A[i] = A
        self.seg[i] = seg
        self.n = i + 1
        return i

    def info(self, eid: int) -> AccessInfo:
        wc = int(self.wc[eid])
        return AccessInfo(
            wave=wc // N_COUNTERS, site=int(self.site[eid]), op=int(self.op[eid]),
            copy=bool(self.copy[eid]), ctr=wc % N_COUNTERS, seq=int(self.seq[eid]),
            A=int(self.A[eid]), seg=int(self.seg[eid]),
        )


class Conflicts:
    """Unordered (prior event, byte) entries found by one access, in byte order.

    `pos` = row*2W + slot (slot < W: a write slot, W..2W-1: a read slot), so sorting by
    `pos` is "first conflicting byte/lane first"; `row` indexes the access's byte arrays.
    """

    __slots__ = ("pos", "row", "prior", "prior_lane", "served")

    def __init__(self, parts, two_w, served=None):
        if len(parts) == 1:
            self.pos, self.prior, self.prior_lane = parts[0]
        else:
            self.pos = np.concatenate([p[0] for p in parts])
            self.prior = np.concatenate([p[1] for p in parts])
            self.prior_lane = np.concatenate([p[2] for p in parts])
        self.row = self.pos // two_w
        # per entry: the read of the pair had its bytes from an ordered earlier write, which
        # the write of the pair superseded (classify: a refill too early is a WAR)
        self.served = served


class LdsShadow:
    """The shadow bytes of G workgroups' LDS (state table: module docstring)."""

    def __init__(self, groups: int, lds_bytes: int, n_waves: int):
        rows = groups * lds_bytes
        self.W = n_waves
        # np.zeros maps zero pages lazily: an engine per batch costs nothing until touched.
        self.wslot = np.zeros((rows, n_waves), np.int32)
        self.rslot = np.zeros((rows, n_waves), np.int32)
        self.wlane = np.zeros((rows, n_waves), np.uint8)
        self.rlane = np.zeros((rows, n_waves), np.uint8)
        self.init = np.zeros(rows, np.bool_)
        # the latest write of each byte, the write it superseded, and per read slot whether
        # that read's bytes came from a write ordered before it
        self.last_w = np.zeros(rows, np.int32)
        self.prev_w = np.zeros(rows, np.int32)
        self.rserved = np.zeros((rows, n_waves), np.bool_)
        self.ordered_writes = None  # after a read: the latest writes it consumed in order
        self.events = EventTable()
        # per-wave column views: a 1-D fancy store into a view is ~4x cheaper than [gb, w]
        self._wcol = [self.wslot[:, w] for w in range(n_waves)]
        self._rcol = [self.rslot[:, w] for w in range(n_waves)]
        self._wlcol = [self.wlane[:, w] for w in range(n_waves)]
        self._rlcol = [self.rlane[:, w] for w in range(n_waves)]

    def apply(self, eid: int, wave: int, op: int, gb: np.ndarray, lane: np.ndarray, T: np.ndarray):
        """Check access `eid` of `wave` on rows `gb` against the slots, then record it.

        Returns (Conflicts or None, indices of never-written bytes or None). The hot path is
        a handful of `take`s and one comparison; everything else runs only on a conflict.
        """
        ev = self.events
        seq, wc = ev.seq, ev.wc
        W = self.W
        two_w = 2 * W
        n = gb.size
        if op == OP_READ:
            S = self.wslot.take(gb, axis=0)
            un = seq.take(S) > T.take(wc.take(S))
            conf = None
            last = self.last_w.take(gb)
            if np.count_nonzero(un):
                r, c = np.nonzero(un)
                prev = self.prev_w.take(gb[r])
                served = (S[r, c] == last[r]) & (prev != 0) & (seq.take(prev) <= T.take(wc.take(prev)))
                conf = Conflicts([(r * two_w + c, S[r, c], self.wlane[gb[r], c])], two_w, served)
            ini = self.init.take(gb)
            uninit = None if np.count_nonzero(ini) == n else np.flatnonzero(~ini)
            self._rcol[wave][gb] = eid
            self._rlcol[wave][gb] = lane
            ordered = (last != 0) & (seq.take(last) <= T.take(wc.take(last)))
            self.rserved[gb, wave] = ordered
            self.ordered_writes = last[ordered] if ordered.any() else None
            return conf, uninit

        SW = self.wslot.take(gb, axis=0)
        SR = self.rslot.take(gb, axis=0)
        unW = seq.take(SW) > T.take(wc.take(SW))
        unR = seq.take(SR) > T.take(wc.take(SR))
        nW, nR = np.count_nonzero(unW), np.count_nonzero(unR)
        uninit = None
        reportW = unW
        if op == OP_ATOMIC:
            if nW:  # atomics to the same bytes do not race with each other
                reportW = unW & (ev.op.take(SW) != OP_ATOMIC)
            ini = self.init.take(gb)
            uninit = None if np.count_nonzero(ini) == n else np.flatnonzero(~ini)
        parts = []
        served = []
        if nW and np.count_nonzero(reportW):
            r, c = np.nonzero(reportW)
            parts.append((r * two_w + c, SW[r, c], self.wlane[gb[r], c]))
            served.append(np.zeros(r.size, np.bool_))
        if nR:
            r, c = np.nonzero(unR)
            parts.append((r * two_w + W + c, SR[r, c], self.rlane[gb[r], c]))
            served.append(self.rserved[gb[r], c])
        conf = Conflicts(parts, two_w, np.concatenate(served)) if parts else None

        # Entries ordered before this write are superseded (so later accesses report only
        # the writes and reads still unordered with them); unordered ones stay.
        nzW = np.count_nonzero(SW)
        if nzW > nW and nzW != np.count_nonzero(SW[:, wave]):  # another wave's entry to drop
            SW *= unW
            SW[:, wave] = eid
            self.wslot[gb] = SW
        else:
            self._wcol[wave][gb] = eid
        self._wlcol[wave][gb] = lane
        if np.count_nonzero(SR) > nR:
            SR *= unR
            self.rslot[gb] = SR
        self.init[gb] = True
        self.prev_w[gb] = self.last_w.take(gb)
        self.last_w[gb] = eid
        return conf, uninit


# -- footprints -------------------------------------------------------------------------------

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_L = np.zeros(0, np.uint8)


class LaneFootprints:
    """Expands per-lane (address, size) into the bytes touched, lane-major: (group, byte, lane).

    The full-exec-mask case (the common one) reuses cached group/lane vectors per size.
    """

    def __init__(self, groups: int):
        self.n_lanes = 32 * groups
        self._full: dict[int, tuple] = {}
        self._arange: dict[int, np.ndarray] = {}

    def _lane_vectors(self, nbytes: int):
        hit = self._full.get(nbytes)
        if hit is None:
            ln = np.repeat(np.arange(self.n_lanes, dtype=np.int64), nbytes)
            hit = self._full[nbytes] = (ln >> 5, (ln & 31).astype(np.uint8))
        return hit

    def __call__(self, addr: np.ndarray, mask: np.ndarray, nbytes: int):
        active = np.count_nonzero(mask)
        if active == 0:
            return _EMPTY_I, _EMPTY_I, _EMPTY_L
        ar = self._arange.get(nbytes)
        if ar is None:
            ar = self._arange[nbytes] = np.arange(nbytes, dtype=np.int64)
        if active == self.n_lanes:
            byte = addr if nbytes == 1 else (addr[:, None] + ar).ravel()
            grp, lane = self._lane_vectors(nbytes)
            return grp, byte, lane
        lanes = np.flatnonzero(mask)
        a = addr[lanes]
        if nbytes == 1:
            byte, ln = a, lanes
        else:
            byte = (a[:, None] + ar).ravel()
            ln = np.repeat(lanes, nbytes)
        return ln >> 5, byte, (ln & 31).astype(np.uint8)


def tdm_footprint(offsets: list):
    """(group, byte, lane) of a TDM op: per group the decoded LDS byte offsets."""
    nonempty = [(g, o) for g, o in enumerate(offsets) if o.size]
    if not nonempty:
        return _EMPTY_I, _EMPTY_I, _EMPTY_L
    byte = np.concatenate([o for _g, o in nonempty]) if len(nonempty) > 1 else nonempty[0][1]
    grp = np.concatenate([np.full(o.size, g, np.int64) for g, o in nonempty])
    return grp, byte, np.full(byte.size, NO_LANE, np.uint8)
