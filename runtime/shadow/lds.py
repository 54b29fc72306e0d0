"""Per-granule shadow of the batch's LDS, the event table its slots point into, and the
per-wave clock lineages that decide "happens before" for the slot entries.

Dimension letters: G workgroups in the batch, B LDS bytes per workgroup, W waves,
C counters, E processed access events, K granule bytes (a power of two <= 16 dividing B),
R = G*B/K shadow rows. Granule j of group g is row `g*B/K + j` (bytes j*K .. j*K+K-1).

| Name (MODEL) | Storage       | Shape    | Meaning                                              |
|--------------|---------------|----------|------------------------------------------------------|
| wslot        | LdsShadow.wl  | (R, W)   | event of wave w's last write/atomic of the bytes     |
|              |               |          | that is still unordered with a later access; 0 = none|
| rslot        | LdsShadow.rs  | (R, W)   | event of wave w's last read, same rule; 0 = none     |
| last_w       | .lastw        | (R,)     | the latest write/atomic of the bytes (0: never       |
|              |               |          | written); always also its wave's write slot          |
| prev_w       | .prev         | (R,)     | the write `last_w` superseded                        |
| (multi)      | .multi        | (R,)     | bool: more than one write slot is live (else only    |
|              |               |          | last_w's is, and a read checks just last_w)          |
| wlane, rlane | .lanes        | (R, 2W)  | uint8 lane of that event (255 = wave-level TDM op;   |
|              |               |          | 254 = differs inside the granule: see `lane_at`)     |
| (rlast)      | .rlast        | (R, W)   | `last_w` when that read was applied (MODEL §6a)      |
| hidden       | .hid, .hlane  | (R, W)   | wave w's last plain ds write of the bytes and its    |
|              |               |          | lane, while w's slot holds a later atomic of w; only |
|              |               |          | atomics check it (None until a kernel needs it)      |
| seq, wc      | EventTable    | (E,)     | int64 sequence number on its counter; int32          |
|              |               |          | wave*C + counter: the column of the clock table T    |
| op, tix,     | EventTable    | (E,)     | OP_READ/OP_WRITE/OP_ATOMIC; index of the event's own |
| copy, site,  |               |          | clock table in `clocks`; async/TDM copy?; site id;   |
| A, seg       |               |          | phases acquired; half-phase position at issue        |

Event ids are intp (no conversion when gathering into the clock bitmaps) unless the shadow
is large, then int32.

Granules. Every byte of a granule has the same state as long as every access so far
covered whole granules (its in-bounds footprint is a union of granules). An access that
does not is handled by *refining* the whole shadow to the largest granule it does cover
(np.repeat of every row array): the state stays exactly the per-byte state, K only
shrinks, and K = 1 is the per-byte shadow. The common case -- ds accesses whose lanes are
K-aligned multiples of K bytes, TDM tiles of K-aligned K-byte runs -- maps straight to rows
(`_lane_rows_fast`, `_tdm_granules`) without building the per-byte footprint; anything
else (partial coverage, out-of-bounds bytes) goes through the per-byte footprint. The rows
of an access are its granules in the order of their first byte in the per-byte footprint,
so "first conflicting byte/lane" and "first never-written byte" are the same as per byte:
`Footprint.rep()` gives that first byte (and its lane, group) per row. Footprints are
memoized with their payloads (operands.py keeps one payload per distinct operand content).

`init` of MODEL.md §1 is `last_w != 0` (both are set by every write and nothing else).

Event 0 is a sentinel ("no access") with seq -1, so an empty slot is always ordered. An
access `a` checks a prior event `p` with its clock table T (shape (W, C), flattened):

    p happens-before a   <=>   seq[p] <= T[wc[p]]

where T's row for another wave v is what `a`'s wave acquired from v through barriers (v's
completed ops at its signals), and its own row is its own completion state at `a` (+inf
for DS when `a` is itself a ds op: one wave's LDS queue is in order).

Clock lineages. The accesses of one wave of one kind (ds op / copy) are applied in program
order, and along that sequence T only grows (phases acquired and completion only grow). So
once a prior event is ordered before one of them it is ordered before every later one.
A `Clock` per (wave, kind) keeps `bad[e]` = "event e is not ordered before the current T"
for the events it has evaluated (e < L; events >= L read as True = "unknown") and the list
of bad ones; when T grows only that list (and the events appended since) is re-evaluated.
The hot path is then one gather `bad.take(slots)`: all zero means every entry is ordered;
otherwise the lineage catches up to the newest events and looks again, and only real
conflicts reach the slow path (the per-entry logic of the per-byte engine, unchanged).
Reads of one wave that share a clock table can be checked as one group
(`read_group`/`check_reads`/`store_reads`): reads do not change what reads check.
"""

