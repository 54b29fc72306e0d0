"""Tables of the LDS shadow: processed events, clock lineages, conflicts, footprints and
read groups (the state table is in lds.py's docstring)."""

from __future__ import annotations

import numpy as np

from ldssan.passes.ir.caches import register_cache
from ..records import NO_LANE  # noqa: F401
from .classify import AccessInfo
from .errors import ShadowLimitError
from .kinds import N_COUNTERS, OP_WRITE

#: wlane/rlane value: the event's lanes differ inside the granule; `lane_at` recomputes it
LANE_PER_BYTE = 254
#: log2 of the coarsest granule (16 bytes: the widest per-lane ds access, b128)
MAX_GRANULE_LOG2 = 4
#: rows the memoized read groups may hold before they are dropped
_GROUP_ROWS_MAX = 1 << 20
_READ_GROUPS: dict = {}  # tuple of Footprints -> ReadGroup
_read_group_rows = [0]


def clear_read_groups() -> None:
    """Drop the memoized read groups (a pure speed-up)."""
    _READ_GROUPS.clear()
    _read_group_rows[0] = 0


#: slot entries up to which event ids are stored as intp rather than int32 (speed vs memory)
_INTP_SLOTS_MAX = 1 << 20

_U64 = np.uint64
try:  # the C function: np.count_nonzero's Python wrapper costs 2x on small arrays
    from numpy._core.multiarray import count_nonzero as _cnz
except ImportError:  # pragma: no cover - other numpy layouts
    _cnz = np.count_nonzero
_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_L = np.zeros(0, np.uint8)


