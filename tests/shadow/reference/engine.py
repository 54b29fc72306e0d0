"""FROZEN REFERENCE: the byte-exact engine as of commit 111a1e2 (before the granule/clock-lineage
fast paths), kept verbatim for the differential tests in test_fastpath.py. Do not optimise.

The happens-before engine: one instance checks one batch of G lockstep workgroups.

The emulator calls one method per instrumented event (API below, fixed). The model is in
MODEL.md next to this file; the per-byte state is in lds.py, the per-wave state in
waves.py, the naming of a conflicting pair in classify.py.

| Name    | Storage   | Shape                | Meaning                                          |
|---------|-----------|----------------------|--------------------------------------------------|
| _waves  | engine    | W x WaveState        | counters, waits, marks, barrier history per wave |
| _acc    | engine    | P x (W, C) int64     | vector clock after phase k: per wave and counter |
|         |           |                      | the highest seq published by a signal <= k       |
| _queues | engine    | W+1 deques           | calls not yet applied, per wave in program order |
|         |           |                      | (the last one: phase-level records)              |
| _lds    | LdsShadow | (G*B, W) slots, ...  | per-byte last writers/readers (lds.py)           |
| _tcache | engine    | dict -> (W*C,) int64 | clock table T per (phase, wave, snapshot, is_ds) |

Determinism. Calls arrive in whatever order the scheduler interleaves the waves. They are
buffered and applied to the shadow in a canonical order -- by (seg, wave, program order),
where seg = 2*(barrier waits returned) + (1 inside a signal-wait window) -- which depends
only on each wave's own event sequence. An event is applied once no wave can still issue
an event that sorts before it, and (for events after a barrier) once the barrier after its
phase completed, so that the issuing waves' published states it is judged by are final.
The ring therefore receives the same records in the same order under every schedule.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Sequence

import numpy as np

from ldssan.runtime.records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Ring, Rule
from ldssan.runtime.shadow.classify import AccessInfo, classify
from ldssan.runtime.shadow.kinds import (
    ASYNC, DS, N_COUNTERS, OP_ATOMIC, OP_READ, OP_WRITE, TENSOR, AccessKind, CopyKind, Counter,
    fence_drains,
)
from .lds import LaneFootprints, LdsShadow, tdm_footprint
from ldssan.runtime.shadow.waves import WaveState

__all__ = ["ShadowEngine", "AccessKind", "CopyKind", "Counter"]

_BIG = np.iinfo(np.int64).max
_U32 = 0xFFFFFFFF
# Queue items are tuples sorted by (seg, po): an access is
#   (seg, po, _ACCESS, site, op, copy, counter, seq, A, snapshot, payload)
# and a batch of wave-level records (LDS013, LDS020) is (seg, po, _RECORDS, [Record, ...]).
_ACCESS = 0
_RECORDS = 1
_I_TAG = 2
_I_A = 8


class ShadowEngine:
    """Happens-before checker for the LDS of one batch of `len(groups)` workgroups.

    Lane arrays have length G*32 (lane g*32+l is lane l of group g). Violations go to
    `ring` as `Record`s, at the latest by `finish()`.
    """

    #: Buffered accesses above which the engine stops waiting for the canonical order and
    #: applies what it has (bounded memory; a racy program's report may then depend on the
    #: schedule -- MODEL.md §6). Only reached by long barrier-free multi-wave phases.
    PENDING_CAP = 1 << 16

    def __init__(self, lds_bytes: int, n_waves: int, ring: Ring, *,
                 groups: Sequence[int] = (0,), launch: int = 0):
        if lds_bytes < 0:
            raise ValueError(f"ldssan: lds_bytes must be >= 0, got {lds_bytes}")
        if n_waves < 1:
            raise ValueError(f"ldssan: n_waves must be >= 1, got {n_waves}")
        groups = tuple(int(g) for g in groups)
        if not groups:
            raise ValueError("ldssan: a batch needs at least one workgroup")
        self.lds_bytes = int(lds_bytes)
        self.n_waves = int(n_waves)
        self.ring = ring
        self.groups = groups
        self.launch = int(launch)
        self.G = len(groups)
        self.n_lanes = 32 * self.G
        self.events_applied = 0  # accesses applied to the shadow (statistics)
        self.forced_drains = 0  # times PENDING_CAP forced arrival-order application
        self._serials = itertools.count(1)
        self._waves = [WaveState(w, self._serials) for w in range(self.n_waves)]
        self._lds = LdsShadow(self.G, max(self.lds_bytes, 1), self.n_waves)
        self._lane_footprint = LaneFootprints(self.G)
        self._zero = np.zeros((self.n_waves, N_COUNTERS), np.int64)
        self._acc: list[np.ndarray] = []
        self._queues: list[deque] = [deque() for _ in range(self.n_waves + 1)]
        self._pending = 0
        # LDS030 records held back per read event: a later unordered write to the same bytes
        # means the read raced that write (reported as such), not that LDS was never written.
        self._uninit: dict[int, list] = {}
        # Same-phase read/write races where the read had ordered earlier data: a refill too
        # early (WAR) if some later read consumes the write in order, else the read wanted the
        # write (RAW). Decided at finish: write event -> [(WAR record, RAW record)].
        self._ambiguous: dict[int, list] = {}
        self._consumed: set[int] = set()
        self._tcache: dict = {}
        self._barrier_pairs: set = set()
        self._finished = False

    # == access events ===========================================================================

    def ds(self, wave, site, addr, nbytes, kind, mask) -> None:
        """Before a ds load/store/atomic: `addr` = LDS byte offset per lane; `mask` = active."""
        w = self._wave(wave)
        op = int(kind)
        if op not in (OP_READ, OP_WRITE, OP_ATOMIC):
            raise ValueError(f"ldssan: bad ds access kind {kind!r}")
        pay = ("lanes", self._lanes(addr, np.int64, "addr"), self._lanes(mask, np.bool_, "mask"),
               _nbytes(nbytes))
        self._enqueue_access(w, site, op, False, DS, pay)

    def dma(self, wave, site, addr, nbytes, kind, mask) -> None:
        """An async global<->LDS copy issue (ASYNCcnt), per lane like `ds`."""
        w = self._wave(wave)
        op = _copy_op(kind)
        pay = ("lanes", self._lanes(addr, np.int64, "addr"), self._lanes(mask, np.bool_, "mask"),
               _nbytes(nbytes))
        self._enqueue_access(w, site, op, True, ASYNC, pay)

    def tdm(self, wave, site, offsets, kind) -> None:
        """A TDM op issue (TENSORcnt); `offsets` = the LDS bytes of its footprint per group:
        an array (G, k), a sequence of G 1-D arrays (ragged), or for G = 1 a 1-D array.
        Padding and skipped (out-of-bounds) elements are not in it: they are not written."""
        w = self._wave(wave)
        op = _copy_op(kind)
        if isinstance(offsets, np.ndarray) and offsets.ndim == 2:
            per_group = [np.array(row, np.int64) for row in offsets]
        elif isinstance(offsets, np.ndarray) and offsets.ndim == 1 and self.G == 1:
            per_group = [np.array(offsets, np.int64)]
        else:
            per_group = [np.array(o, np.int64).ravel() for o in offsets]
        if len(per_group) != self.G:
            raise ValueError(f"ldssan: tdm footprint has {len(per_group)} groups, batch has {self.G}")
        self._enqueue_access(w, site, op, True, TENSOR, ("offsets", per_group))

    # == waits, marks, fences ====================================================================

    def wait(self, wave, site, counter, n) -> None:
        """After `s_wait_<counter>cnt n`: all but the newest n ops of the counter complete."""
        w = self._wave(wave)
        c = int(counter)
        if not 0 <= c < N_COUNTERS:
            raise ValueError(f"ldssan: bad counter {counter!r}")
        w.po += 1
        w.wait(c, _count(n))
        self._drain()

    def asyncmark(self, wave, site) -> None:
        w = self._wave(wave)
        w.po += 1
        w.asyncmark()

    def wait_asyncmark(self, wave, site, n) -> None:
        w = self._wave(wave)
        w.po += 1
        w.wait_asyncmark(_count(n), int(site))
        self._drain()

    def fence(self, wave, site, ordering: str, scope: str) -> None:
        """`llvm.fence`: a non-one-as fence at workgroup scope or wider waits ds/load/store 0
        (never ASYNC/TENSOR); orderings other than release/acquire/acq_rel/seq_cst do nothing."""
        w = self._wave(wave)
        w.po += 1
        if fence_drains(ordering, scope):
            w.drain_for_fence()

    # == barriers and wave end ===================================================================

    def barrier_signal(self, wave, site, barrier_id: int = -1) -> None:
        """Before `s_barrier_signal id`. Only the workgroup barrier (-1) orders anything."""
        w = self._wave(wave)
        seg = w.seg
        w.po += 1
        if barrier_id != -1:
            return
        if w.nsig > w.nwait:  # signalled again without waiting: phases are skewed
            self._enqueue_records(w, seg, self._wave_records(
                w, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, int(site), w.sig_sites[-1], w.index))
        w.signal(int(site))
        self._advance_phases()
        self._drain()

    def barrier_wait(self, wave, site, barrier_id: int = -1) -> None:
        """After `s_barrier_wait id` returned (the scheduler saw every live wave signal)."""
        w = self._wave(wave)
        seg = w.seg
        w.po += 1
        if barrier_id != -1:
            return
        if w.nwait >= w.nsig:  # a wait with no signal of its own in this phase
            self._enqueue_records(w, seg, self._wave_records(
                w, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, int(site), NO_SITE, NO_WAVE))
            return
        if w.nwait >= len(self._acc):
            raise RuntimeError(
                f"ldssan: wave {w.index} returned from barrier phase {w.nwait} before every live "
                f"wave signalled it (signals: {[x.nsig for x in self._waves]}, live: "
                f"{[x.live for x in self._waves]}); is wave_end called for finished waves?")
        w.nwait += 1
        self._drain()

    def wave_end(self, wave, site) -> None:
        """The wave finished (s_endpgm): it drops barrier -1; its unfinished copies are LDS013."""
        w = self._wave(wave)
        w.po += 1
        recs = self._never_waited(w, int(site))
        if recs:
            self._enqueue_records(w, w.seg, recs)
        w.end(int(site))
        self._advance_phases()
        self._drain()

    def barrier_divergence(self, wave, site, other_site=NO_SITE, other_wave=NO_WAVE, *,
                           cause: Cause = Cause.BARRIER_DIVERGENT_LANES, group: int | None = None) -> None:
        """Record LDS020 found by the emulator (e.g. a barrier under a partial exec mask).

        `group` = index into `groups` to record it for one workgroup only (default: all)."""
        w = self._wave(wave)
        w.po += 1
        recs = self._wave_records(w, Rule.BARRIER_DIVERGENCE, cause, int(site), int(other_site),
                                  int(other_wave))
        if group is not None:
            recs = [recs[group]]
        self._enqueue_records(w, w.seg, recs)

    def finish(self) -> None:
        """The batch ended: apply everything still buffered, push the records, free the shadow."""
        if self._finished:
            return
        for w in self._waves:
            if w.live and w.nsig > w.nwait:  # still blocked at a barrier that never completed
                self._enqueue_records(w, w.seg, self._wave_records(
                    w, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, w.sig_sites[-1], NO_SITE, NO_WAVE))
        self._drain(final=True)
        for eid in sorted(self._uninit):
            for rec in self._uninit[eid]:
                self.ring.push(rec)
        self._uninit.clear()
        for writer in sorted(self._ambiguous):
            consumed = writer in self._consumed
            for war, raw in self._ambiguous[writer]:
                self.ring.push(war if consumed else raw)
        self._ambiguous.clear()
        self._finished = True
        self._lds = None
        self._tcache.clear()

    # == internals: intake =======================================================================

    def _wave(self, wave) -> WaveState:
        if self._finished:
            raise RuntimeError("ldssan: shadow engine used after finish()")
        try:
            w = self._waves[wave]
        except (IndexError, TypeError):
            raise ValueError(f"ldssan: wave {wave!r} out of range 0..{self.n_waves - 1}") from None
        if not w.live:
            raise RuntimeError(f"ldssan: event for wave {wave} after its wave_end")
        return w

    def _lanes(self, arr, dtype, what):
        out = np.array(arr, dtype=dtype)
        if out.ndim == 0:  # a wave-uniform operand
            out = np.full(self.n_lanes, out, dtype)
        elif out.shape != (self.n_lanes,):
            raise ValueError(f"ldssan: {what} must have shape ({self.n_lanes},), got {out.shape}")
        return out

    def _enqueue_access(self, w: WaveState, site, op, copy, ctr, pay) -> None:
        seq = w.issue(ctr)  # EXEC=0 still takes a counter slot
        site = int(site)
        w.po += 1
        if copy:
            w.copies.append((ctr, seq, site, pay))
        self._queues[w.index].append(
            (w.seg, w.po, _ACCESS, site, op, copy, ctr, seq, w.nwait, w.snapshot(), pay))
        self._pending += 1
        if self._pending > self.PENDING_CAP:
            self._drain()
            if self._pending > self.PENDING_CAP:
                self.forced_drains += 1
                self._drain(force=True)

    def _enqueue_records(self, w: WaveState, seg: int, recs: list) -> None:
        self._queues[w.index].append((seg, w.po, _RECORDS, recs))

    def _wave_records(self, w, rule, cause, site, other_site, other_wave) -> list:
        return [Record(int(rule), int(cause), site & _U32, other_site & _U32, 0, w.index,
                       other_wave & 0xFFFF, NO_LANE, NO_LANE, 0, wg, self.launch) for wg in self.groups]

    # == internals: barrier phases ===============================================================

    def _advance_phases(self) -> None:
        """Complete every phase all live waves have signalled (exited waves dropped out)."""
        while True:
            k = len(self._acc)
            live = [w for w in self._waves if w.live]
            if not live or any(w.nsig <= k for w in live):
                return
            acc = (self._acc[k - 1] if k else self._zero).copy()
            signalled = []
            for w in self._waves:
                if w.nsig > k:
                    np.maximum(acc[w.index], w.sig_snaps[k].done, out=acc[w.index])
                    signalled.append((w.index, w.sig_sites[k]))
            self._acc.append(acc)
            self._check_phase_sites(k, signalled)

    def _check_phase_sites(self, k: int, signalled: list) -> None:
        """LDS020 when waves signalled phase k from different barrier sites (once per pair)."""
        ref_wave, ref_site = signalled[0]
        recs = []
        for wv, site in signalled[1:]:
            if site != ref_site and (site, ref_site) not in self._barrier_pairs:
                self._barrier_pairs.add((site, ref_site))
                recs += [Record(int(Rule.BARRIER_DIVERGENCE), int(Cause.BARRIER_MISMATCH), site & _U32,
                                ref_site & _U32, 0, wv, ref_wave, NO_LANE, NO_LANE, 0, wg, self.launch)
                         for wg in self.groups]
        if recs:
            self._queues[self.n_waves].append((2 * k, k, _RECORDS, recs))

    # == internals: canonical application ========================================================

    def _drain(self, *, force: bool = False, final: bool = False) -> None:
        """Apply buffered items in (seg, wave, po) order while that order is settled."""
        queues = self._queues
        while True:
            best, best_seg = -1, 0
            for i, q in enumerate(queues):
                if q and (best < 0 or q[0][0] < best_seg):
                    best, best_seg = i, q[0][0]
            if best < 0:
                return
            if not (final or force) and not self._settled(best_seg, best):
                return
            q = queues[best]
            while q and q[0][0] == best_seg:
                item = q[0]
                if item[_I_TAG] == _ACCESS:
                    if not (final or force or self._judgeable(item[_I_A])):
                        return
                    q.popleft()
                    self._pending -= 1
                    self._apply(item, best)
                else:
                    q.popleft()
                    for rec in item[3]:
                        self.ring.push(rec)

    def _settled(self, seg: int, wave: int) -> bool:
        """No wave can still issue an item that sorts before (seg, wave)."""
        for x, w in enumerate(self._waves):
            if x == wave or not w.live:
                continue
            s = w.seg
            if s <= seg if x < wave else s < seg:
                return False
        return True

    def _judgeable(self, A: int) -> bool:
        """An access after barrier phase A-1 is judged by the issuers' states at their next
        signal (phase A), so phase A must be complete -- unless nothing can be cross-phase."""
        return A == 0 or A < len(self._acc) or self.n_waves == 1

    def _clock(self, A: int, wave: int, snap, is_ds: bool) -> np.ndarray:
        key = (A, wave, snap.serial, is_ds)
        T = self._tcache.get(key)
        if T is None:
            if len(self._tcache) > 1024:
                self._tcache.clear()
            M = (self._acc[A - 1] if A else self._zero).copy()
            M[wave] = snap.done
            if is_ds:
                M[wave, DS] = _BIG  # ds after ds in one wave: the LDS queue is in order
            T = self._tcache[key] = M.ravel()
        return T

    def _apply(self, item, wave: int) -> None:
        seg, _po, _tag, site, op, copy, ctr, seq, A, snap, pay = item
        grp, byte, lane = self._footprint(pay)
        if byte.size == 0:
            return
        self.events_applied += 1
        recs = []
        # negative offsets wrap to huge under the uint64 view
        if int(byte.view(np.uint64).max()) >= self.lds_bytes:
            oob = byte.view(np.uint64) >= self.lds_bytes
            for i in _first_per_group(np.flatnonzero(oob), grp, self.G):
                recs.append(self._record(Rule.OOB, Cause.NONE, site, NO_SITE, int(byte[i]), wave,
                                         NO_WAVE, int(lane[i]), NO_LANE, grp[i]))
            keep = ~oob
            grp, byte, lane = grp[keep], byte[keep], lane[keep]
        if byte.size:
            gb = byte if self.G == 1 else grp * self.lds_bytes + byte
            lds = self._lds
            eid = lds.events.append(seq, wave * N_COUNTERS + ctr, op, copy, site, A, seg)
            conf, uninit = lds.apply(eid, wave, op, gb, lane, self._clock(A, wave, snap, not copy))
            if self._ambiguous and op == OP_READ and lds.ordered_writes is not None:
                self._consumed.update(int(e) for e in np.unique(lds.ordered_writes) if int(e) in self._ambiguous)
            if uninit is not None:
                self._uninit[eid] = [
                    self._record(Rule.UNINIT_READ, Cause.NONE, site, NO_SITE, int(byte[i]), wave, NO_WAVE,
                                 int(lane[i]), NO_LANE, grp[i])
                    for i in _first_per_group(uninit, grp, self.G)]
            if conf is not None:
                if self._uninit and op != OP_READ:
                    for prior in np.unique(conf.prior).tolist():
                        self._uninit.pop(int(prior), None)
                cur = AccessInfo(wave, site, op, copy, ctr, seq, A, seg)
                recs += self._conflict_records(cur, snap, conf, grp, byte, lane, eid)
        for rec in recs:
            self.ring.push(rec)

    def _conflict_records(self, cur: AccessInfo, snap, conf, grp, byte, lane, eid: int) -> list:
        """One record per (group, rule, cause, site, other_site), at its first byte/lane."""
        g = grp[conf.row] if self.G > 1 else np.zeros(conf.row.size, np.int64)
        key = (g << 32) | conf.prior.astype(np.int64)
        _uniq, first = np.unique(key, return_index=True)
        first = first[np.argsort(conf.pos[first], kind="stable")]
        events = self._lds.events
        out: dict = {}
        for i in first.tolist():
            p = events.info(int(conf.prior[i]))
            r = int(conf.row[i])
            if conf.served[i] and _same_phase_read_write(p, cur):
                war = self._pair_record(classify(p, cur, snap, self._waves, served=True), p, cur, conf, i, r,
                                        g, byte, lane)
                raw = self._pair_record(classify(p, cur, snap, self._waves), p, cur, conf, i, r, g, byte, lane)
                writer = int(conf.prior[i]) if p.op != OP_READ else eid
                pairs = self._ambiguous.setdefault(writer, [])
                if (war, raw) not in pairs:
                    pairs.append((war, raw))
                continue
            v = classify(p, cur, snap, self._waves)
            mine = (cur.site, cur.wave, int(lane[r]))
            theirs = (p.site, p.wave, int(conf.prior_lane[i]))
            if v.flip:
                mine, theirs = theirs, mine
            k = (int(g[i]), v.rule, v.cause, mine[0], theirs[0])
            if k not in out:
                out[k] = self._record(v.rule, v.cause, mine[0], theirs[0], int(byte[r]), mine[1], theirs[1],
                                      mine[2], theirs[2], g[i], v.extra)
        return list(out.values())

    def _pair_record(self, v, p, cur, conf, i, r, g, byte, lane) -> Record:
        mine = (cur.site, cur.wave, int(lane[r]))
        theirs = (p.site, p.wave, int(conf.prior_lane[i]))
        if v.flip:
            mine, theirs = theirs, mine
        return self._record(v.rule, v.cause, mine[0], theirs[0], int(byte[r]), mine[1], theirs[1],
                            mine[2], theirs[2], g[i], v.extra)

    def _record(self, rule, cause, site, other_site, offset, wave, other_wave, lane, other_lane, g,
                extra=0) -> Record:
        return Record(int(rule), int(cause), site & _U32, other_site & _U32, offset & _U32, wave,
                      other_wave, lane, other_lane, extra, self.groups[int(g)], self.launch)

    def _never_waited(self, w: WaveState, end_site: int) -> list:
        """LDS013 for the wave's copies still outstanding at its end (site = the copy)."""
        snap = w.snapshot()
        out: dict = {}
        for ctr, seq, site, pay in w.copies:
            if seq <= w.done[ctr]:
                continue
            unmarked = snap.lw_mark[ctr] and snap.lastwait[ctr] >= seq > snap.mark_lo[ctr]
            if unmarked:  # the wave relied on wait.asyncmark for a copy after the last mark
                cause, other = Cause.ASYNCMARK_UNMARKED, w.am_site
            else:
                cause, other = Cause.WAVE_END, end_site
            grp, byte, lane = self._footprint(pay)
            inside = np.flatnonzero(byte.view(np.uint64) < self.lds_bytes)
            for i in _first_per_group(inside, grp, self.G):
                k = (int(grp[i]), cause, site, other)
                if k not in out:
                    out[k] = self._record(Rule.DMA_NEVER_WAITED, cause, site, other, int(byte[i]), w.index,
                                          w.index, int(lane[i]), NO_LANE, grp[i])
        return list(out.values())

    def _footprint(self, pay):
        if pay[0] == "lanes":
            return self._lane_footprint(pay[1], pay[2], pay[3])
        return tdm_footprint(pay[1])


# == helpers ===================================================================================


def _same_phase_read_write(p: AccessInfo, a: AccessInfo) -> bool:
    return p.wave != a.wave and p.seg == a.seg and (p.op == OP_READ) != (a.op == OP_READ)


def _first_per_group(idx: np.ndarray, grp: np.ndarray, G: int) -> list:
    """The first of the indices `idx` (ascending) in each group."""
    if idx.size == 0:
        return []
    if G == 1:
        return [int(idx[0])]
    _g, first = np.unique(grp[idx], return_index=True)
    return [int(i) for i in idx[np.sort(first)]]


def _copy_op(kind) -> int:
    k = int(kind)
    if k == CopyKind.TO_LDS:
        return OP_WRITE
    if k == CopyKind.FROM_LDS:
        return OP_READ
    raise ValueError(f"ldssan: bad copy kind {kind!r}")


def _nbytes(nbytes) -> int:
    n = int(nbytes)
    if n <= 0:
        raise ValueError(f"ldssan: access size must be positive, got {nbytes!r}")
    return n


def _count(n) -> int:
    n = int(n)
    if n < 0:
        raise ValueError(f"ldssan: wait count must be >= 0, got {n}")
    return n
