"""Build per-wave event streams that read like the protocol, and feed them to a ShadowEngine
under a barrier-respecting scheduler (the emulator's contract, in miniature).

    prog = Program(waves=2)
    prog.wave(0).store(10, at=0).wait_ds(0).raw_barrier()
    prog.wave(1).raw_barrier().load(30, at=0)
    assert found(prog.run()) == set()
"""

from __future__ import annotations

import random
from typing import Iterable

import numpy as np

from ldssan.runtime.records import Record, Ring
from ldssan.runtime.shadow import AccessKind, CopyKind, Counter, ShadowEngine

BARRIER_SITE = 100
END_SITE = 999


class WaveBuilder:
    """Appends events of one wave; every method returns the builder (chainable)."""

    def __init__(self, prog: "Program", wave: int):
        self.prog = prog
        self.w = wave
        self.events = prog.streams[wave]

    # -- lane-level accesses ------------------------------------------------------------------

    def _lanes(self, at, lanes, nbytes, stride, groups):
        n = self.prog.G * 32
        addr = np.zeros(n, np.int64)
        mask = np.zeros(n, bool)
        lanes = tuple(lanes)
        stride = nbytes if stride is None else stride
        for g in range(self.prog.G) if groups is None else groups:
            for i, lane in enumerate(lanes):
                addr[g * 32 + lane] = at + i * stride
                mask[g * 32 + lane] = True
        return addr, mask

    def _ds(self, site, at, kind, lanes, nbytes, stride, groups):
        addr, mask = self._lanes(at, lanes, nbytes, stride, groups)
        self.events.append(("ds", (site, addr, nbytes, kind, mask)))
        return self

    def store(self, site, at, *, lanes: Iterable[int] = (0,), nbytes=4, stride=None, groups=None):
        return self._ds(site, at, AccessKind.WRITE, lanes, nbytes, stride, groups)

    def load(self, site, at, *, lanes: Iterable[int] = (0,), nbytes=4, stride=None, groups=None):
        return self._ds(site, at, AccessKind.READ, lanes, nbytes, stride, groups)

    def atomic(self, site, at, *, lanes: Iterable[int] = (0,), nbytes=4, stride=0, groups=None):
        return self._ds(site, at, AccessKind.ATOMIC, lanes, nbytes, stride, groups)

    def dma_load(self, site, at, *, lanes: Iterable[int] = (0,), nbytes=4, stride=None, groups=None):
        """global_load_async_to_lds: the copy writes LDS."""
        addr, mask = self._lanes(at, lanes, nbytes, stride, groups)
        self.events.append(("dma", (site, addr, nbytes, CopyKind.TO_LDS, mask)))
        return self

    def dma_store(self, site, at, *, lanes: Iterable[int] = (0,), nbytes=4, stride=None, groups=None):
        """global_store_async_from_lds: the copy reads LDS."""
        addr, mask = self._lanes(at, lanes, nbytes, stride, groups)
        self.events.append(("dma", (site, addr, nbytes, CopyKind.FROM_LDS, mask)))
        return self

    # -- TDM ----------------------------------------------------------------------------------

    def _tdm(self, site, at, size, offsets, kind):
        if offsets is None:
            offsets = np.arange(at, at + size, dtype=np.int64)
        per_group = np.tile(np.asarray(offsets, np.int64), (self.prog.G, 1))
        self.events.append(("tdm", (site, per_group, kind)))
        return self

    def tdm_load(self, site, at=0, size=16, *, offsets=None):
        """tensor_load_to_lds writing bytes [at, at+size) (or exactly `offsets`)."""
        return self._tdm(site, at, size, offsets, CopyKind.TO_LDS)

    def tdm_store(self, site, at=0, size=16, *, offsets=None):
        """tensor_store_from_lds reading bytes [at, at+size)."""
        return self._tdm(site, at, size, offsets, CopyKind.FROM_LDS)

    # -- waits, fences, marks -----------------------------------------------------------------

    def wait(self, counter: Counter, n=0, site=200):
        self.events.append(("wait", (site, counter, n)))
        return self

    def wait_ds(self, n=0, site=201):
        return self.wait(Counter.DS, n, site)

    def wait_tensor(self, n=0, site=202):
        return self.wait(Counter.TENSOR, n, site)

    def wait_async(self, n=0, site=203):
        return self.wait(Counter.ASYNC, n, site)

    def fence(self, ordering="release", scope="workgroup", site=204):
        self.events.append(("fence", (site, ordering, scope)))
        return self

    def mark(self, site=205):
        self.events.append(("asyncmark", (site,)))
        return self

    def wait_mark(self, n=0, site=206):
        self.events.append(("wait_asyncmark", (site, n)))
        return self

    # -- barriers -----------------------------------------------------------------------------

    def signal(self, site=BARRIER_SITE):
        self.events.append(("barrier_signal", (site,)))
        return self

    def wait_barrier(self, site=BARRIER_SITE):
        self.events.append(("barrier_wait", (site,)))
        return self

    def raw_barrier(self, site=BARRIER_SITE):
        """rocdl.s.barrier / raw split barrier: signal + wait, no fence, no wait."""
        return self.signal(site).wait_barrier(site)

    def barrier(self, site=BARRIER_SITE):
        """gpu.barrier: fence release, signal, wait, fence acquire."""
        self.fence("release", "workgroup", site)
        self.signal(site).wait_barrier(site)
        return self.fence("acquire", "workgroup", site)

    def end(self, site=END_SITE):
        self.events.append(("wave_end", (site,)))
        return self


