"""The happens-before engine: one instance checks one batch of G lockstep workgroups.

The emulator calls one method per instrumented event (API fixed; MODEL.md next to this file
is the model). `ShadowEngine` is assembled from four parts, one concern each:

| Part     | Module      | Does                                                             |
|----------|-------------|------------------------------------------------------------------|
| Intake   | intake.py   | the public entry points: validate, queue accesses, update waves  |
| Phases   | phases.py   | complete barrier phases (`_acc`), LDS020 for mismatched sites    |
| Ordering | ordering.py | queue items; apply them in the canonical (seg, wave, po) order   |
| Applier  | apply.py    | check an access against the shadow, name and push the records    |

The per-granule state is in lds.py/tables.py, the per-wave state in waves.py, the naming
of a conflicting pair in classify.py, operand payloads and their caches in operands.py.

| Name    | Storage   | Shape                | Meaning                                          |
|---------|-----------|----------------------|--------------------------------------------------|
| _waves  | engine    | W x WaveState        | counters, waits, marks, barrier history per wave |
| _acc    | engine    | P x (W, C) int64     | vector clock after phase k: per wave and counter |
|         |           |                      | the highest seq published by a signal <= k       |
| _queues | engine    | W+1 deques           | Access / Records items not yet applied, per wave |
|         |           |                      | in program order (the last one: phase-level)     |
| _lds    | LdsShadow | (G*B/K, W) slots, ...| per-granule last writers/readers, clock          |
|         |           |                      | lineages per (wave, ds-or-copy) (lds.py)         |

Determinism: the ring receives the same records in the same order under every schedule
(ordering.py, MODEL.md §5).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..records import NO_SITE, NO_WAVE, Ring
from .apply import Applier
from .intake import Intake
from .kinds import N_COUNTERS, AccessKind, CopyKind, Counter
from .lds import LdsShadow
from .ordering import Ordering
from .phases import Phases
from .values import StoredValues
from .waves import WaveState

__all__ = ["ShadowEngine", "Listener", "AccessKind", "CopyKind", "Counter"]


@runtime_checkable
class Listener(Protocol):
    """Observes the events one `ShadowEngine` receives (`ShadowEngine.listen`), each called
    with the engine and the event's arguments before the engine handles it. A listener only
    looks: it changes neither the arguments nor the engine. The events are the ones a
    reliance table needs (`ldssan/mutate/reliance.py`): LDS accesses, copies, barriers."""

    def ds(self, engine: ShadowEngine, wave: int, site: int, addr, nbytes, kind, mask) -> None: ...

    def dma(self, engine: ShadowEngine, wave: int, site: int, addr, nbytes, kind, mask) -> None: ...

    def tdm(self, engine: ShadowEngine, wave: int, site: int, offsets, kind) -> None: ...

    def barrier_signal(self, engine: ShadowEngine, wave: int, site: int, barrier_id: int = -1) -> None: ...

    def barrier_wait(self, engine: ShadowEngine, wave: int, site: int, barrier_id: int = -1) -> None: ...


#: the engine entry points a `Listener` observes
LISTENED = ("ds", "dma", "tdm", "barrier_signal", "barrier_wait")


class ShadowEngine(Intake, Phases, Ordering, Applier):
    """Happens-before checker for the LDS of one batch of `len(groups)` workgroups.

    Lane arrays have length G*32 (lane g*32+l is lane l of group g). Violations go to
    `ring` as `Record`s, at the latest by `finish()`.
    """

    #: Buffered accesses above which the engine stops waiting for the canonical order and
    #: applies what it has (bounded memory; a racy program's report may then depend on the
    #: schedule -- MODEL.md §5). Only reached by long barrier-free multi-wave phases.
    PENDING_CAP = 1 << 16

    def __init__(self, lds_bytes: int, n_waves: int, ring: Ring, *,
                 groups: Sequence[int] = (0,), launch: int = 0, compiled: bool = False):
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
        self._lds = LdsShadow(self.G, max(self.lds_bytes, 1), self.n_waves, compiled=compiled)
        self._zero = np.zeros((self.n_waves, N_COUNTERS), np.int64)
        self._acc: list[np.ndarray] = []
        self._queues: list[deque] = [deque() for _ in range(self.n_waves + 1)]
        self._pending = 0
        self._uninit: dict[int, list] = {}
        self._ambiguous: dict[int, dict] = {}
        self._consumed: set[int] = set()
        self._seg_recs: set = set()
        self._seg_now = -1
        self._barrier_pairs: set = set()
        self._values = StoredValues()  # what ds stores wrote, when the executor says (LDS004)
        self._finished = False
        self._peer_bytes: np.ndarray | None = None  # bytes a cluster peer's TDM multicast wrote

    def peer_written(self, offsets) -> None:
        """A cluster peer's TDM multicast writes these LDS bytes (of group 0): reads of them
        are not LDS030. Whether the write is ordered with this workgroup's accesses is the
        cluster checker's verdict (`peers.py`, LDS014), not this engine's."""
        o = np.asarray(offsets, np.int64)
        o = o[(o >= 0) & (o < self.lds_bytes)]
        if self._peer_bytes is None:
            self._peer_bytes = np.zeros(self.lds_bytes, bool)
        self._peer_bytes[o] = True

    def listen(self, listener: Listener) -> None:
        """Call `listener` on each of this engine's `LISTENED` events from now on, before the
        engine handles it. Only this instance's entry points are wrapped: an engine nobody
        listens to runs its class's methods, at no cost."""
        for name in LISTENED:
            setattr(self, name, _notifying(self, getattr(self, name), getattr(listener, name)))

    def finish(self) -> None:
        """The batch ended: apply everything still buffered, push the records, free the shadow."""
        if self._finished:
            return
        for w in self._waves:
            if w.live and w.nsig > w.nwait:  # still blocked at a barrier that never completed
                self._barrier_mismatch(w, w.seg, w.sig_sites[-1], NO_SITE, NO_WAVE)
        self._drain(final=True)
        self._flush_held()
        self._finished = True
        self._lds = None


def _notifying(engine: ShadowEngine, handle, notify):
    def call(*args, **kwargs):
        notify(engine, *args, **kwargs)
        return handle(*args, **kwargs)
    return call
