"""The bytes ds stores wrote, for one question: did two unordered writes store the same
bytes? Such a pair is LDS004 (a warning) instead of LDS003: every order of the two stores
leaves the same value, so no read can tell them apart (a read that races either write is
still reported on its own, as LDS001/LDS002).

Only the emulator supplies the values (`Intake.stored`, right after the store's `ds` event);
a write without them, the device runtime's, and anything but two plain ds stores stays
LDS003. Per write event the engine keeps its lane payload and its bytes (`note` -> `attach`),
and drops those no write slot of the shadow holds any more (`prune`): only slot entries can
be the earlier side of a conflict. Above a byte budget the oldest are dropped too: a pair
whose earlier write lost its bytes stays LDS003 (an error, never a missed race).
"""

from __future__ import annotations

import numpy as np

from .tables import byte_footprint


class StoredValues:
    """Stored bytes of the write events still in the shadow's slots."""

    #: write events kept before the ones no slot holds are dropped
    PRUNE_AT = 4096
    #: stored bytes kept at most (batched launches have many lanes per event)
    BUDGET = 64 << 20

    def __init__(self) -> None:
        self._noted: dict[tuple[int, int], np.ndarray] = {}  # (wave, po) -> (lanes, nbytes) uint8
        self._by_event: dict[int, tuple] = {}  # write event -> (payload, its active lanes' bytes)
        self._prune_at = self.PRUNE_AT
        self._bytes_kept = 0

    def note(self, wave: int, po: int, data, n_lanes: int) -> None:
        """The bytes each lane of wave `wave`'s access `po` stores (per-lane values)."""
        raw = np.ascontiguousarray(data)
        if raw.shape[:1] != (n_lanes,):
            raise ValueError(f"ldssan: stored values must have {n_lanes} lanes, got shape {raw.shape}")
        self._noted[(wave, po)] = raw.view(np.uint8).reshape(n_lanes, -1)

    def attach(self, wave: int, po: int, eid: int, pay, slots: np.ndarray) -> None:
        """Access `po` of `wave` became write event `eid` (`slots`: the write slots, for pruning)."""
        data = self._noted.pop((wave, po), None)
        if data is None or pay[0] != "lanes" or data.shape[1] != pay[3]:
            return
        flat = data[pay[2]].reshape(-1)  # lane-major over the active lanes, as the footprint
        if len(self._by_event) >= self._prune_at or self._bytes_kept + flat.size > self.BUDGET:
            self._prune(slots)
        self._by_event[eid] = (pay, flat)
        self._bytes_kept += flat.size

    def discard(self, wave: int, po: int) -> None:
        self._noted.pop((wave, po), None)

    def same(self, a: int, b: int, group: int) -> bool:
        """Whether write events `a` and `b` stored identical bytes wherever both wrote in
        workgroup `group` of the batch (False when either one's bytes are unknown)."""
        ka, va = self._bytes(a, group)
        kb, vb = self._bytes(b, group)
        if ka is None or kb is None:
            return False
        common, ia, ib = np.intersect1d(ka, kb, return_indices=True)
        return common.size > 0 and bool(np.array_equal(va[ia], vb[ib]))

    def _bytes(self, eid: int, group: int):
        got = self._by_event.get(eid)
        if got is None:
            return None, None
        pay, vals = got
        grp, byte, _lane = byte_footprint(pay)
        mine = grp == group
        return byte[mine], vals[mine]

    def _prune(self, slots: np.ndarray) -> None:
        live = np.isin(np.fromiter(self._by_event, np.int64, len(self._by_event)), slots)
        for eid, keep in zip(list(self._by_event), live.tolist()):
            if not keep:
                self._drop(eid)
        for eid in sorted(self._by_event):  # still over budget: the oldest go first
            if self._bytes_kept <= self.BUDGET // 2:
                break
            self._drop(eid)
        self._prune_at = max(self.PRUNE_AT, 2 * len(self._by_event))

    def _drop(self, eid: int) -> None:
        self._bytes_kept -= self._by_event.pop(eid)[1].size
