"""Per-wave execution state of the virtual gfx1250 (the `ctx` of generated code).

| name        | shape      | meaning                                                       |
|-------------|------------|---------------------------------------------------------------|
| L           | int        | lanes = 32 x batched workgroups (B)                           |
| lane        | (L,) int64 | lane within the wave, 0..31                                   |
| lane_base   | (L,) int64 | index of lane 0 of the lane's workgroup in the batch (g*32)   |
| group_base  | (L,) int64 | byte offset of the lane's workgroup LDS in the batch's LDS    |
| mask        | (L,) bool  | lanes that exist (a partial last wave has fewer)              |
| tid, bid    | 3 x value  | thread / workgroup ids (bid is uniform when B == 1)           |
| pending     | dict       | counter -> FIFO of in-flight copies of this wave              |
"""

from __future__ import annotations

from collections import deque

import numpy as np

WAVE = 32


class StepBudgetExceeded(RuntimeError):
    pass


class NullHooks:
    """Hook adapter when no happens-before engine is attached: instrumentation is inert."""

    def __getattr__(self, name):
        return _ignore


def _ignore(*args, **kwargs):
    return None


class Copy:
    """An in-flight asynchronous copy of one wave; `complete()` moves its data, once."""

    __slots__ = ("ctx", "to_lds", "seq", "done")

    def __init__(self, ctx, to_lds: bool):
        self.ctx = ctx
        self.to_lds = to_lds
        self.seq = 0  # issue order within the wave (asyncmark bookkeeping)
        self.done = False

    def complete(self) -> None:
        if not self.done:
            self.done = True
            self.move()

    def move(self) -> None:
        raise NotImplementedError


class WaveCtx:
    def __init__(self, *, wave: int, n_waves: int, groups: list[tuple[int, int, int]],
                 block: tuple[int, int, int], grid: tuple[int, int, int], lds, gmem,
                 lds_offsets: dict[str, int], batched: bool, budget: list[int], team: int = 0):
        B = len(groups)
        self.wave = wave
        self.team = team  # index of the workgroup among those resident at once
        self.n_waves = n_waves
        self.L = L = WAVE * B
        self.lane = np.tile(np.arange(WAVE, dtype=np.int64), B)
        self.lane_base = np.repeat(np.arange(B, dtype=np.int64) * WAVE, WAVE)
        self.group_base = np.repeat(np.arange(B, dtype=np.int64) * lds.lds_bytes, WAVE)
        bx, by, bz = block
        linear = wave * WAVE + self.lane
        self.mask = linear < bx * by * bz
        self.mask_full = bool(self.mask.all())
        self.tid = (linear % bx, (linear // bx) % by, linear // (bx * by))
        g = np.array(groups, dtype=np.int64).reshape(B, 3)
        if batched:
            self.bid = tuple(np.repeat(g[:, d], WAVE) for d in range(3))
        else:
            self.bid = tuple(np.int64(g[0, d]) for d in range(3))
        self.bdim = tuple(np.int64(b) for b in block)
        self.gdim = tuple(np.int64(x) for x in grid)
        self.lds = lds
        self.gmem = gmem
        self.lds_offsets = lds_offsets
        self.lds_oob_ok = False
        # ds stores waiting in the wave's LDS queue (None: they land at once)
        self.ds_queue: list | None = None
        self.san = NullHooks()
        self.pending: dict[str, deque] = {"async": deque(), "tensor": deque()}
        self.marks: list[int] = []  # copies issued before each asyncmark
        self.issued = 0
        self.returned = None
        self.nops = 0  # wave-ops executed (each on L lanes)
        self._budget = budget
        self.groups_active = np.ones(B, dtype=bool)
        del L

    def tick(self) -> None:
        """One loop iteration of a data-dependent loop: bounded, so a runaway loop is reported."""
        self._budget[0] -= 1
        if self._budget[0] <= 0:
            raise StepBudgetExceeded(f"step budget exhausted in wave {self.wave}")

    def asyncmark(self) -> None:
        self.marks.append(self.issued)

    def issue(self, counter: str, copy) -> None:
        copy.seq = self.issued
        self.issued += 1
        self.pending[counter].append(copy)

    def complete_until(self, counter: str, n: int) -> None:
        """Complete the oldest copies of `counter` until at most `n` are in flight."""
        n &= 0xFFFF  # the count is a 16-bit immediate: -1 waits for nothing
        q = self.pending.get(counter)
        while q is not None and len(q) > n:
            q.popleft().complete()

    def flush_ds(self, keep: int = 0) -> None:
        """Land the wave's queued ds stores, all but the newest `keep` (s_wait_dscnt keep)."""
        q = self.ds_queue
        if not q:
            return
        n = max(0, len(q) - (keep & 0xFFFF))
        for arr, idx, raw in q[:n]:
            arr[idx] = raw
        del q[:n]

    def drain(self) -> None:
        self.flush_ds()
        for q in self.pending.values():
            while q:
                q.popleft().complete()