class EventTable:
    """Every processed access event; row 0 is the sentinel.

    `seq` and `wc` (what the clock check reads) are numpy columns kept up to date. The
    other columns are filled in by `sync()` -- on the slow paths, and every
    `_SYNC_EVERY` events to bound memory; until then an event is a tuple
    (seq, wc, op, tix, copy, site, A, seg) in `_recent`.
    """

    _COLUMNS = (("seq", np.int64), ("wc", np.int32), ("op", np.int8), ("tix", np.int32),
                ("copy", np.bool_), ("site", np.int64), ("A", np.int32), ("seg", np.int32))
    _SYNC_EVERY = 4096
    #: event ids fit the slots' dtype (int32 for a large shadow) and `tix` (int32: at most one
    #: clock table per event); `_grow` refuses by name to go past it, never wraps
    ID_MAX = np.iinfo(np.int32).max

    def __init__(self, capacity: int = 1024):
        self.n = 1
        self.id_max = self.ID_MAX
        for name, dtype in self._COLUMNS:
            setattr(self, name, np.zeros(capacity, dtype))
        self.seq[0] = -1
        self._synced = 1  # events below are in the numpy columns; the rest in _recent
        self._recent: list[tuple] = []
        self.clocks: list[np.ndarray] = []  # clock tables, indexed by `tix`
        self._clock_stack = None  # rows 0.._stacked-1 are clocks[0.._stacked-1] (capacity doubles)
        self._stacked = 0

    def __len__(self) -> int:
        return self.n - 1

    def _grow(self, need: int) -> None:
        if need - 1 > self.id_max:
            raise ShadowLimitError(f"one batch of the launch made more than {self.id_max:,} LDS accesses, "
                                   "the most its shadow can number; launch fewer loop iterations or workgroups")
        cap = min(max(2 * len(self.seq), need), self.id_max + 1)
        for name, _dtype in self._COLUMNS:
            col = getattr(self, name)
            grown = np.zeros(cap, col.dtype)
            grown[: self.n] = col[: self.n]
            setattr(self, name, grown)

    def append(self, seq, wc, op, copy, site, A, seg, tix) -> int:
        i = self.n
        if i == len(self.seq):
            self._grow(i + 1)
        self.seq[i] = seq
        self.wc[i] = wc
        self._recent.append((seq, wc, op, tix, copy, site, A, seg))
        self.n = i + 1
        if len(self._recent) >= self._SYNC_EVERY:
            self.sync()
        return i

    def extend(self, rows: list) -> int:
        """Append several events (tuples as in `_recent`); returns the first one's id."""
        i, m = self.n, len(rows)
        if i + m > len(self.seq):
            self._grow(i + m)
        self.seq[i:i + m] = [r[0] for r in rows]
        self.wc[i:i + m] = [r[1] for r in rows]
        self._recent.extend(rows)
        self.n = i + m
        if len(self._recent) >= self._SYNC_EVERY:
            self.sync()
        return i

    def sync(self) -> None:
        """Move the recent events into the numpy columns."""
        n0, n = self._synced, self.n
        if n0 == n:
            return
        new = self._recent
        for j, (name, _dtype) in enumerate(self._COLUMNS[2:], start=2):
            try:
                getattr(self, name)[n0:n] = [r[j] for r in new]
            except OverflowError:  # barrier phases (A, seg) past 32 bits: named, never wrapped
                raise ShadowLimitError(f"a wave passed more than 2**31 barrier events (column {name!r} of "
                                       "the shadow's event table); launch fewer loop iterations") from None
        self._recent = []
        self._synced = n

    def plain_writes(self, ids: np.ndarray):
        """Per id: a plain write (not an atomic, not a copy; the sentinel is not). The usual
        case, one id throughout (a wave's previous access of the rows), is decided without
        `sync` and returns one bool."""
        e = int(ids[0])
        if not _cnz(ids != e):
            if e >= self._synced:
                row = self._recent[e - self._synced]
                return row[2] == OP_WRITE and not row[4]
            return bool(self.op[e] == OP_WRITE and not self.copy[e])
        self.sync()
        return (self.op.take(ids) == OP_WRITE) & ~self.copy.take(ids)

    def info(self, eid: int) -> AccessInfo:
        if eid >= self._synced:
            seq, wc, op, _tix, copy, site, A, seg = self._recent[eid - self._synced]
        else:
            seq, wc, op, copy, site, A, seg = (int(self.seq[eid]), int(self.wc[eid]), int(self.op[eid]),
                                               bool(self.copy[eid]), int(self.site[eid]), int(self.A[eid]),
                                               int(self.seg[eid]))
        return AccessInfo(wave=wc // N_COUNTERS, site=site, op=op, copy=copy, ctr=wc % N_COUNTERS,
                          seq=seq, A=A, seg=seg)

    def ordered(self, p: np.ndarray, T: np.ndarray) -> np.ndarray:
        """Per event of `p`: happens before an access whose clock table is T (0 -> True)."""
        return self.seq.take(p) <= T.take(self.wc.take(p))

    def ordered_before(self, p: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Per pair: event p[i] happens before event a[i] (by a[i]'s own clock table)."""
        self.sync()
        T = self._stack_clocks()
        return self.seq.take(p) <= T[self.tix.take(a), self.wc.take(p)]

    def _stack_clocks(self) -> np.ndarray:
        """Every clock table as one 2-D array, extended by the new ones only (restacking all
        of them per call made long racy loops quadratic)."""
        n, done = len(self.clocks), self._stacked
        if n != done:
            buf = self._clock_stack
            if buf is None or len(buf) < n:
                grown = np.empty((max(2 * n, 64), self.clocks[0].size), self.clocks[0].dtype)
                if done:
                    grown[:done] = buf[:done]
                buf = self._clock_stack = grown
            buf[done:n] = self.clocks[done:n]
            self._stacked = n
        return self._clock_stack


class Clock:
    """One clock lineage (wave, ds-or-copy): the current T and the bad-event bitmap.

    `snap`/`A`: the (snapshot, phases) the key was last confirmed for (fast check)."""

    __slots__ = ("key", "T", "tix", "bad", "L", "badlist", "snap", "A")

    def __init__(self, capacity: int = 1024):
        self.key = None
        self.snap = None
        self.A = -1
        self.T = None
        self.tix = -1
        self.bad = np.ones(capacity, np.bool_)  # >= L: unknown (True)
        self.bad[0] = False  # the sentinel is always ordered
        self.L = 1
        self.badlist = _EMPTY_I


def none_bad(c: Clock, *slots: np.ndarray) -> bool:
    """No event id in `slots` is bad for lineage `c`, known without gathering `c.bad`: every
    id is below both the evaluated prefix L and the smallest bad one (`badlist` holds every
    bad id below L). Slots mostly hold older events than the unordered ones, so two max
    reductions replace two gathers (and their int32 -> intp conversions)."""
    bl = c.badlist
    bound = min(c.L, int(bl.min())) if bl.size else c.L
    return all(a.size == 0 or int(a.max()) < bound for a in slots)


class Conflicts:
    """Unordered (prior event, row) entries found by one access, in row order.

    `pos` = row*2W + slot (slot < W: a write slot, W..2W-1: a read slot), so sorting by
    `pos` is "first conflicting byte/lane first"; `row` indexes the access's rows.
    `prior_lane` may be LANE_PER_BYTE (resolve with `LdsShadow.lane_at`).
    """

    __slots__ = ("pos", "row", "prior", "prior_lane", "served")

    def __init__(self, parts):
        if len(parts) == 1:
            self.pos, self.row, self.prior, self.prior_lane, self.served = parts[0]
        else:
            self.pos, self.row, self.prior, self.prior_lane, self.served = (
                np.concatenate([p[j] for p in parts]) for j in range(5))

    def merged(self, part, W: int) -> "Conflicts":
        """These entries and `part` (write-slot entries), write entries first, each kind in
        position order -- the order the per-byte check finds them in."""
        out = Conflicts([(self.pos, self.row, self.prior, self.prior_lane, self.served), part])
        order = np.lexsort((out.pos, out.pos % (2 * W) >= W))
        for name in self.__slots__:
            setattr(out, name, getattr(out, name)[order])
        return out


class Footprint:
    """The rows of one access, their lanes to record, and (lazily) per row the first byte.

    `rows`: shadow rows (in-bounds granules, possibly repeated), in first-byte order;
    `lanes`: uint8 per row or a scalar, stored into wlane/rlane; `oob`: [(group, byte,
    lane)] of the first out-of-bounds byte per group, or None.
    """

    __slots__ = ("rows", "lanes", "oob", "_rep", "_src", "group_ok")

    def __init__(self, rows, lanes, src, rep=None, oob=None):
        self.rows = rows
        self.lanes = lanes
        self.oob = oob
        self._src = src
        self._rep = rep
        # a read with this footprint can join a grouped check (engine._apply_reads)
        self.group_ok = oob is None and rows.size > 0

    def rep(self):
        """(group, byte, lane) of each row's first byte in the per-byte footprint."""
        if self._rep is None:
            pay, K = self._src
            grp, byte, lane = byte_footprint(pay)
            self._rep = (grp[::K], byte[::K], lane[::K]) if K > 1 else (grp, byte, lane)
        return self._rep


class ReadGroup:
    """A run of read footprints checked and recorded together (LdsShadow.read_group)."""

    __slots__ = ("fps", "rows", "lanes", "eids", "per_byte", "_typed")

    def __init__(self, fps: list):
        self.fps = fps  # kept: the memo key holds them by identity
        self.rows = np.concatenate([fp.rows for fp in fps])
        self.lanes = np.concatenate([fp.lanes if type(fp.lanes) is np.ndarray
                                     else np.full(fp.rows.size, fp.lanes, np.uint8) for fp in fps])
        # event offset (from the first read's id) per row
        self.eids = np.repeat(np.arange(len(fps), dtype=np.intp), [fp.rows.size for fp in fps])
        self.per_byte = [m for m, fp in enumerate(fps)
                         if type(fp.lanes) is int and fp.lanes == LANE_PER_BYTE]
        self._typed = self.eids

    def eids_as(self, dtype) -> np.ndarray:
        """`eids` in the slots' dtype (kept: the group is memoized), so storing them scatters
        without a per-element cast."""
        if self._typed.dtype != dtype:
            self._typed = self.eids.astype(dtype)
        return self._typed


# -- per-byte footprints ----------------------------------------------------------------------


def byte_footprint(pay):
    """(group, byte, lane) per byte of a payload, lane-major (offsets unchecked)."""
    if pay[0] == "lanes":
        addr = pay[1]
        lf = _LANE_FP.get(addr.size)
        if lf is None:
            lf = _LANE_FP[addr.size] = LaneFootprints(addr.size // 32)
        return lf(addr, pay[2], pay[3])
    return tdm_footprint(pay[1])


class LaneIndex:
    """Which lane of a payload touched a byte last (as a per-byte store keeps it): its bytes
    sorted once by group << 32 | byte, equal keys in footprint order (a stable sort), so each
    question is a binary search, not a scan of the footprint. Bytes outside [0, 2**32) (an
    out-of-range lane's) are left out: no LDS byte asked about is one of them."""

    def __init__(self, pay):
        grp, byte, lane = byte_footprint(pay)
        byte = byte.astype(np.int64, copy=False)
        ok = (byte >= 0) & (byte < 1 << 32)
        key = (grp[ok].astype(np.int64) << 32) | byte[ok]
        order = np.argsort(key, kind="stable")
        self.keys, self.lanes = key[order], lane[ok][order]

    def last(self, g: np.ndarray, byte: np.ndarray) -> np.ndarray | None:
        """Per (group, byte) asked: the last lane to touch it; None if one was not touched."""
        byte = byte.astype(np.int64, copy=False)
        if byte.size and (int(byte.min()) < 0 or int(byte.max()) >> 32):
            return None  # not an LDS byte: never in the index (its key would alias another group's)
        k = (g.astype(np.int64) << 32) | byte
        i = np.searchsorted(self.keys, k, side="right") - 1
        if (i < 0).any() or (self.keys[i] != k).any():
            return None
        return self.lanes[i].astype(np.int64)


class LaneFootprints:
    """Expands per-lane (address, size) into the bytes touched, lane-major: (group, byte, lane).

    The full-exec-mask case reuses cached group/lane vectors per size.
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


_LANE_FP: dict[int, LaneFootprints] = register_cache({})