class Program:
    """The per-wave event streams of one batch."""

    def __init__(self, waves=2, lds=256, groups=(0,)):
        self.n_waves = waves
        self.lds = lds
        self.groups = tuple(groups)
        self.G = len(self.groups)
        self.streams: list[list] = [[] for _ in range(waves)]

    def wave(self, w: int) -> WaveBuilder:
        return WaveBuilder(self, w)

    def all(self) -> "_All":
        """Append the same events to every wave: prog.all().barrier()."""
        return _All(self)

    def run(self, policy="rr", *, ring_capacity=4096, ring=None, launch=0, pending_cap=None) -> list[Record]:
        ring = Ring(ring_capacity) if ring is None else ring
        engine = ShadowEngine(self.lds, self.n_waves, ring, groups=self.groups, launch=launch)
        if pending_cap is not None:
            engine.PENDING_CAP = pending_cap
        Scheduler(self, engine, policy).run()
        engine.finish()
        return ring.records()


class _All:
    def __init__(self, prog):
        self.prog = prog

    def __getattr__(self, name):
        def call(*args, **kw):
            for w in range(self.prog.n_waves):
                getattr(self.prog.wave(w), name)(*args, **kw)
            return self
        return call


class Scheduler:
    """Runs the streams with barrier -1 semantics: a wait returns once every live wave
    signalled that phase; a wave whose stream is done ends (and drops the barrier).

    policy: "rr" (one event per wave in turn), "seq" (each wave as far as it can, in wave
    order), "reverse", ("random", seed) (random wave, random burst), ("blocks", seed)
    (a random wave runs to its next barrier wait)."""

    def __init__(self, prog: Program, engine: ShadowEngine, policy):
        self.prog, self.engine = prog, engine
        self.policy = policy
        n = prog.n_waves
        self.pc = [0] * n
        self.nsig = [0] * n
        self.nwait = [0] * n
        self.ended = [False] * n
        self.completed = 0
        self.streams = [s if s and s[-1][0] == "wave_end" else s + [("wave_end", (END_SITE,))]
                        for s in prog.streams]

    def _phase_done(self, k):
        live = [w for w in range(self.prog.n_waves) if not self.ended[w]]
        return all(self.nsig[w] > k for w in live)

    def runnable(self, w) -> bool:
        if self.ended[w]:
            return False
        name, _args = self.streams[w][self.pc[w]]
        return name != "barrier_wait" or self._phase_done(self.nwait[w])

    def step(self, w) -> str:
        name, args = self.streams[w][self.pc[w]]
        self.pc[w] += 1
        if name == "barrier_signal":
            self.nsig[w] += 1
        elif name == "barrier_wait":
            self.nwait[w] += 1
        elif name == "wave_end":
            self.ended[w] = True
        getattr(self.engine, name)(w, *args)
        return name

    def run(self) -> None:
        n = self.prog.n_waves
        policy = self.policy
        rng = random.Random(policy[1]) if isinstance(policy, tuple) else None
        kind = policy[0] if isinstance(policy, tuple) else policy
        for _guard in range(1_000_000):
            ready = [w for w in range(n) if self.runnable(w)]
            if not ready:
                if all(self.ended):
                    return
                raise RuntimeError(f"test program deadlocks at pcs {self.pc}")
            if kind == "rr":
                for w in ready:
                    if self.runnable(w):
                        self.step(w)
            elif kind in ("seq", "reverse"):
                w = ready[0] if kind == "seq" else ready[-1]
                while self.runnable(w):
                    self.step(w)
            elif kind == "random":
                w = rng.choice(ready)
                for _ in range(rng.randint(1, 3)):
                    if not self.runnable(w):
                        break
                    self.step(w)
            elif kind == "blocks":
                w = rng.choice(ready)
                while self.runnable(w):
                    if self.step(w) == "barrier_wait":
                        break
            else:
                raise ValueError(f"unknown policy {policy!r}")
        raise RuntimeError("scheduler step budget exhausted")


POLICIES = ["rr", "seq", "reverse"] + [("random", s) for s in range(6)] + [("blocks", s) for s in range(6)]


def lane0_at_zero(n_lanes: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(addr, mask) operands of a raw engine access by lane 0 alone, at LDS offset 0."""
    mask = np.zeros(n_lanes, bool)
    mask[0] = True
    return np.zeros(n_lanes, np.int64), mask


def found(records: Iterable[Record]) -> set[tuple]:
    """{(rule, cause, site, other_site)} -- the schedule-independent verdict."""
    return {(r.rule, r.cause, r.site, r.other_site) for r in records}


def random_phases(rng: random.Random, prog: Program, phases: int, *, exit_p: float, max_ops: int,
                  op, window_op, drain_p: float) -> Program:
    """Fill every wave of `prog` with `phases` barrier phases, each barrier a gpu, raw or split
    one at random. A phase runs up to `max_ops` calls `op(builder, sites)`, a split barrier's
    signal-wait window up to two `window_op(builder, sites)` (`sites` yields fresh site ids);
    a wave ends early with probability `exit_p` and waits for its copies with `drain_p`."""
    sites = iter(range(1000, 100000))
    for w in range(prog.n_waves):
        b = prog.wave(w)
        exit_at = rng.randint(0, phases) if rng.random() < exit_p else phases
        for ph in range(phases + 1):
            for _ in range(rng.randint(0, max_ops)):
                op(b, sites)
            if ph == exit_at or ph == phases:
                break
            style = rng.choice(["gpu", "raw", "split", "split"])
            if style == "gpu":
                b.barrier(100 + ph)
            elif style == "raw":
                b.raw_barrier(100 + ph)
            else:
                b.signal(100 + ph)
                for _ in range(rng.randint(0, 2)):
                    window_op(b, sites)
                b.wait_barrier(100 + ph)
        if rng.random() < drain_p:
            b.wait_tensor(0).wait_async(0)
    return prog
