"""One sanitized host call on the virtual gfx1250: binds a happens-before engine to each
batch of the executor's waves, and collects every engine's records in one ring.

`ShadowSession` is the Launcher's sanitizer (`emu.interfaces.Sanitizer`); the user-facing layer
only sees what `finish` hands over: the ring's records, the site table JSON and the LDS
buffers of the module.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ldssan.passes.ir.types import byte_size

from .emu import cluster_hooks
from .emu.cluster_hooks import ClusterHooks
from .emu.hooks import ShadowHooks
from .emu.split import BatchSplit
from .emu.plan import lds_layout
from .records import NO_SITE, VERBATIM_PER_KEY, Ring
from .shadow import ShadowEngine

_launch_ids = itertools.count()

# called with (engine, sites_json) for the engine each sanitized batch begins with
BatchObserver = Callable[[ShadowEngine, str], None]
_BATCH_OBSERVERS: list[BatchObserver] = []


@contextmanager
def observing_batches(observer: BatchObserver) -> Iterator[None]:
    """While inside, `observer(engine, sites_json)` is called for the engine every sanitized
    batch of this process begins with (the one engine of a lone workgroup, or the batch
    engine of a `split.BatchSplit`), before any event reaches it; the observer attaches a
    `shadow.Listener` with `engine.listen`. The engines a batch splits into later are not
    reported."""
    _BATCH_OBSERVERS.append(observer)
    try:
        yield
    finally:
        _BATCH_OBSERVERS.remove(observer)


@dataclass(frozen=True)
class LdsBufferInfo:
    """One LDS allocation of the module: its symbol, where it was allocated, its bytes."""

    name: str
    offset: int
    size: int
    file: str | None
    line: int | None


@dataclass(frozen=True)
class SessionOutcome:
    """What a finished sanitized call produced, for the decoder."""

    entry: str
    kernels: tuple[str, ...]
    launch: int
    ring: Ring
    sites_json: str
    coverage_json: str
    buffers: tuple[LdsBufferInfo, ...]
    memo: str = ""  # the call's memo outcome (runtime/emu/memo.py): replayed, recorded, not memoizable: ...


class ShadowSession:
    def __init__(self, sites_json: str, entry: str, view, *, ring_capacity: int,
                 on_finish: Callable[[SessionOutcome], None]):
        self.sites_json = sites_json
        self.entry = entry
        self.view = view
        self.ring = Ring(ring_capacity, verbatim=VERBATIM_PER_KEY)  # one bug never floods the ring
        self.launch = next(_launch_ids)
        self.on_finish = on_finish
        self.engines: list[ShadowEngine] = []  # every engine begun since the last end_batch
        self._open: list = []  # their finish calls (a batch's: `split.BatchSplit.finish`)
        self.kernels: list[str] = []
        self.memo = ""  # set by runtime/emu/memo.py

    # -- called by runtime/emu/memo.py: an identical earlier call's records stand for this one's --
    def memo_snapshot(self) -> "_Snapshot":
        return _Snapshot(self.ring.relabelled(self.launch), tuple(self.kernels))

    def replay(self, snapshot: "_Snapshot") -> None:
        self.ring = snapshot.ring.relabelled(self.launch)
        self.kernels = list(snapshot.kernels)

    # -- called by the emulator's Launcher ------------------------------------------------------
    def begin_batch(self, prog, waves, chunk, grid, lds_bytes):
        gx, gy, _gz = grid
        groups = [x + gx * (y + gy * z) for x, y, z in chunk]
        if prog.name not in self.kernels:
            self.kernels.append(prog.name)
        for ctx in waves:
            ctx.lds_oob_ok = True  # out-of-range LDS is reported as LDS031, not raised
        n_waves = len(waves)
        # a lockstep translation with native runs: the shadow's clean cases are compiled too
        compiled = getattr(prog, "native", None) is not None

        def new_engine(gs, ring):
            engine = ShadowEngine(lds_bytes, n_waves, ring, groups=gs, launch=self.launch, compiled=compiled)
            self.engines.append(engine)
            return engine

        if len(chunk) == 1:
            engine = new_engine(groups, self.ring)
            self._observed(engine)
            checked = cluster_hooks.attach(waves, grid, self.ring, self.launch)  # the cluster's first team
            if checked is not None:
                self._open.append(checked)
            link = getattr(waves[0], "mcast", None)
            hooks = ShadowHooks if link is None or link.checker is None else ClusterHooks
            for ctx in waves:
                ctx.san = hooks(engine, ctx)
            self._open.append(engine.finish)
            return lambda ctx: engine.wave_end(ctx.wave, NO_SITE)
        batch = BatchSplit(waves, groups, new_engine, self.ring, may_split=prog.may_split)
        self._observed(batch.engine)
        self._open.append(batch.finish)
        return lambda ctx: batch.wave_end(ctx, NO_SITE)

    def _observed(self, engine: ShadowEngine) -> None:
        for observer in _BATCH_OBSERVERS:
            observer(engine, self.sites_json)

    def end_batch(self) -> int:
        """Every engine begun since the last call has run to its end. Returns how many of
        their batches split into parts (`split.BatchSplit`)."""
        splits = sum(bool(finish()) for finish in self._open)
        self._open = []
        self.engines = []
        return splits

    # -- called by the frontend once the host call returns ------------------------------------
    def finish(self) -> None:
        self.on_finish(SessionOutcome(
            entry=self.entry, kernels=tuple(self.kernels), launch=self.launch, ring=self.ring,
            sites_json=self.sites_json, coverage_json=self.view.attrs.get("ldssan.coverage", "{}"),
            buffers=lds_buffers(self.view), memo=self.memo))


@dataclass(frozen=True)
class _Snapshot:
    """A finished call's records and kernels, kept by the launch memo."""

    ring: Ring
    kernels: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        return self.ring.nbytes


def lds_buffers(view) -> tuple[LdsBufferInfo, ...]:
    """The module's LDS allocations in layout order, with their allocation frame."""
    offsets, _total = lds_layout(view)
    out = []
    for name, off in offsets.items():
        g = view.globals[name]
        frame = g.loc.frame
        out.append(LdsBufferInfo(name, off, byte_size(g.type),
                                 frame.file if frame else None, frame.line if frame else None))
    return tuple(out)
