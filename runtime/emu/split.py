"""The sanitizer hooks of a batch of workgroups: one engine while their sync streams agree,
one engine per part of the batch whose streams still agree once they part.

A batch's happens-before engine keeps one counter and barrier state per wave, shared by the
batch's workgroups (shadow/waves.py). That is exact while every event reaches all of the
batch's workgroups or none, as when they run the same instructions. An event under a
condition that differs across workgroups (a wait or ds op under `if block_id == 0`, a
persistent loop one workgroup leaves before the others) reaches some only: applied to the
shared state it would count a wait, an op or a barrier for workgroups that never issued it,
and hide their races. At that event the part of the batch it reaches some of is split in
two, the workgroups it reaches and the others: one engine each, built by replaying the
part's events so far, cut to its workgroups' lanes; from then on each event goes to the
parts it reaches. A grid-stride loop that some workgroups run once more than the others
so leaves two engines, not one per workgroup. A part's log of events is bounded
(`LOG_BYTES`): past it the part splits into one engine per workgroup, which never split
again and log nothing. The emulation itself is never re-run. A part's records are held
until the batch ends and kept only for the parts that never split (the parts made from it
saw every event again); a one-workgroup part pushes at once.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .hooks import ShadowHooks
from .interfaces import HOOK_METHODS, hook_method
from .wave import workgroups_reached

WAVE = 32
# bytes a part's log of events may hold: each entry's arrays (their whole base, which the log
# keeps alive), plus ENTRY_BYTES for its Python objects. Counted by bytes, not events: a
# persistent kernel's log is mostly barriers and waits, which hold no lane arrays
LOG_BYTES = 1 << 28
ENTRY_BYTES = 256
# the hook methods of `ShadowHooks` a batch forwards (every `__ldssan_*` hook of the ABI, and
# the emulator-only `stored`)
METHODS = HOOK_METHODS
_INNER = {name: getattr(ShadowHooks, name) for name in METHODS}


class _Held(list):
    """A part's ring until the batch ends (records in the order pushed)."""

    push = list.append


class _PartView:
    """What `ShadowHooks` reads of a wave, for the workgroups of one part of a batched wave."""

    __slots__ = ("wave", "mask", "L")

    def __init__(self, ctx, cut, n: int):
        self.wave = ctx.wave
        self.L = WAVE * n
        live = np.broadcast_to(np.asarray(ctx.mask), (ctx.L,))
        self.mask = live[cut]


class _Part:
    """Workgroups of a batch (positions `ks`, ascending) whose sync streams agree so far,
    and their engine; `cut` picks their lanes of a batched wave (None: the whole batch)."""

    __slots__ = ("ks", "cut", "engine", "hooks", "held", "log", "logged")

    def __init__(self, ks: np.ndarray, cut, engine, hooks: list, held, log: list | None):
        self.ks = ks
        self.cut = cut
        self.engine = engine
        self.hooks = hooks  # per wave of the batch: a ShadowHooks on this part's lanes
        self.held = held
        self.log = log  # (wave index, method, args) since the batch began; None: never splits
        self.logged = 0  # bytes the log holds (`entry_bytes`)

    def keep(self, i: int, name: str, args: tuple) -> bool:
        """Log an event; False once the log is past `LOG_BYTES`."""
        self.log.append((i, name, args))
        self.logged += entry_bytes(args)
        return self.logged <= LOG_BYTES


def entry_bytes(args: tuple) -> int:
    """What logging an event's `args` holds in memory, about (`LOG_BYTES`)."""
    n = ENTRY_BYTES
    for v in args:
        if type(v) is np.ndarray:
            base = v.base
            n += base.nbytes if type(base) is np.ndarray else v.nbytes
    return n


