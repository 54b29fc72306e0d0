"""The canonical order (MODEL.md §5): queue items, and applying them once they are settled.

Calls arrive in whatever order the scheduler interleaves the waves. They are buffered per
wave and applied to the shadow in the order (seg, wave, program order), where seg =
2*(barrier waits returned) + (1 inside a signal-wait window) -- which depends only on each
wave's own event sequence. An item is applied once no wave can still issue an item that
sorts before it, and (for accesses after a barrier) once the barrier after its phase
completed, so that the issuing waves' published states it is judged by are final.

`Ordering` is a part of `ShadowEngine` (engine.py); it uses the engine's `_waves`,
`_queues` (W+1 deques: one per wave, the last for phase-level records), `_acc`,
`_pending`, `PENDING_CAP`, `forced_drains`, `ring`, and the apply part's `_apply` /
`_apply_reads`.
"""

from __future__ import annotations

from typing import NamedTuple

from .kinds import OP_READ
from .waves import Snapshot

# Queue items are built with tuple.__new__ on the hot path (no Python-level __new__ call).
new_item = tuple.__new__


class Access(NamedTuple):
    """A buffered access event (ds op, async copy or TDM op)."""

    seg: int  # the issuing wave's half-phase (sort key 1)
    po: int  # its program-order position (sort key 3; the wave is key 2)
    site: int
    op: int  # OP_READ / OP_WRITE / OP_ATOMIC
    copy: bool  # async/TDM copy rather than a ds op
    ctr: int  # counter it was issued on
    seq: int  # its sequence number on that counter
    A: int  # barrier phases the wave had acquired at issue
    snap: Snapshot  # the wave's completion state at issue
    pay: tuple  # operands (operands.py): "lanes" or "offsets" payload


class Records(NamedTuple):
    """Wave- or phase-level records (LDS013, LDS020), pushed at their canonical position."""

    seg: int
    po: int
    recs: list


class Ordering:
    """Applying the buffered items of `ShadowEngine` in canonical order."""

    def _drain(self, *, force: bool = False, final: bool = False) -> None:
        """Apply buffered items in (seg, wave, po) order while that order is settled."""
        queues = self._queues
        while True:
            best, best_seg = -1, 0
            for i, q in enumerate(queues):
                if q and (best < 0 or q[0].seg < best_seg):
                    best, best_seg = i, q[0].seg
            if best < 0:
                return
            if not (final or force) and not self._settled(best_seg, best):
                return
            q = queues[best]
            # judgeable: an access after phase A-1 is judged by the issuers' states at their
            # next signal (phase A), so every wave must have signalled phase A or ended --
            # unless nothing can be cross-phase (one wave). Phase A complete says so for
            # A >= 1; before the first barrier it is checked directly (no barrier may follow).
            free = final or force or self.n_waves == 1
            n_acc = len(self._acc)
            first_over = n_acc > 0 or free or self._first_phase_over()
            while q and q[0].seg == best_seg:
                item = q[0]
                if type(item) is Records:
                    q.popleft()
                    for rec in item.recs:
                        self.ring.push(rec)
                    continue
                A = item.A
                if not (A < n_acc or free or (A == 0 and first_over)):
                    return
                q.popleft()
                self._pending -= 1
                if item.op == OP_READ and not item.copy and q:
                    run = [item]  # consecutive ds reads: one check for all (_apply_reads)
                    while q:
                        nxt = q[0]
                        if nxt.seg != best_seg or type(nxt) is not Access or nxt.op != OP_READ or nxt.copy:
                            break
                        run.append(q.popleft())
                    if len(run) > 1:
                        self._pending -= len(run) - 1
                        self._apply_reads(run, best)
                        continue
                self._apply(item, best)

    def _first_phase_over(self) -> bool:
        """Every wave signalled phase 0 or ended: where each copy issued before the first
        barrier completed (in that half-phase or later) is known (classify.py)."""
        return all(w.nsig or not w.live for w in self._waves)

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

    def _over_cap(self) -> None:
        """Past PENDING_CAP buffered accesses: apply what is settled, then force the rest
        in arrival order (bounded memory; MODEL.md §5 fallback)."""
        self._drain()
        if self._pending > self.PENDING_CAP:
            self.forced_drains += 1
            self._drain(force=True)