from __future__ import annotations

from operator import is_

import numpy as np

from ..records import NO_LANE
from . import compiled
from .errors import ShadowInternalError
from .kinds import N_COUNTERS, OP_ATOMIC, OP_READ, OP_WRITE
from .tables import (  # noqa: F401  (re-exported)
    _U64, byte_footprint, _EMPTY_I, _GROUP_ROWS_MAX, _INTP_SLOTS_MAX, _READ_GROUPS, LANE_PER_BYTE, MAX_GRANULE_LOG2, Clock,
    Conflicts, EventTable, Footprint, LaneIndex, ReadGroup, _cnz, _read_group_rows, none_bad,
)


class LdsShadow:
    """The shadow of G workgroups' LDS (state table: module docstring)."""

    #: per-byte events kept before their payloads are pruned to the ones slots still hold
    PRUNE_AT = 4096

    def __init__(self, groups: int, lds_bytes: int, n_waves: int, compiled: bool = False):
        self.G = groups
        self.B = lds_bytes
        self.W = n_waves
        k = 0
        while k < MAX_GRANULE_LOG2 and lds_bytes % (2 << k) == 0:
            k += 1
        self.events = EventTable()
        self.n_lanes = 32 * groups
        self.lineages: list = [None] * (2 * n_waves)  # index 2*wave + is_ds; Clock on first use
        # events whose lanes differ inside a granule: eid -> payload (for `lane_at`)
        self._per_byte: dict = {}
        self._prune_at = self.PRUNE_AT
        self.read_last = None  # after a read: last_w of its rows (engine: MODEL §6a)
        self.compiled = compiled  # the clean cases checked in C (compiled.py), when it builds
        self._set_granule(k, fresh=True)

    # -- granules -------------------------------------------------------------------------------

    def _set_granule(self, k: int, fresh: bool = False) -> None:
        """Granule 2**k. `fresh`: allocate zeroed state; else refine the current state.

        Storage: `wl` = write slots, `lastw` = last_w, `multi` = "more than one write slot of
        the row is live" (else the only live one is last_w's, in its wave's column: a read
        checks just last_w), `rs` = read slots, `prev` = prev_w, `lanes` = wlane | rlane.
        Event ids are intp (gathers into the clock bitmaps need no conversion) unless the
        shadow is large."""
        rows = self.G * self.B >> k
        W = self.W
        if fresh or self.events.n == 1:  # nothing recorded yet: lazily zeroed pages
            dt = np.intp if rows * (3 * W + 2) <= _INTP_SLOTS_MAX else np.int32
            self.wl = np.zeros((rows, W), dt)
            self.lastw = np.zeros(rows, dt)
            self.multi = np.zeros(rows, np.bool_)
            self.rs = np.zeros((rows, W), dt)
            self.prev = np.zeros(rows, dt)
            self.lanes = np.zeros((rows, 2 * W), np.uint8)
            self.rlast = np.zeros((rows, W), dt)
            self.hid = self.hlane = None
        else:
            f = 1 << (self.k - k)
            names = ("wl", "lastw", "multi", "rs", "prev", "lanes", "rlast")
            for name in names + (("hid", "hlane") if self.hid is not None else ()):
                setattr(self, name, np.repeat(getattr(self, name), f, axis=0))
        self.k = k
        self.K = 1 << k
        self.Bk = self.B >> k
        self.fpkey = (k, self.B, self.G)  # what a memoized lane footprint depends on
        # column views: a 1-D fancy store into a view is ~4x cheaper than [rows, w]
        self._wcol = [self.wl[:, w] for w in range(W)]
        self._rcol = [self.rs[:, w] for w in range(W)]
        self._lcol = [self.lanes[:, j] for j in range(2 * W)]
        self._rlastcol = [self.rlast[:, w] for w in range(W)]
        # whole rows as one item each: assigning one row of W slots to many rows is about
        # twice as fast this way as numpy's 2-D fancy assignment (TDM writes: 4096 rows)
        row = np.dtype((np.void, W * self.wl.dtype.itemsize))
        self._wrows, self._rrows = self.wl.view(row).reshape(-1), self.rs.view(row).reshape(-1)
        self._row, self._zero_row = row, np.zeros(1, row)[0]
        self._wtmpl = np.zeros(W, self.wl.dtype)  # a race-free write's new write slots
        self._lane_rows: dict[int, np.ndarray] = {}
        nl = 32 * self.G
        self._gofs = (np.arange(nl, dtype=np.int64) >> 5) * self.Bk
        self._grp_ofs = np.arange(self.G, dtype=np.int64)[:, None] * self.Bk

    # -- footprints -----------------------------------------------------------------------------

    @staticmethod
    def byte_footprint(pay):
        return byte_footprint(pay)

    def footprint(self, pay) -> Footprint | None:
        """The access's rows at the current granule (refining it if needed); None if it
        touches no byte at all. Lane payloads memoize it (it is a pure function of the
        payload, the granule and the shape of the batch)."""
        if pay[0] == "lanes":
            memo = pay[4]
            fp = memo.get(self.fpkey, False)
            if fp is False:
                fp = self._lane_rows_fast(pay)
                if fp is False:
                    fp = self._general(pay)  # may refine: memoize under the new granule
                memo[self.fpkey] = fp
            return fp
        # a TDM footprint: memoized with the first group's copy, for the same per-group copies
        per_group, memos = pay[1], pay[2]
        if not memos:
            return None
        hit = memos[0].get(self.fpkey)
        if hit is not None and len(hit[0]) == len(per_group) and all(map(is_, hit[0], per_group)):
            return hit[1]
        fp = self._tdm_rows_fast(pay)
        if fp is False:
            fp = self._general(pay)  # may refine: memoize under the new granule
        memos[0][self.fpkey] = (list(per_group), fp)
        return fp

    def _lane_rows_fast(self, pay):
        _kind, addr, mask, nbytes, _memo = pay
        k = self.k
        K = 1 << k
        if nbytes & (K - 1):
            return False
        nl = self.n_lanes
        active = np.count_nonzero(mask)
        if active == 0:
            return None
        if active == nl:
            a, sel = addr, None
        else:
            sel = np.flatnonzero(mask)
            a = addr[sel]
        if K > 1 and int(np.bitwise_or.reduce(a)) & (K - 1):
            return False
        if int(a.view(_U64).max()) > self.B - nbytes:  # negative offsets are huge as u64
            return False
        q = a >> k if k else a
        if self.G > 1:
            q = q + (self._gofs if sel is None else self._gofs.take(sel))
        m = nbytes >> k
        if m > 1:
            q = (q[:, None] + np.arange(m, dtype=np.int64)).ravel()
        if sel is None:
            lanes = self._lane_rows.get(m)
            if lanes is None:
                lanes = self._lane_rows[m] = np.repeat((np.arange(nl) & 31).astype(np.uint8), m)
        else:
            lanes = (sel & 31).astype(np.uint8)
            if m > 1:
                lanes = np.repeat(lanes, m)
        return Footprint(q, lanes, (pay, K))

    def _tdm_rows_fast(self, pay):
        per_group, memos = pay[1], pay[2]
        k = self.k
        parts = []
        shared = None
        for o, memo in zip(per_group, memos):
            q = memo.get((k, self.B, None), False)
            if q is False:
                q = memo[(k, self.B, None)] = _tdm_granules(o, k, self.B)
            if q is None:
                return False
            if shared is None:
                shared = o
            elif shared is not o:
                shared = False
            parts.append(q)
        if not any(q.size for q in parts):
            return None
        if self.G == 1:
            rows = parts[0]
        elif shared is not False:
            rows = (self._grp_ofs + parts[0]).ravel()
        else:
            rows = np.concatenate([q + g * self.Bk for g, q in enumerate(parts)])
        return Footprint(rows, NO_LANE, (pay, 1 << k))

    def _general(self, pay):
        """Per-byte footprint: out-of-bounds bytes, partial granules (refines the shadow)."""
        grp, byte, lane = byte_footprint(pay)
        if byte.size == 0:
            return None
        B = self.B
        oob = None
        ub = byte.view(_U64)
        if int(ub.max()) >= B:
            bad = ub >= B
            oob = [(int(grp[i]), int(byte[i]), int(lane[i]))
                   for i in first_per_group(np.flatnonzero(bad), grp, self.G)]
            keep = ~bad
            grp, byte, lane = grp[keep], byte[keep], lane[keep]
            if byte.size == 0:
                return Footprint(_EMPTY_I, NO_LANE, None, (grp, byte, lane), oob)
        gb = grp * B + byte if self.G > 1 else byte
        k = self.k
        nbytes = None
        while True:
            q = gb >> k if k else gb
            _u, first = np.unique(q, return_index=True)
            if k == 0:
                break
            if nbytes is None:
                nbytes = np.unique(gb).size
            if nbytes == _u.size << k:  # every granule touched is covered whole
                break
            k -= 1
        if k < self.k:
            self._set_granule(k)
        first.sort()
        rep = (grp[first], byte[first], lane[first])
        per_byte = pay[0] == "lanes"
        return Footprint(q[first], LANE_PER_BYTE if per_byte else NO_LANE, None, rep, oob)

    # -- clocks ---------------------------------------------------------------------------------

    def retime(self, c: "Clock", key, T: np.ndarray) -> None:
        """Lineage `c` moves on to clock table T (key `key`)."""
        ev = self.events
        c.key, c.T, c.tix = key, T, len(ev.clocks)
        ev.clocks.append(T)
        self._refresh(c)

    def _refresh(self, c: "Clock") -> None:
        """Re-evaluate the lineage's bad events (T only grows along a lineage, so of the
        events it has seen only those can turn good) and evaluate the ones it has not seen
        yet -- one gather for both."""
        ev = self.events
        L, E = c.L, ev.n
        if len(c.bad) < E + 1:
            self._grow(c, 2 * E + 64)
        bl = c.badlist
        if E > L:
            ids = np.concatenate((bl, np.arange(L, E))) if bl.size else np.arange(L, E)
            c.L = E
        elif bl.size:
            ids = bl
        else:
            return
        bad = ev.seq.take(ids) > c.T.take(ev.wc.take(ids))
        c.bad[ids] = bad
        c.badlist = ids[bad]

    @staticmethod
    def _grow(c: "Clock", cap: int) -> None:
        grown = np.ones(cap, np.bool_)
        grown[: c.L] = c.bad[: c.L]
        c.bad = grown

    # -- the check ------------------------------------------------------------------------------

    def _read_check(self, rows, clk: "Clock"):
        """(last_w of the rows, unordered write entries as (r, c, event) or None)."""
        last = self.lastw.take(rows)
        if _cnz(self.multi.take(rows)):
            Sw = self.wl.take(rows, axis=0)
            if none_bad(clk, Sw):
                return last, None
            un = clk.bad.take(Sw)
            if _cnz(un) and clk.L < self.events.n:
                self._refresh(clk)  # catch up with the newest events
                un = clk.bad.take(Sw)
            if not _cnz(un):
                return last, None
            r, c = np.nonzero(un)
            return last, (r, c, Sw[r, c])
        # at most one live write entry per row: last_w, in its own wave's column (the
        # newest writes: `none_bad` seldom decides these)
        un = clk.bad.take(last)
        if _cnz(un) and clk.L < self.events.n:
            self._refresh(clk)
            un = clk.bad.take(last)
        if not _cnz(un):
            return last, None
        r = np.flatnonzero(un)
        pri = last[r]
        return last, (r, self.events.wc.take(pri) // N_COUNTERS, pri)

    def apply(self, eid: int, wave: int, op: int, fp: Footprint, clk: "Clock"):
        """Check access `eid` of `wave` on rows `fp.rows` against the slots, then record it.

        Returns (Conflicts or None, indices of never-written rows or None). The hot path is
        a few gathers, a bitmap lookup and a few stores; everything else runs only on a
        conflict.
        """
        rows = fp.rows
        W = self.W
        if op == OP_WRITE and self.compiled and self.hid is None and compiled.write(self, wave, eid, fp, clk.bad):
            return None, None
        if op == OP_READ:
            last, found = self._read_check(rows, clk)
            conf = None
            if found is not None:
                r, c, pri = found
                rr = rows[r]
                prev = self.prev.take(rr)
                # the read had ordered data: its write was the latest, the one before ordered
                served = (pri == last[r]) & (prev != 0) & self.events.ordered(prev, clk.T)
                conf = Conflicts([(r * (2 * W) + c, r, pri, self.lanes[rr, c], served)])
            uninit = None if _cnz(last) == rows.size else np.flatnonzero(last == 0)
            self._rcol[wave][rows] = eid
            self._lcol[W + wave][rows] = fp.lanes
            self._rlastcol[wave][rows] = last
            self.read_last = last
            return conf, uninit

        Sw = self.wl.take(rows, axis=0)
        Sr = self.rs.take(rows, axis=0)
        if none_bad(clk, Sw, Sr):
            uw = ur = None
            nW = nR = 0
        else:
            bad = clk.bad
            uw, ur = bad.take(Sw), bad.take(Sr)
            if (_cnz(uw) or _cnz(ur)) and clk.L < self.events.n:
                self._refresh(clk)
                bad = clk.bad
                uw, ur = bad.take(Sw), bad.take(Sr)
            nW, nR = _cnz(uw), _cnz(ur)
        last = self.lastw.take(rows)
        uninit = None
        if op == OP_ATOMIC:
            uninit = None if _cnz(last) == rows.size else np.flatnonzero(last == 0)
        self.prev[rows] = last
        self.lastw[rows] = eid
        conf = None
        hidden = op == OP_ATOMIC or self.hid is not None  # kernels without atomics: never
        if nW == 0 and nR == 0:
            if hidden:
                self._hidden(rows, wave, op, Sw[:, wave], None, None)
            # race-free: every entry happens before this write and is superseded by it
            t = self._wtmpl
            t[wave] = eid
            self._wrows[rows] = t.view(self._row)[0]
            t[wave] = 0
            self.multi[rows] = False
            if _cnz(Sr):
                self._rrows[rows] = self._zero_row
        else:
            conf = self._write_conflicts(op, rows, Sw, Sr, uw, ur, nW, nR)
            if hidden:
                conf = self._hidden(rows, wave, op, Sw[:, wave], clk, conf)
            # Entries ordered before this write are superseded (so later accesses report
            # only the writes and reads still unordered with them); unordered ones stay.
            nzW = _cnz(Sw)
            if nzW > nW and nzW != _cnz(Sw[:, wave]):  # another wave's entry to drop
                Sw *= uw
            Sw[:, wave] = eid
            self.wl[rows] = Sw
            self.multi[rows] = np.count_nonzero(Sw, axis=1) > 1
            if _cnz(Sr) > nR:
                Sr *= ur
                self.rs[rows] = Sr
        self._lcol[wave][rows] = fp.lanes
        return conf, uninit

    def read_group(self, fps: list) -> "ReadGroup":
        """The concatenated rows and lanes of a run of reads (memoized across engines:
        kernels repeat their read sequences, and footprints are shared, immutable objects
        specific to granule and batch shape)."""
        key = tuple(fps)
        g = _READ_GROUPS.get(key)
        if g is None:
            g = ReadGroup(fps)
            _read_group_rows[0] += g.rows.size
            if _read_group_rows[0] > _GROUP_ROWS_MAX:
                _READ_GROUPS.clear()
                _read_group_rows[0] = g.rows.size
            _READ_GROUPS[key] = g
        return g

    def check_reads(self, g: "ReadGroup", clk: "Clock"):
        """The check of `apply` for a run of reads (same wave and clock table): their
        last_w (compiled.CLEAN from the C) if every entry is ordered and every byte was
        written, else None (nothing changed; apply them one by one)."""
        if self.compiled and compiled.reads_clean(self, g, clk.bad):
            return compiled.CLEAN
        last, found = self._read_check(g.rows, clk)
        if found is not None or _cnz(last) != g.rows.size:
            return None
        return last

    def store_reads(self, eid0: int, wave: int, g: "ReadGroup", last) -> None:
        """Record reads eid0, eid0+1, ... of group `g` (`last` from check_reads)."""
        rows = g.rows
        if last is compiled.CLEAN:  # checked in C: stored in C (it reads last_w itself)
            compiled.store_reads(self, wave, g, eid0)
            self.read_last = None
            return
        # in program order: a later read's entry wins, as it would one read at a time
        self._rcol[wave][rows] = g.eids_as(self.rs.dtype) + eid0
        self._lcol[self.W + wave][rows] = g.lanes
        self._rlastcol[wave][rows] = last
        self.read_last = None

    def _write_conflicts(self, op, rows, SW, SR, unW, unR, nW, nR):
        ev = self.events
        ev.sync()
        W = self.W
        two_w = 2 * W
        reportW = unW
        if op == OP_ATOMIC and nW:  # atomics to the same bytes do not race with each other
            reportW = unW & (ev.op.take(SW) != OP_ATOMIC)
        parts = []
        if nW and _cnz(reportW):
            r, c = np.nonzero(reportW)
            rr = rows[r]
            parts.append((r * two_w + c, r, SW[r, c], self.lanes[rr, c], np.zeros(r.size, np.bool_)))
        if nR:
            r, c = np.nonzero(unR)
            rr = rows[r]
            rd = SR[r, c]
            rl = self.rlast[rr, c]
            # the read had ordered data: the latest write when it ran happened before it
            served = (rl != 0) & ev.ordered_before(rl, rd)
            parts.append((r * two_w + W + c, r, rd, self.lanes[rr, W + c], served))
        return Conflicts(parts) if parts else None

    def _hidden(self, rows, wave, op, own, clk, conf):
        """Check and update the hidden plain writes (MODEL §4 step 4) for a write of `wave`
        whose own slots held `own`; `clk` None: the write found every slot entry ordered.

        Why a second slot: a wave's atomic replaces its own plain write in its slot; for any
        later non-atomic access that write is ordered whenever the atomic is (same counter,
        in order), so checking the atomic is enough, but another wave's atomic is exempt
        against the atomic and must still see the plain write. Returns `conf` with the unordered hidden writes an atomic
        races merged in (as write-slot entries, in position order)."""
        H = self.hid
        if op == OP_ATOMIC:
            plain = self.events.plain_writes(own)
            if H is None:
                if not _cnz(plain):
                    return conf
                H = self.hid = np.zeros_like(self.wl)
                self.hlane = np.zeros(self.wl.shape, np.uint8)
        if clk is None:  # every other wave's hidden write is ordered (its atomic was)
            Hs = np.zeros((rows.size, self.W), H.dtype)
        else:
            Hs = H.take(rows, axis=0)
            uh = clk.bad.take(Hs)
            if op == OP_ATOMIC and _cnz(uh):
                r, c = np.nonzero(uh)
                extra = (r * (2 * self.W) + c, r, Hs[r, c], self.hlane[rows[r], c], np.zeros(r.size, np.bool_))
                conf = Conflicts([extra]) if conf is None else conf.merged(extra, self.W)
            own_hid = Hs[:, wave].copy()
            Hs *= uh  # ordered ones are superseded, as in the write slots
        hl = self.hlane.take(rows, axis=0)
        if op == OP_ATOMIC:  # the wave's own last plain write stays visible to other atomics
            if clk is None:
                own_hid = H[rows, wave]
            Hs[:, wave] = np.where(plain, own, own_hid)
            hl[:, wave] = np.where(plain, self.lanes[rows, wave], hl[:, wave])
        else:  # superseded by this write (a copy may not be ordered after it, still)
            Hs[:, wave] = 0
        H[rows] = Hs
        self.hlane[rows] = hl
        return conf

    # -- lanes of recorded events ---------------------------------------------------------------

    def register_per_byte(self, eid: int, pay, pending: int | None = None) -> None:
        """Event `eid` will store LANE_PER_BYTE lanes: keep its payload for `lane_at`.
        Called before the event's slots are written: the events from `pending` (default
        `eid`) on are not in the slots yet, and a pruning keeps them (issue 29: it dropped
        the event being registered, and the race it later took part in ended in a KeyError)."""
        self._per_byte[eid] = pay
        if len(self._per_byte) > self._prune_at:
            self._prune_per_byte(eid if pending is None else pending)

    def _prune_per_byte(self, pending: int) -> None:
        """Drop the payloads of per-byte events no slot holds any more (ids >= `pending`:
        on their way into the slots)."""
        W = self.W
        live = set(np.unique(self.wl[self.lanes[:, :W] == LANE_PER_BYTE]).tolist())
        live.update(np.unique(self.rs[self.lanes[:, W:] == LANE_PER_BYTE]).tolist())
        if self.hid is not None:
            live.update(np.unique(self.hid[self.hlane == LANE_PER_BYTE]).tolist())
        self._per_byte = {e: p for e, p in self._per_byte.items() if e in live or e >= pending}
        self._prune_at = max(self.PRUNE_AT, 2 * len(self._per_byte))

    def lanes_at(self, eids: np.ndarray, stored: np.ndarray, g: np.ndarray, byte: np.ndarray) -> np.ndarray:
        """Per i: the lane of event eids[i] that accessed byte byte[i] of group g[i] (the last
        one, as a per-byte store keeps), given the lane value stored[i] in its slot."""
        out = stored.astype(np.int64)
        per = np.flatnonzero(stored == LANE_PER_BYTE)
        for eid in np.unique(eids[per]).tolist():  # one index per event, not a scan per group
            pay = self._per_byte.get(eid)
            if pay is None:  # an invariant broke: name it rather than a bare KeyError
                raise ShadowInternalError(f"the lanes of LDS event {eid} were dropped while a slot still held it")
            k = per[eids[per] == eid]
            got = LaneIndex(pay).last(g[k], byte[k])
            if got is None:
                raise ShadowInternalError(f"LDS event {eid} did not touch every byte it is said to race on")
            out[k] = got
        return out


def _tdm_granules(o: np.ndarray, k: int, B: int):
    """Granule indices of a TDM group footprint made of K-aligned K-byte runs, all in
    bounds; None otherwise (per-byte path)."""
    n = o.size
    if n == 0:
        return _EMPTY_I
    K = 1 << k
    if n & (K - 1):
        return None
    if K == 1:
        base = o
    else:
        v = o.reshape(-1, K)
        base = v[:, 0]
        if int(np.bitwise_or.reduce(base)) & (K - 1):
            return None
        if not np.array_equal(v, base[:, None] + np.arange(K, dtype=np.int64)):
            return None
    if int(base.view(_U64).max()) > B - K:
        return None
    return base >> k if k else base


def first_per_group(idx: np.ndarray, grp: np.ndarray, G: int) -> list:
    """The first of the indices `idx` (ascending) in each group."""
    if idx.size == 0:
        return []
    if G == 1:
        return [int(idx[0])]
    _g, first = np.unique(grp[idx], return_index=True)
    return [int(i) for i in idx[np.sort(first)]]
