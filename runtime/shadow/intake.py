"""The engine's public entry points: one call per instrumented event (API fixed, MODEL.md §3).

Accesses are validated and queued (their check runs later, in canonical order:
ordering.py); waits, marks and fences update the wave's state at once; barrier calls and
wave ends complete phases (phases.py) and apply what is settled. `ds` and `wait` are the
most frequent calls: `ds` inlines `_wave` / `_enqueue_access`, `wait` inlines `WaveState.wait`.

`Intake` is a part of `ShadowEngine` (engine.py); it uses the engine's `_waves`, `_queues`,
`_pending`, `_finished`, `n_waves`, `n_lanes`, `G`, `groups`, `launch`, `PENDING_CAP`.
"""

from __future__ import annotations

import dataclasses

from ..records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Rule
from .kinds import (
    ASYNC, COPY_COUNTERS, DS, N_COUNTERS, OP_ATOMIC, OP_READ, OP_WRITE, TENSOR, CopyKind, fence_drains,
)
from .operands import lane_payload, tdm_payload
from .ordering import Access, Records, new_item
from .waves import WaveState

_DS_OPS = frozenset((OP_READ, OP_WRITE, OP_ATOMIC))
_U32 = 0xFFFFFFFF


class Intake:
    """The hook API of `ShadowEngine`."""

    # == access events ===========================================================================

    def ds(self, wave, site, addr, nbytes, kind, mask) -> None:
        """Before a ds load/store/atomic: `addr` = LDS byte offset per lane; `mask` = active."""
        try:  # `_wave`, inlined; on any failure `_wave` raises the named error
            w = self._waves[wave]
            if self._finished or not w.live:
                raise LookupError
        except (LookupError, TypeError):
            w = self._wave(wave)
        op = int(kind)
        if op not in _DS_OPS:
            raise ValueError(f"ldssan: bad ds access kind {kind!r}")
        pay = lane_payload(addr, mask, nbytes, self.n_lanes)
        seqs = w.seq
        seq = seqs[DS] = seqs[DS] + 1
        po = w.po = w.po + 1
        nwait = w.nwait
        self._queues[w.index].append(new_item(Access, (
            2 * nwait + (w.nsig > nwait), po, int(site), op, False, DS, seq, nwait, w._snap or w.snapshot(),
            pay)))
        self._pending += 1
        if self._pending > self.PENDING_CAP:
            self._over_cap()

    def stored(self, wave, data) -> None:
        """Right after `ds` for a store (emulator only): the bytes each lane stores, an array
        (n_lanes, ...) of the stored values. Lets a race of two stores of identical bytes be
        named LDS004, a warning (values.py)."""
        w = self._wave(wave)
        self._values.note(w.index, w.po, data, self.n_lanes)

    def dma(self, wave, site, addr, nbytes, kind, mask) -> None:
        """An async global<->LDS copy issue (ASYNCcnt), per lane like `ds`."""
        w = self._wave(wave)
        op = _copy_op(kind)
        self._enqueue_access(w, site, op, ASYNC, lane_payload(addr, mask, nbytes, self.n_lanes))

    def tdm(self, wave, site, offsets, kind) -> None:
        """A TDM op issue (TENSORcnt); `offsets` = the LDS bytes of its footprint per group:
        an array (G, k), a sequence of G 1-D arrays (ragged), or for G = 1 a 1-D array.
        Padding and skipped (out-of-bounds) elements are not in it: they are not written."""
        w = self._wave(wave)
        op = _copy_op(kind)
        self._enqueue_access(w, site, op, TENSOR, tdm_payload(offsets, self.G))

    # == waits, marks, fences ====================================================================

    def wait(self, wave, site, counter, n) -> None:
        """After `s_wait_<counter>cnt n`: all but the newest n ops of the counter complete."""
        w = self._wave(wave)
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
        w = self._step(wave)
        w.asyncmark()

    def wait_asyncmark(self, wave, site, n) -> None:
        w = self._step(wave)
        w.wait_asyncmark(_count(n), int(site))

    def fence(self, wave, site, ordering: str, scope: str) -> None:
        """`llvm.fence`: a non-one-as fence at workgroup scope or wider waits ds/load/store 0
        (never ASYNC/TENSOR); orderings other than release/acquire/acq_rel/seq_cst do nothing."""
        w = self._step(wave)
        if fence_drains(ordering, scope):
            w.drain_for_fence()

    # == barriers and wave end ===================================================================

    def barrier_signal(self, wave, site, barrier_id: int = -1) -> None:
        """Before `s_barrier_signal id`. Only the workgroup barrier (-1) orders anything."""
        w = self._step(wave)
        if barrier_id != -1:
            return
        if w.nsig > w.nwait:  # signalled again without waiting: phases are skewed
            self._barrier_mismatch(w, w.seg, int(site), w.sig_sites[-1], w.index)
        w.signal(int(site))
        self._advance_phases()
        self._drain()

    def barrier_wait(self, wave, site, barrier_id: int = -1) -> None:
        """After `s_barrier_wait id` returned (the scheduler saw every live wave signal)."""
        w = self._step(wave)
        if barrier_id != -1:
            return
        if w.nwait >= w.nsig:  # a wait with no signal of its own in this phase
            self._barrier_mismatch(w, w.seg, int(site), NO_SITE, NO_WAVE)
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
        w = self._step(wave)
        recs = self._never_waited(w, int(site))
        if recs:
            self._enqueue_records(w, w.seg, recs)
        w.end(int(site))
        self._advance_phases()
        self._drain()

    def barrier_divergence(self, wave, site, other_site=NO_SITE, other_wave=NO_WAVE, *,
                           cause: Cause = Cause.BARRIER_DIVERGENT_LANES, group: int | None = None,
                           lanes=()) -> None:
        """Record LDS020 found by the emulator (e.g. a barrier under a partial exec mask).

        `group` = index into `groups` to record it for one workgroup only (default: all);
        `lanes` = the lanes that reached the barrier (one record each)."""
        w = self._step(wave)
        recs = self._wave_records(w, Rule.BARRIER_DIVERGENCE, cause, int(site), int(other_site),
                                  int(other_wave))
        if group is not None:
            recs = [recs[group]]
        if len(lanes):
            recs = [dataclasses.replace(r, lane=int(lane)) for r in recs for lane in lanes]
        self._enqueue_records(w, w.seg, recs)

    # == helpers =================================================================================

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

    def _step(self, wave) -> WaveState:
        """`_wave` for an event that takes the next program-order slot."""
        w = self._wave(wave)
        w.po += 1
        return w

    def _enqueue_access(self, w: WaveState, site, op, ctr, pay) -> None:
        """Queue a copy (async or TDM) issue; it is also remembered for LDS013."""
        seqs = w.seq
        seq = seqs[ctr] = seqs[ctr] + 1  # EXEC=0 still takes a counter slot
        site = int(site)
        po = w.po = w.po + 1
        w.copies.append((ctr, seq, site, pay))
        nwait = w.nwait
        self._queues[w.index].append(new_item(Access, (
            2 * nwait + (w.nsig > nwait), po, site, op, True, ctr, seq, nwait, w._snap or w.snapshot(), pay)))
        self._pending += 1
        if self._pending > self.PENDING_CAP:
            self._over_cap()

    def _enqueue_records(self, w: WaveState, seg: int, recs: list) -> None:
        self._queues[w.index].append(Records(seg, w.po, recs))

    def _barrier_mismatch(self, w: WaveState, seg: int, site: int, other_site: int, other_wave: int) -> None:
        """LDS020 BARRIER_MISMATCH for wave `w`, queued at half-phase `seg`."""
        self._enqueue_records(w, seg, self._wave_records(
            w, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, site, other_site, other_wave))

    def _wave_records(self, w, rule, cause, site, other_site, other_wave) -> list:
        return [Record(int(rule), int(cause), site & _U32, other_site & _U32, 0, w.index,
                       other_wave & 0xFFFF, NO_LANE, NO_LANE, 0, wg, self.launch) for wg in self.groups]


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
