"""The sanitizer hooks of a batch of workgroups: one engine while their sync streams agree,
one engine per workgroup from the first event that reaches some of them only.

A batch's happens-before engine keeps one counter and barrier state per wave, shared by the
batch's workgroups (shadow/waves.py). That is exact while every event reaches all of the
batch's workgroups or none, as when they run the same instructions. An event under a
condition that differs across workgroups (a wait or ds op under `if block_id == 0`, a
persistent loop one workgroup leaves before the others) reaches some only: applied to the
shared state it would count a wait, an op or a barrier for workgroups that never issued it,
and hide their races. At that first event the batch splits: one engine per workgroup is
built by replaying the batch's events so far, each cut to that workgroup's lanes, and from
then on each event goes to the engines of the workgroups it reaches. The emulation itself is
never re-run. The batch engine's records are held until the batch ends: kept when it never
split, dropped when it did (the per-workgroup engines saw every event again).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .hooks import ShadowHooks
from .interfaces import HOOK_METHODS, hook_method
from .wave import workgroups_reached

WAVE = 32
LOG_LANES = 1 << 24  # lanes of logged events (per-lane arrays of 8 bytes: ~128 MiB at most)
# the hook methods of `ShadowHooks` a batch forwards (every `__ldssan_*` hook of the ABI, and
# the emulator-only `stored`)
METHODS = HOOK_METHODS
_INNER = {name: getattr(ShadowHooks, name) for name in METHODS}


class _Held(list):
    """The batch engine's ring until the batch ends (records in the order pushed)."""

    push = list.append


class _GroupView:
    """What `ShadowHooks` reads of a wave, for one workgroup of a batched wave."""

    __slots__ = ("wave", "mask", "L")

    def __init__(self, ctx, g: int):
        self.wave = ctx.wave
        self.L = WAVE
        live = np.broadcast_to(np.asarray(ctx.mask), (ctx.L,))
        self.mask = live[g * WAVE:(g + 1) * WAVE]


class BatchSplit:
    """The engines of one batch of `len(groups)` workgroups run by the waves `ctxs` (each
    over the batch: lane g*32 + l is lane l of workgroup g). Installs a `BatchHooks` as
    each wave's `ctx.san`; `wave_end` is the launcher's end-of-wave callback."""

    def __init__(self, ctxs, groups: list[int], new_engine: Callable, ring, *, may_split: bool):
        self.ctxs = list(ctxs)
        self.groups = list(groups)
        self.new_engine = new_engine  # (workgroup ids, ring) -> ShadowEngine
        self.ring = ring
        # a batch that cannot split (`Program.may_split`) pushes at once and logs nothing
        self.held = _Held() if may_split else ring
        self.engine = new_engine(self.groups, self.held)
        self.log: list | None = [] if may_split else None  # (wave index, method, args) until the split
        # logged lanes before the batch splits anyway, which bounds the log's memory
        self.log_cap = max(4096, LOG_LANES // max(1, self.ctxs[0].L if self.ctxs else 1))
        self.per_group: list[list[ShadowHooks]] | None = None
        self.engines: list = []
        for i, ctx in enumerate(self.ctxs):
            ctx.san = BatchHooks(self, i, ShadowHooks(self.engine, ctx))

    # -- does an event reach every workgroup of the batch, or none? ---------------------------
    def reaches_all(self, ctx, mask) -> bool:
        took = workgroups_reached(ctx, mask)
        return took is None or not took.any()

    # -- the split -----------------------------------------------------------------------------
    def divide(self) -> None:
        """One engine per workgroup, fed the batch's events so far; the batch engine and its
        held records are dropped."""
        if self.log is None:
            raise RuntimeError(
                "ldssan: internal error: an event of a batched wave reached some of the batch's workgroups "
                "only, which the kernel's IR did not foresee (uniformity.split_possible); rerun with batch=1 "
                "and please report")
        self.engines = [self.new_engine([g], self.ring) for g in self.groups]
        self.per_group = [[ShadowHooks(engine, _GroupView(ctx, k)) for k, engine in enumerate(self.engines)]
                          for ctx in self.ctxs]
        log, self.log = self.log, None
        self.engine, self.held = None, None
        for i, name, args in log:
            self.to_groups(i, name, args)

    def to_groups(self, i: int, name: str, args: tuple) -> None:
        """The event `name(*args)` of wave `i`, to each workgroup it reaches, cut to its lanes."""
        ctx, hooks = self.ctxs[i], self.per_group[i]
        if name == "wave_end":
            for engine in self.engines:
                engine.wave_end(ctx.wave, args[0])
            return
        *vals, mask = args
        L = ctx.L
        lanes = [j for j, v in enumerate(vals) if type(v) is np.ndarray and v.ndim and v.shape[0] == L]
        whole = mask is ctx.mask
        m_all = np.broadcast_to(np.asarray(mask), (L,))
        for g, h in enumerate(hooks):
            cut = slice(g * WAVE, (g + 1) * WAVE)
            m = h.ctx.mask if whole else m_all[cut]
            if not m.any():
                continue
            mine = list(vals)
            for j in lanes:
                mine[j] = vals[j][cut]
            _INNER[name](h, *mine, m)

    # -- the launcher's callbacks ----------------------------------------------------------------
    def wave_end(self, ctx, site) -> None:
        i = self.ctxs.index(ctx)
        if self.per_group is not None:
            self.to_groups(i, "wave_end", (site,))
            return
        if self.log is not None:
            self.log.append((i, "wave_end", (site,)))
        self.engine.wave_end(ctx.wave, site)

    def finish(self) -> bool:
        """The batch ended: finish its engine(s); the records reach the session's ring.
        Returns whether the batch split."""
        if self.engine is not None:
            self.engine.finish()
            if self.held is not self.ring:
                for rec in self.held:
                    self.ring.push(rec)
            self.held = None
        for engine in self.engines:
            engine.finish()
        return self.per_group is not None


class BatchHooks:
    """`ctx.san` of a batched wave: forwards each hook call to the batch engine while it
    reaches every workgroup (logging it), else splits the batch first (`BatchSplit`)."""

    __slots__ = ("batch", "index", "inner", "ctx")

    def __init__(self, batch: BatchSplit, index: int, inner: ShadowHooks):
        self.batch = batch
        self.index = index
        self.inner = inner
        self.ctx = inner.ctx


def _forward(name: str):
    inner_fn = _INNER[name]

    def call(self, *args):
        batch = self.batch
        if batch.per_group is None:
            mask = args[-1]
            if mask is self.ctx.mask or batch.reaches_all(self.ctx, mask):
                log = batch.log
                if log is not None:
                    log.append((self.index, name, args))
                    if len(log) > batch.log_cap:
                        return batch.divide()  # the replay includes this event
                return inner_fn(self.inner, *args)
            batch.divide()
        batch.to_groups(self.index, name, args)

    return hook_method("BatchHooks", name, call)


for _name in METHODS:
    setattr(BatchHooks, _name, _forward(_name))