def _lanes_of(ks: np.ndarray):
    """The lanes of workgroups `ks` in a batched wave: a slice when they are consecutive."""
    if int(ks[-1]) - int(ks[0]) + 1 == ks.size:
        return slice(int(ks[0]) * WAVE, (int(ks[-1]) + 1) * WAVE)
    return (ks[:, None] * WAVE + np.arange(WAVE)).ravel()


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
        held = _Held() if may_split else ring
        self.engine = new_engine(self.groups, held)  # the whole batch's (what observers see)
        whole = _Part(np.arange(len(self.groups)), None, self.engine,
                      [ShadowHooks(self.engine, ctx) for ctx in self.ctxs], held, [] if may_split else None)
        self.parts = [whole]  # more than one once the batch split
        for i, ctx in enumerate(self.ctxs):
            ctx.san = BatchHooks(self, i, whole.hooks[i])

    # -- does an event reach every workgroup of the batch, or none? ---------------------------
    def reaches_all(self, ctx, mask) -> bool:
        took = workgroups_reached(ctx, mask)
        return took is None or not took.any()

    # -- the parts -------------------------------------------------------------------------------
    def _part(self, ks: np.ndarray) -> _Part:
        held = self.ring if ks.size == 1 else _Held()
        engine = self.new_engine([self.groups[k] for k in ks.tolist()], held)
        cut = _lanes_of(ks)
        return _Part(ks, cut, engine, [ShadowHooks(engine, _PartView(ctx, cut, ks.size)) for ctx in self.ctxs],
                     held, [] if ks.size > 1 else None)

    def refine(self, part: _Part, reached: np.ndarray | None) -> _Part:
        """Replace `part` by the part of its workgroups `reached` marks and the part of the
        others (`reached` None: one part per workgroup), each fed `part`'s events so far.
        Returns the first new part."""
        if part.log is None:
            raise RuntimeError(
                "ldssan: internal error: an event of a batched wave reached some of the batch's workgroups "
                "only, which the kernel's IR did not foresee (uniformity.split_possible); rerun with batch=1 "
                "and please report")
        ks = part.ks
        pieces = [ks[k:k + 1] for k in range(ks.size)] if reached is None else [ks[reached], ks[~reached]]
        new = [self._part(p) for p in pieces]
        for p in new:
            for i, name, args in part.log:
                self._apply(p, i, name, args)
            if p.log is not None:
                p.log, p.logged = list(part.log), part.logged
        at = self.parts.index(part)
        self.parts[at:at + 1] = new
        return new[0]

    def dispatch(self, i: int, name: str, args: tuple) -> None:
        """The event `name(*args)` of wave `i`, to each part it reaches (splitting a part it
        reaches some workgroups of), cut to that part's lanes."""
        took = None if name == "wave_end" else workgroups_reached(self.ctxs[i], args[-1])
        for part in list(self.parts):
            if took is not None:
                sub = took[part.ks]
                if not sub.any():
                    continue
                if not sub.all():
                    part = self.refine(part, sub)
            self._deliver(part, i, name, args)

    def _deliver(self, part: _Part, i: int, name: str, args: tuple) -> None:
        if part.log is not None and not part.keep(i, name, args):
            self.refine(part, None)  # the replay includes this event
            return
        self._apply(part, i, name, args)

    def _apply(self, part: _Part, i: int, name: str, args: tuple) -> None:
        ctx, h = self.ctxs[i], part.hooks[i]
        if name == "wave_end":
            part.engine.wave_end(ctx.wave, args[0])
            return
        cut = part.cut
        if cut is None:
            _INNER[name](h, *args)
            return
        *vals, mask = args
        L = ctx.L
        mine = [v[cut] if type(v) is np.ndarray and v.ndim and v.shape[0] == L else v for v in vals]
        m = h.ctx.mask if mask is ctx.mask else np.broadcast_to(np.asarray(mask), (L,))[cut]
        if m.any():
            _INNER[name](h, *mine, m)

    # -- the launcher's callbacks ----------------------------------------------------------------
    def wave_end(self, ctx, site) -> None:
        self.dispatch(self.ctxs.index(ctx), "wave_end", (site,))

    def finish(self) -> bool:
        """The batch ended: finish its engines; the records reach the session's ring.
        Returns whether the batch split."""
        for part in self.parts:
            part.engine.finish()
            if part.held is not self.ring:
                for rec in part.held:
                    self.ring.push(rec)
            part.held = None
        return len(self.parts) > 1


class BatchHooks:
    """`ctx.san` of a batched wave: forwards each hook call to the batch engine while it
    reaches every workgroup (logging it), else to the parts it reaches (`BatchSplit`)."""

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
        if len(batch.parts) == 1:
            mask = args[-1]
            if mask is self.ctx.mask or batch.reaches_all(self.ctx, mask):
                whole = batch.parts[0]
                if whole.log is not None and not whole.keep(self.index, name, args):
                    batch.refine(whole, None)  # the replay includes this event
                    return None
                return inner_fn(self.inner, *args)
        batch.dispatch(self.index, name, args)

    return hook_method("BatchHooks", name, call)


for _name in METHODS:
    setattr(BatchHooks, _name, _forward(_name))
