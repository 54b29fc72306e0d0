"""The happens-before engine: one instance checks one batch of G lockstep workgroups.

The emulator calls one method per instrumented event (API below, fixed). The model is in
MODEL.md next to this file; the per-byte (per-granule) state is in lds.py, the per-wave state in
waves.py, the naming of a conflicting pair in classify.py.

| Name    | Storage   | Shape                | Meaning                                          |
|---------|-----------|----------------------|--------------------------------------------------|
| _waves  | engine    | W x WaveState        | counters, waits, marks, barrier history per wave |
| _acc    | engine    | P x (W, C) int64     | vector clock after phase k: per wave and counter |
|         |           |                      | the highest seq published by a signal <= k       |
| _queues | engine    | W+1 deques           | calls not yet applied, per wave in program order |
|         |           |                      | (the last one: phase-level records)              |
| _lds    | LdsShadow | (G*B/K, W) slots, ...| per-granule last writers/readers, clock          |
|         |           |                      | lineages per (wave, ds-or-copy) (lds.py)         |

Determinism. Calls arrive in whatever order the scheduler interleaves the waves. They are
buffered and applied to the shadow in a canonical order -- by (seg, wave, program order),
where seg = 2*(barrier waits returned) + (1 inside a signal-wait window) -- which depends
only on each wave's own event sequence. An event is applied once no wave can still issue
an event that sorts before it, and (for events after a barrier) once the barrier after its
phase completed, so that the issuing waves' published states it is judged by are final.
The ring therefore receives the same records in the same order under every schedule.
Settled items are applied at barrier signals and waits, wave ends and finish(); consecutive
ds reads of one wave in one half-phase are checked together (_apply_reads), falling back to
one at a time when any of them has something to report.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Sequence

import numpy as np

from ..records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Ring, Rule
from .classify import AccessInfo, classify
from .kinds import (
    ASYNC, COPY_COUNTERS, DS, N_COUNTERS, OP_ATOMIC, OP_READ, OP_WRITE, TENSOR, AccessKind, CopyKind, Counter,
    fence_drains,
)
from .lds import LANE_PER_BYTE, Clock, LdsShadow, first_per_group as _first_per_group
from .waves import WaveState

__all__ = ["ShadowEngine", "AccessKind", "CopyKind", "Counter"]

_BIG = np.iinfo(np.int64).max
_DS_OPS = frozenset((OP_READ, OP_WRITE, OP_ATOMIC))
_I64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)
# TDM footprints by the caller's array object: (that array, a private copy, the copy's memo
# of granule rows per (granule, LDS size)). Emulators pass the same cached arrays for the
# same descriptor across launches and engines; a hit is verified by content, so callers may
# reuse and mutate their arrays freely. Bounded; holds references only to cached arrays.
_TDM_SEEN: dict = {}
# ds/async operands by content -> one shared payload (its memo holds the rows per granule).
_LANES_SEEN: dict = {}
# Both are dropped whole when the operand bytes they hold pass this (the memoized rows are
# about as large again).
_SEEN_MAX_BYTES = 16 << 20
_seen_bytes = [0]


def _seen_room(nbytes: int) -> None:
    """Account for `nbytes` more cached operand bytes; clear the caches when full."""
    _seen_bytes[0] += nbytes
    if _seen_bytes[0] > _SEEN_MAX_BYTES:
        _TDM_SEEN.clear()
        _LANES_SEEN.clear()
        _seen_bytes[0] = nbytes
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
        self._shape = (self.n_lanes,)
        self.events_applied = 0  # accesses applied to the shadow (statistics)
        self.forced_drains = 0  # times PENDING_CAP forced arrival-order application
        self._serials = itertools.count(1)
        self._waves = [WaveState(w, self._serials) for w in range(self.n_waves)]
        self._lds = LdsShadow(self.G, max(self.lds_bytes, 1), self.n_waves)
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
        self._barrier_pairs: set = set()
        self._finished = False

    # == access events ===========================================================================

    def ds(self, wave, site, addr, nbytes, kind, mask) -> None:
        """Before a ds load/store/atomic: `addr` = LDS byte offset per lane; `mask` = active."""
        # the most frequent call: _wave and _enqueue_access inlined
        if self._finished:
            raise RuntimeError("ldssan: shadow engine used after finish()")
        try:
            w = self._waves[wave]
        except (IndexError, TypeError):
            raise ValueError(f"ldssan: wave {wave!r} out of range 0..{self.n_waves - 1}") from None
        if not w.live:
            raise RuntimeError(f"ldssan: event for wave {wave} after its wave_end")
        op = int(kind)
        if op not in _DS_OPS:
            raise ValueError(f"ldssan: bad ds access kind {kind!r}")
        pay = self._lane_payload(addr, mask, nbytes)
        seqs = w.seq
        seq = seqs[DS] = seqs[DS] + 1
        po = w.po = w.po + 1
        nwait = w.nwait
        self._queues[w.index].append(
            (2 * nwait + (w.nsig > nwait), po, _ACCESS, int(site), op, False, DS, seq, nwait,
             w._snap or w.snapshot(), pay))
        self._pending += 1
        if self._pending > self.PENDING_CAP:
            self._over_cap()

    def dma(self, wave, site, addr, nbytes, kind, mask) -> None:
        """An async global<->LDS copy issue (ASYNCcnt), per lane like `ds`."""
        w = self._wave(wave)
        op = _copy_op(kind)
        self._enqueue_access(w, site, op, True, ASYNC, self._lane_payload(addr, mask, nbytes))

    def tdm(self, wave, site, offsets, kind) -> None:
        """A TDM op issue (TENSORcnt); `offsets` = the LDS bytes of its footprint per group:
        an array (G, k), a sequence of G 1-D arrays (ragged), or for G = 1 a 1-D array.
        Padding and skipped (out-of-bounds) elements are not in it: they are not written."""
        w = self._wave(wave)
        op = _copy_op(kind)
        if isinstance(offsets, np.ndarray) and offsets.ndim == 2:
            rows = list(offsets)
        elif isinstance(offsets, np.ndarray) and offsets.ndim == 1 and self.G == 1:
            rows = [offsets]
        else:
            rows = list(offsets)
        if len(rows) != self.G:
            raise ValueError(f"ldssan: tdm footprint has {len(rows)} groups, batch has {self.G}")
        # one private copy per distinct caller array (the groups of a batch usually share
        # one descriptor, and kernels reissue the same few); a hit is verified by content.
        # Each copy carries a memo of its granule rows (footprints are immutable).
        seen = _TDM_SEEN
        per_group, memos = [], []
        prev_o = hit = None
        for o in rows:
            if o is not prev_o:  # groups sharing one array: one lookup
                prev_o = o
                hit = seen.get(id(o))
                if hit is None or hit[0] is not o or not _same_offsets(hit[2], o):
                    mine = np.array(o, np.int64).ravel()
                    _seen_room(2 * mine.nbytes)
                    hit = seen[id(o)] = (o, mine, mine.tobytes(), {})
            per_group.append(hit[1])
            memos.append(hit[3])
        self._enqueue_access(w, site, op, True, TENSOR, ("offsets", per_group, memos))

    # == waits, marks, fences ====================================================================

    def wait(self, wave, site, counter, n) -> None:
        """After `s_wait_<counter>cnt n`: all but the newest n ops of the counter complete."""
        if self._finished:
            raise RuntimeError("ldssan: shadow engine used after finish()")
        try:
            w = self._waves[wave]
        except (IndexError, TypeError):
            raise ValueError(f"ldssan: wave {wave!r} out of range 0..{self.n_waves - 1}") from None
        if not w.live:
            raise RuntimeError(f"ldssan: event for wave {wave} after its wave_end")
        c = int(counter)
        if not 0 <= c < N_COUNTERS:
            raise ValueError(f"ldssan: bad counter {counter!r}")
        n = int(n)
        if n < 0:
            raise ValueError(f"ldssan: wait count must be >= 0, got {n}")
        w.po += 1
        if c in COPY_COUNTERS:
            w.wait(c, n)
        else:  # WaveState.wait, inlined (the compiler's ds-use waits are frequent)
            seq = w.seq[c]
            done = w.done
            if seq - n > done[c]:
                done[c] = seq - n
            w.lastwait[c] = seq
            w.lw_mark[c] = False
            w._snap = None

    def asyncmark(self, wave, site) -> None:
        w = self._wave(wave)
        w.po += 1
        w.asyncmark()

    def wait_asyncmark(self, wave, site, n) -> None:
        w = self._wave(wave)
        w.po += 1
        w.wait_asyncmark(_count(n), int(site))

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

    def _lane_payload(self, addr, mask, nbytes) -> tuple:
        """("lanes", addr, mask, nbytes, memo): private copies, shared by every access with the
        same operands (kernels reissue the same few address patterns; LdsShadow memoizes the
        rows per payload)."""
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ValueError(f"ldssan: access size must be positive, got {nbytes!r}")
        shape = self._shape
        a = m = None
        if type(addr) is np.ndarray and addr.shape == shape and (addr.dtype is _I64 or addr.dtype == _I64):
            a = addr
        if type(mask) is np.ndarray and mask.shape == shape and (mask.dtype is _BOOL or mask.dtype == _BOOL):
            m = mask
        if a is None:
            a = self._lanes(addr, np.int64, "addr")
        if m is None:
            m = self._lanes(mask, np.bool_, "mask")
        key = (a.tobytes(), m.tobytes(), nbytes)
        pay = _LANES_SEEN.get(key)
        if pay is None:
            _seen_room(a.nbytes + m.nbytes)
            pay = _LANES_SEEN[key] = ("lanes", a.copy() if a is addr else a, m.copy() if m is mask else m,
                                      nbytes, {})
        return pay

    def _lanes(self, arr, dtype, what):
        out = np.array(arr, dtype=dtype)
        if out.ndim == 0:  # a wave-uniform operand
            out = np.full(self.n_lanes, out, dtype)
        elif out.shape != (self.n_lanes,):
            raise ValueError(f"ldssan: {what} must have shape ({self.n_lanes},), got {out.shape}")
        return out

    def _enqueue_access(self, w: WaveState, site, op, copy, ctr, pay) -> None:
        seqs = w.seq
        seq = seqs[ctr] = seqs[ctr] + 1  # EXEC=0 still takes a counter slot
        site = int(site)
        po = w.po = w.po + 1
        if copy:
            w.copies.append((ctr, seq, site, pay))
        nwait = w.nwait
        self._queues[w.index].append(
            (2 * nwait + (w.nsig > nwait), po, _ACCESS, site, op, copy, ctr, seq, nwait,
             w._snap or w.snapshot(), pay))
        self._pending += 1
        if self._pending > self.PENDING_CAP:
            self._over_cap()

    def _over_cap(self) -> None:
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
            any_live = False
            for w in self._waves:
                if w.live:
                    if w.nsig <= k:
                        return
                    any_live = True
            if not any_live:
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
            # judgeable: an access after phase A-1 is judged by the issuers' states at their
            # next signal (phase A), so phase A must be complete -- unless nothing can be
            # cross-phase (one wave)
            free = final or force or self.n_waves == 1
            n_acc = len(self._acc)
            while q and q[0][0] == best_seg:
                item = q[0]
                if item[_I_TAG] == _ACCESS:
                    A = item[_I_A]
                    if not (A == 0 or A < n_acc or free):
                        return
                    q.popleft()
                    self._pending -= 1
                    if item[4] == OP_READ and not item[5] and q:
                        run = [item]  # consecutive ds reads: one check for all (_apply_reads)
                        while q:
                            nxt = q[0]
                            if nxt[0] != best_seg or nxt[2] != _ACCESS or nxt[4] != OP_READ or nxt[5]:
                                break
                            run.append(q.popleft())
                        if len(run) > 1:
                            self._pending -= len(run) - 1
                            self._apply_reads(run, best)
                        else:
                            self._apply(item, best)
                    else:
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
            nw = w.nwait
            s = 2 * nw + (w.nsig > nw)  # WaveState.seg
            if s <= seg if x < wave else s < seg:
                return False
        return True

    def _clock(self, A: int, wave: int, snap, is_ds: bool):
        """The clock lineage of `wave`'s ds (or copy) accesses, moved on to this access.

        T depends on the phases acquired, and of the wave's own completion state only on
        the counters that can hold LDS events (DS -- +inf for a ds access -- ASYNC, TENSOR)."""
        lds = self._lds
        c = lds.lineages[2 * wave + is_ds]
        if c is None:
            c = lds.lineages[2 * wave + is_ds] = Clock()
        if c.snap is not snap or c.A != A:
            done = snap.done
            key = (A, -1 if is_ds else done[DS], done[ASYNC], done[TENSOR])
            if c.key != key:
                lds.retime(c, key, self._table(A, wave, done, is_ds))
            c.snap, c.A = snap, A
        if len(c.bad) <= lds.events.n:
            lds._grow(c, 2 * lds.events.n + 64)
        return c

    def _table(self, A: int, wave: int, done, is_ds: bool) -> np.ndarray:
        M = (self._acc[A - 1] if A else self._zero).copy()
        M[wave] = done
        if is_ds:
            M[wave, DS] = _BIG  # ds after ds in one wave: the LDS queue is in order
        return M.ravel()

    def _apply_reads(self, items: list, wave: int) -> None:
        """Consecutive ds reads of one wave in one half-phase, in program order.

        Reads do not change what reads check (write slots, last_w), so a run whose members
        share the clock table is checked with one gather; only if it is clean throughout (no
        conflict, no never-written byte) are its events recorded at once, in order (a later
        read's slot entries win, as they would one by one). Otherwise, or when a member
        needs the per-byte path or the same-phase bookkeeping of MODEL §6a is active, the
        reads are applied one by one -- the check has changed nothing yet.
        """
        lds = self._lds
        fpkey = lds.fpkey
        fps = []
        for it in items:  # LdsShadow.footprint, memo hit inlined (ds reads: lane payloads)
            pay = it[10]
            fp = pay[4].get(fpkey, False)
            fps.append(lds.footprint(pay) if fp is False else fp)
        if lds.fpkey is not fpkey or self._ambiguous:  # refined while mapping: one by one
            for it in items:
                self._apply(it, wave)
            return
        n = len(items)
        i = 0
        while i < n:
            it, fp = items[i], fps[i]
            if fp is None or not fp.group_ok or self._ambiguous:
                self._apply(it, wave, fp)
                i += 1
                continue
            A, snap = it[_I_A], it[9]
            d = snap.done
            a_done, t_done = d[ASYNC], d[TENSOR]
            j = i + 1
            while j < n:
                fj, nxt = fps[j], items[j]
                if fj is None or not fj.group_ok or nxt[_I_A] != A:
                    break
                s2 = nxt[9]
                if s2 is not snap:
                    d = s2.done
                    if d[ASYNC] != a_done or d[TENSOR] != t_done:
                        break
                j += 1
            if j - i == 1:
                self._apply(it, wave, fp)
                i = j
                continue
            group = lds.read_group(fps[i:j])
            clk = self._clock(A, wave, snap, True)
            last = lds.check_reads(group, clk)
            if last is None:
                for m in range(i, j):
                    self._apply(items[m], wave, fps[m])
            else:
                wc0 = wave * N_COUNTERS
                tix = clk.tix
                # EventTable rows: (seq, wc, op, tix, copy, site, A, seg)
                eid0 = lds.events.extend([(it_[7], wc0 + it_[6], it_[4], tix, it_[5], it_[3], it_[8], it_[0])
                                          for it_ in items[i:j]])
                for m in group.per_byte:
                    lds.register_per_byte(eid0 + m, items[i + m][10])
                lds.store_reads(eid0, wave, group, last)
                self.events_applied += j - i
            i = j

    def _apply(self, item, wave: int, fp=None) -> None:
        seg, _po, _tag, site, op, copy, ctr, seq, A, snap, pay = item
        lds = self._lds
        if fp is None:
            fp = lds.footprint(pay)
        if fp is None:
            return
        self.events_applied += 1
        recs = []
        if fp.oob is not None:  # negative offsets count as huge (u32 wrap)
            for g, b, ln in fp.oob:
                recs.append(self._record(Rule.OOB, Cause.NONE, site, NO_SITE, b, wave, NO_WAVE, ln, NO_LANE, g))
        if fp.rows.size:
            clk = self._clock(A, wave, snap, not copy)
            eid = lds.events.append(seq, wave * N_COUNTERS + ctr, op, copy, site, A, seg, clk.tix)
            if isinstance(fp.lanes, int) and fp.lanes == LANE_PER_BYTE:
                lds.register_per_byte(eid, pay)
            conf, uninit = lds.apply(eid, wave, op, fp, clk)
            if self._ambiguous and op == OP_READ:
                last = lds.read_last
                ordered = (last != 0) & lds.events.ordered(last, clk.T)
                if ordered.any():
                    self._consumed.update(int(e) for e in np.unique(last[ordered]) if int(e) in self._ambiguous)
            if uninit is not None:
                grp, byte, lane = fp.rep()
                self._uninit[eid] = [
                    self._record(Rule.UNINIT_READ, Cause.NONE, site, NO_SITE, int(byte[i]), wave, NO_WAVE,
                                 int(lane[i]), NO_LANE, grp[i])
                    for i in _first_per_group(uninit, grp, self.G)]
            if conf is not None:
                if self._uninit and op != OP_READ:
                    for prior in np.unique(conf.prior).tolist():
                        self._uninit.pop(int(prior), None)
                cur = AccessInfo(wave, site, op, copy, ctr, seq, A, seg)
                recs += self._conflict_records(cur, snap, conf, fp.rep(), eid)
        for rec in recs:
            self.ring.push(rec)

    def _conflict_records(self, cur: AccessInfo, snap, conf, rep, eid: int) -> list:
        """One record per (group, rule, cause, site, other_site), at its first byte/lane."""
        grp, byte, lane = rep
        g = grp[conf.row] if self.G > 1 else np.zeros(conf.row.size, np.int64)
        key = (g << 32) | conf.prior.astype(np.int64)
        _uniq, first = np.unique(key, return_index=True)
        first = first[np.argsort(conf.pos[first], kind="stable")]
        lds = self._lds
        events = lds.events
        out: dict = {}
        for i in first.tolist():
            prior = int(conf.prior[i])
            p = events.info(prior)
            r = int(conf.row[i])
            mine = (cur.site, cur.wave, int(lane[r]))
            theirs = (p.site, p.wave, lds.lane_at(prior, int(conf.prior_lane[i]), int(grp[r]), int(byte[r])))
            if conf.served[i] and _same_phase_read_write(p, cur):
                war = self._pair_record(classify(p, cur, snap, self._waves, served=True), mine, theirs,
                                        int(byte[r]), g[i])
                raw = self._pair_record(classify(p, cur, snap, self._waves), mine, theirs, int(byte[r]), g[i])
                writer = prior if p.op != OP_READ else eid
                pairs = self._ambiguous.setdefault(writer, [])
                if (war, raw) not in pairs:
                    pairs.append((war, raw))
                continue
            v = classify(p, cur, snap, self._waves)
            if v.flip:
                mine, theirs = theirs, mine
            k = (int(g[i]), v.rule, v.cause, mine[0], theirs[0])
            if k not in out:
                out[k] = self._record(v.rule, v.cause, mine[0], theirs[0], int(byte[r]), mine[1], theirs[1],
                                      mine[2], theirs[2], g[i], v.extra)
        return list(out.values())

    def _pair_record(self, v, mine, theirs, byte, g) -> Record:
        if v.flip:
            mine, theirs = theirs, mine
        return self._record(v.rule, v.cause, mine[0], theirs[0], byte, mine[1], theirs[1],
                            mine[2], theirs[2], g, v.extra)

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
            grp, byte, lane = self._lds.byte_footprint(pay)
            inside = np.flatnonzero(byte.view(np.uint64) < self.lds_bytes)
            for i in _first_per_group(inside, grp, self.G):
                k = (int(grp[i]), cause, site, other)
                if k not in out:
                    out[k] = self._record(Rule.DMA_NEVER_WAITED, cause, site, other, int(byte[i]), w.index,
                                          w.index, int(lane[i]), NO_LANE, grp[i])
        return list(out.values())


# == helpers ===================================================================================


def _same_phase_read_write(p: AccessInfo, a: AccessInfo) -> bool:
    return p.wave != a.wave and p.seg == a.seg and (p.op == OP_READ) != (a.op == OP_READ)


def _same_offsets(mine_bytes: bytes, o) -> bool:
    """The caller's array `o` still holds the offsets we copied (as int64 bytes)."""
    if type(o) is np.ndarray and o.dtype is _I64:
        return o.tobytes() == mine_bytes
    return np.asarray(o, np.int64).tobytes() == mine_bytes


def _copy_op(kind) -> int:
    k = int(kind)
    if k == CopyKind.TO_LDS:
        return OP_WRITE
    if k == CopyKind.FROM_LDS:
        return OP_READ
    raise ValueError(f"ldssan: bad copy kind {kind!r}")


def _count(n) -> int:
    n = int(n)
    if n < 0:
        raise ValueError(f"ldssan: wait count must be >= 0, got {n}")
    return n
