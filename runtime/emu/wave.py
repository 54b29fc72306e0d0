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
| budget      | Budget     | loop iterations and CPU seconds left to the run (all waves)   |
"""

from __future__ import annotations

import functools
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.errors import LdssanError

from .interfaces import HOOK_METHODS, hook_method

WAVE = 32


class StepBudgetExceeded(LdssanError, RuntimeError):
    """A launch ran more loop iterations / scheduler steps than its budget (a runaway loop)."""


class EmulationTimeout(StepBudgetExceeded):
    """A run took more seconds of emulation than its time limit."""


CHECK_EVERY = 4096  # iterations between two looks at the clock: keeps the hot path cheap
LONG_LOOP = 4096  # uniform loops longer than this are charged chunk by chunk
NATIVE_LOOP_LANE_STEPS = 1 << 28  # lane iterations of one native loop call (a few seconds at most)


class Budget:
    """Loop iterations left to one scheduler run, shared by its waves, and the CPU-time
    deadline of the launch it belongs to. `charge` is on the hot path: one subtraction and
    one compare; the clock is read only every CHECK_EVERY iterations (and by the scheduler
    every CLOCK_EVERY steps, and by the launcher between runs).

    Seconds are the process's CPU time: emulation is CPU-bound, and on a loaded machine
    (CI, parallel test workers) wall time would turn a legitimate run into a timeout.
    `launch` names the launch in the messages; `deadline`: the launch's (default: now +
    `seconds`)."""

    __slots__ = ("left", "limit", "seconds", "deadline", "check_at", "launch")

    def __init__(self, steps: int, seconds: float, deadline: float | None = None, launch: str = ""):
        self.left = self.limit = int(steps)
        self.seconds = float(seconds)
        self.deadline = time.process_time() + self.seconds if deadline is None else deadline
        self.check_at = max(self.left - CHECK_EVERY, -1)
        self.launch = f" of {launch}" if launch else ""

    def charge(self, n: int = 1) -> None:
        self.left -= n
        if self.left <= self.check_at:
            self.check()

    def check(self) -> None:
        # -1: an exhausted budget is caught on the step that exhausts it
        self.check_at = max(self.left - CHECK_EVERY, -1)
        if self.left < 0:
            raise StepBudgetExceeded(
                f"ldssan-emu: step budget exhausted — more than {self.limit:,} loop iterations "
                f"in one run of the launch{self.launch} (a runaway loop? FLYDSL_LDSSAN_STEP_BUDGET / "
                "--ldssan-step-budget sets the budget)")
        self.check_time()

    def check_time(self) -> None:
        if time.process_time() > self.deadline:
            raise EmulationTimeout(
                f"ldssan-emu: time limit exceeded — the launch{self.launch} took more than {self.seconds:g} s "
                "(CPU) of emulation (a runaway loop? FLYDSL_LDSSAN_TIME_LIMIT / --ldssan-time-limit sets "
                "the limit)")

    def loop(self, r: range):
        """The iterations of a uniform loop, charged to the budget; a loop longer than what
        is left fails at once, without running."""
        n = len(r)
        if n > self.left:
            raise StepBudgetExceeded(
                f"ldssan-emu: step budget exhausted — a loop of {n:,} iterations "
                f"(range({r.start}, {r.stop}, {r.step})) exceeds the {max(self.left, 0):,} steps "
                f"left of {self.limit:,} (launch{self.launch}; FLYDSL_LDSSAN_STEP_BUDGET / "
                "--ldssan-step-budget sets the budget)")
        if n <= LONG_LOOP:
            self.charge(n)
            return r
        return self._chunks(r)

    def _chunks(self, r: range):
        # long loops: charge (and look at the clock) once per chunk, not per iteration
        for k in range(0, len(r), LONG_LOOP):
            part = r[k:k + LONG_LOOP]
            self.charge(len(part))
            yield from part


class NullHooks:
    """Hook adapter when no happens-before engine is attached: instrumentation is inert
    (`interfaces.Hooks`, each hook a no-op; a name outside the ABI is an AttributeError)."""

    __slots__ = ()

    def ds(self, site, ptr, nbytes, kind, mask):
        pass

    def use(self, site, mask):
        pass

    def dma(self, site, ptr, nbytes, kind, mask):
        pass

    def tdm(self, site, g0, g1, g2, g3, kind, mask):
        pass

    def wait(self, site, counter, n, mask):
        pass

    def mark(self, site, mask):
        pass

    def barrier(self, site, form, bid, mask):
        pass

    def fence(self, site, ordering, scope, mask):
        pass

    def stored(self, site, data, mask):
        pass


def workgroups_reached(ctx, mask) -> np.ndarray | None:
    """Which workgroups of a batched wave (lane g*32 + l: lane l of workgroup g) have an
    active lane in `mask`, as a bool per workgroup; None when every one has (or one
    workgroup only). A wave's scalar work (a TDM issue, a sanitizer event) happens in a
    workgroup exactly when its wave there has an active lane."""
    B = ctx.L // 32
    if B == 1 or mask is None or mask is ctx.mask:
        return None
    m = np.asarray(mask)
    if m.ndim == 0:
        return None
    took = m.reshape(B, 32).any(axis=1)
    return None if took.all() else took


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
    lockstep = False  # one wave (LockstepCtx: the waves of a workgroup as one lane array)
    sync_mask = None  # the exec mask of the barrier signal the wave yielded last (events.py)

    def __init__(self, *, wave: int, n_waves: int, groups: list[tuple[int, int, int]],
                 block: tuple[int, int, int], grid: tuple[int, int, int], lds, gmem,
                 lds_offsets: dict[str, int], batched: bool, budget: Budget, team: int = 0):
        B = len(groups)
        self.wave = wave
        self.team = team  # index of the workgroup among those resident at once
        self.n_waves = n_waves
        self.L = WAVE * B
        self._lane_arrays(groups, block, lds, batched)
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
        self.budget = budget
        self.groups_active = np.ones(B, dtype=bool)

    def _lane_arrays(self, groups, block, lds, batched: bool) -> None:
        """The per-lane geometry: lane, lane_base, group_base, mask, tid, bid."""
        B = len(groups)
        (self.lane, self.lane_base, self.group_base, self.mask, self.mask_full,
         self.tid) = _geometry(self.wave, B, tuple(block), lds.lds_bytes)
        if batched:
            g = np.array(groups, dtype=np.int64).reshape(B, 3)
            self.bid = tuple(np.repeat(g[:, d], WAVE) for d in range(3))
        else:
            self.bid = tuple(np.int64(x) for x in groups[0])

    def tick(self) -> None:
        """One iteration of a divergent or `while` loop: bounded, so a runaway loop is reported."""
        b = self.budget  # Budget.charge(1) inlined: this runs once per loop iteration
        b.left -= 1
        if b.left <= b.check_at:
            b.check()

    def loop(self, lb, ub, step) -> range:
        """The iterations of a loop with a uniform trip count, charged to the step budget."""
        r = range(int(lb), int(ub), int(step))
        b = self.budget
        n = len(r)
        if n <= LONG_LOOP and b.left - n > b.check_at:  # the common case, inline
            b.left -= n
            return r
        return b.loop(r)

    def trip_params(self, lb, ub, step) -> np.ndarray | None:
        """For a uniform loop run natively (native/loops.py): [lb, step, trip count] as int64,
        or None when the Python loop must run instead: a trip count past the budget (the
        Python loop then fails with the budget's message) or past NATIVE_LOOP_LANE_STEPS lane
        iterations (one C call cannot look at the clock)."""
        r = range(int(lb), int(ub), int(step))
        n = len(r)
        if n > self.budget.left or n * self.L > NATIVE_LOOP_LANE_STEPS:
            return None
        return np.array((r.start, r.step, n), np.int64)

    def charge_loop(self, params: np.ndarray, body_ops: int) -> None:
        """What the Python loop would have charged: its iterations to the budget, its ops to
        the op count."""
        n = int(params[2])
        self.budget.charge(n)
        self.nops += n * body_ops

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


@register_cache
@functools.lru_cache(maxsize=32)  # <= ~2 MB each (a lockstep part's lanes are within plan.LANE_BUDGET)
def _geometry(wave: int, B: int, block: tuple[int, int, int], lds_bytes: int):
    """(lane, lane_base, group_base, mask, mask_full, tid) of wave `wave` over B workgroups:
    the same for every batch of a launch (and every launch of a shape), so built once;
    read-only, as every context shares them."""
    lane = np.tile(np.arange(WAVE, dtype=np.int64), B)
    lane_base = np.repeat(np.arange(B, dtype=np.int64) * WAVE, WAVE)
    group_base = np.repeat(np.arange(B, dtype=np.int64) * lds_bytes, WAVE)
    bx, by, bz = block
    linear = wave * WAVE + lane
    mask = linear < bx * by * bz
    tid = (linear % bx, (linear // bx) % by, linear // (bx * by))
    for a in (lane, lane_base, group_base, mask) + tid:
        a.flags.writeable = False
    return lane, lane_base, group_base, mask, bool(mask.all()), tid


class LockstepCtx(WaveCtx):
    """The waves of B workgroups as one lane array (policy `lockstep`): lane
    (g*W + w)*32 + l is lane l of wave w of batched workgroup g, so every 32-lane block is
    one wave and the cross-lane ops stay within it (`lane_base`). `parts` are the per-wave
    contexts (each over its B workgroups, lane g*32 + l): they keep what is per wave — the
    sanitizer's hooks and the TDM issue.

    Lockstep is one legal schedule: every wave runs each instruction at the same time, ds
    stores and copies land at issue (the `early` timing), barriers are phase points reached
    by every lane at once (`uniformity.lockstep_refusal` keeps out kernels where they are not).
    """

    lockstep = True

    def __init__(self, parts: list[WaveCtx], *, groups, block, grid, lds, gmem, lds_offsets, budget,
                 batched: bool, team=0):
        B, W = len(groups), len(parts)
        self.n_batched = B  # workgroups on the lane axis (lanes of workgroup g: [g*W*32, (g+1)*W*32))
        super().__init__(wave=0, n_waves=W, groups=list(groups) * W, block=block, grid=grid, lds=lds,
                         gmem=gmem, lds_offsets=lds_offsets, batched=False, budget=budget, team=team)
        self.parts = parts
        (self.lane, self.wave, self.lane_base, self.group_base, self.index, self.mask, self.mask_full,
         self.tid) = _lockstep_geometry(B, W, tuple(block), lds.lds_bytes)
        if batched:  # code translated for batches: workgroup ids per lane
            gids = np.array(groups, dtype=np.int64).reshape(B, 3)
            self.bid = tuple(np.repeat(gids[:, d], W * WAVE) for d in range(3))
        self.groups_active = np.ones(B * W, dtype=bool)

    def _lane_arrays(self, groups, block, lds, batched: bool) -> None:
        # the geometry comes from `_lockstep_geometry`; a batch's bid is set in __init__
        self.bid = tuple(np.int64(x) for x in groups[0])

    def split(self, mask, values):
        """(part, its lanes of `values`, its mask) for every wave with an active lane: per-lane
        values (first axis L) are cut to the wave's lanes, uniform ones passed as they are."""
        if mask is self.mask and self.mask_full:  # every part whole: its own mask (no copy)
            yield from self.split_whole(values)
            return
        mask = np.broadcast_to(mask, (self.L,))
        lanes = self.per_lane(values)
        for part, idx in zip(self.parts, self.index):
            m = lanes_of(mask, idx)
            if m.any():
                yield part, _cut(values, lanes, idx), m

    def split_whole(self, values) -> list:
        """`split` when every lane of every part is active (the common case, no generator)."""
        lanes = self.per_lane(values)
        if not lanes:
            return [(part, values, part.mask) for part in self.parts]
        return [(part, _cut(values, lanes, idx), part.mask) for part, idx in zip(self.parts, self.index)]

    def per_lane(self, values) -> list[int]:
        """Positions of the per-lane values (first axis L) among `values`."""
        L = self.L
        return [i for i, v in enumerate(values) if type(v) is np.ndarray and v.ndim and v.shape[0] == L]

    def issue(self, counter: str, copy) -> None:
        copy.complete()  # lockstep copies land at issue

    def tdm(self, tdm_copy, mask, g0, g1, g2, g3, to_lds: bool) -> None:
        """A TDM op (`tdm_copy`: rt's, which imports this module): one per wave with an active
        lane, with that wave's descriptor."""
        groups = (g0, g1, g2, g3)
        split = self.split_whole(groups) if mask is self.mask and self.mask_full else self.split(mask, groups)
        for part, gs, m in split:
            tdm_copy(part, *gs, to_lds, m).complete()

    def drain(self) -> None:
        super().drain()
        for p in self.parts:
            p.drain()


@register_cache
@functools.lru_cache(maxsize=8)  # a few MB each, at most plan.LANE_BUDGET lanes
def _lockstep_geometry(B: int, W: int, block: tuple[int, int, int], lds_bytes: int):
    """(lane, wave, lane_base, group_base, index, mask, mask_full, tid) of a lockstep context
    of B workgroups of W waves: its parts' `_geometry`, gathered once per shape (not once per
    batch), read-only as the parts' are. `index`: the lanes of each part in the part's own
    order (g*32 + l): a slice (a view) for one workgroup, else the part's column of the
    (B, W, 32) lane grid (`lanes_of`)."""
    L = B * W * WAVE
    block_id = np.arange(B * W, dtype=np.int64)  # (g, w) blocks of 32 lanes
    g, w = block_id // W, block_id % W
    lane = np.tile(np.arange(WAVE, dtype=np.int64), B * W)
    wave = np.repeat(w, WAVE)
    lane_base = np.repeat(block_id * WAVE, WAVE)
    group_base = np.repeat(g * lds_bytes, WAVE)
    index = tuple(slice(k * WAVE, (k + 1) * WAVE) if B == 1 else slice(0, B * WAVE) if W == 1 else
                  PartLanes(B, W, k) for k in range(W))
    parts = [_geometry(k, B, block, lds_bytes) for k in range(W)]

    def gather(per_part) -> np.ndarray:
        out = None
        for idx, a in zip(index, per_part):
            if out is None:
                out = np.empty(L, dtype=a.dtype)
            if type(idx) is slice:
                out[idx] = a
            else:
                out.reshape(B, W, WAVE)[:, idx.k] = a.reshape(B, WAVE)
        return out

    mask = gather(p[3] for p in parts)
    tid = tuple(gather(p[5][d] for p in parts) for d in range(3))
    for a in (lane, wave, lane_base, group_base, mask) + tid:
        a.flags.writeable = False
    return lane, wave, lane_base, group_base, index, mask, bool(mask.all()), tid


class LockstepHooks:
    """`ctx.san` of a lockstep context: each hook call goes to the hooks of every wave with an
    active lane, with that wave's lanes, so the happens-before engine sees the events of each
    wave as a per-wave run produces them (waves in order, one call each). The most frequent
    calls, ds accesses and uses with every lane active, skip the generic split."""

    direct = True  # the whole-mask paths below; False: every call through `split` (tests compare)

    def __init__(self, ctx: LockstepCtx):
        self.ctx = ctx
        if self.direct and ctx.mask_full:
            self._ds_fns = [(p.san.ds, p.mask) for p in ctx.parts]
            self._use_fns = [(p.san.use, p.mask) for p in ctx.parts]
            self._ds_each, self._use_each = self._fanout("ds"), self._fanout("use")
            self.ds, self.use = self._ds_all, self._use_all

    def _ds_all(self, site, ptr, nbytes, kind, mask):
        ctx = self.ctx
        lanes = ctx.per_lane((ptr, nbytes, kind))
        if mask is not ctx.mask or lanes not in ([], [0]):  # partial mask, or per-lane size/kind
            return self._ds_each(site, ptr, nbytes, kind, mask)
        if lanes:
            for (fn, m), idx in zip(self._ds_fns, ctx.index):
                fn(site, lanes_of(ptr, idx), nbytes, kind, m)
        else:
            for fn, m in self._ds_fns:
                fn(site, ptr, nbytes, kind, m)

    def _use_all(self, site, mask):
        if mask is not self.ctx.mask:
            return self._use_each(site, mask)
        for fn, m in self._use_fns:
            fn(site, m)

    def _fanout(self, method):
        """The hook call `method` of the context: one call per wave with an active lane."""
        ctx = self.ctx
        split, split_whole = ctx.split, ctx.split_whole
        bound = {id(p): getattr(p.san, method) for p in ctx.parts}
        full = ctx.mask if ctx.mask_full and self.direct else None  # every lane active: no generator

        def call(site, *args):
            mask = args[-1]
            for part, vals, m in split_whole(args[:-1]) if mask is full else split(mask, args[:-1]):
                bound[id(part)](site, *vals, m)
        return call


def _lockstep_hook(method: str):
    def call(self, site, *args):
        fn = self._fanout(method)
        setattr(self, method, fn)  # built on first use, once per hook name and context
        return fn(site, *args)
    return hook_method("LockstepHooks", method, call)


for _method in HOOK_METHODS:  # every hook (ABI and `stored`); ds/use are bound per instance when direct
    setattr(LockstepHooks, _method, _lockstep_hook(_method))


def _cut(values, lanes: list[int], idx) -> list:
    """`values` with the per-lane ones (positions `lanes`) cut to the lanes `idx`."""
    out = list(values)
    for i in lanes:
        out[i] = lanes_of(out[i], idx)
    return out


class PartLanes(NamedTuple):
    """The lanes of part k of a lockstep context of B workgroups of W waves: lane
    (g*W + k)*32 + l for every g, l."""

    B: int
    W: int
    k: int


def lanes_of(values: np.ndarray, idx) -> np.ndarray:
    """The part `idx` (a slice or `PartLanes`) of per-lane `values` (first axis L): a strided
    copy of one column of the (B, W, 32) lane grid, far cheaper than a fancy index when a
    lane holds a vector."""
    if type(idx) is slice:
        return values[idx]
    rest = values.shape[1:]
    return values.reshape((idx.B, idx.W, WAVE) + rest)[:, idx.k].reshape((idx.B * WAVE,) + rest)
