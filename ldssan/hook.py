"""Turning ldssan on for FlyDSL: `FLYDSL_LDSSAN=1`, `ldssan.enable()`, or `with ldssan.sanitize():`.

While on, every FlyDSL kernel that is launched is compiled with the ldssan pass at the
`ldssan{mode=san,...}` sentinel (its version and options are in the fragment, so FlyDSL's
cache never serves an instrumented build to a plain run or the reverse), executed on the
virtual gfx1250, and checked; each launch's `Report` goes to the active collector.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from ldssan.passes import locations
from ldssan.passes.instrument import instrument_pass
from ldssan.runtime.emu import frontend
from ldssan.runtime.emu.frontend import EmuConfig
from ldssan.runtime.emu.sched import Policy
from ldssan.runtime.session import ShadowSession

from . import config
from .session import LaunchResult, decode_outcome


class Collector:
    """The results of sanitized launches, in order (thread-safe)."""

    def __init__(self) -> None:
        self.results: list[LaunchResult] = []
        self._lock = threading.Lock()

    def add(self, result: LaunchResult) -> None:
        with self._lock:
            self.results.append(result)

    def take(self) -> list[LaunchResult]:
        with self._lock:
            out, self.results = self.results, []
        return out

    @property
    def violations(self):
        return [v for r in self.results for v in r.report.violations]


_collector_stack: list[Collector] = [Collector()]


def collector() -> Collector:
    return _collector_stack[-1]


def _make_config(policy, ring: int, batch: int, resident: int = 1) -> EmuConfig:
    # FlyDSL keeps 5 user frames per location by default: too few to reach the kernel line
    # that called a helper from inside a loop body. Reports want the whole chain.
    os.environ.setdefault("FLYDSL_DEBUG_MAX_LOC_DEPTH", "16")
    frontend.register_pass("san", instrument_pass)
    locations.install()
    if isinstance(policy, str):
        policy = Policy.parse(policy)
    cfg = EmuConfig(policy=policy, batch=batch, resident=resident, sanitize=True, pass_options=f"ring={ring}")

    add = collector().add

    def on_finish(outcome):
        add(decode_outcome(outcome, coverage=bool(config.get("coverage"))))

    def factory(sites_json, entry, view):
        return ShadowSession(sites_json, entry, view, ring_capacity=ring, on_finish=on_finish)

    cfg.sanitizer_factory = factory
    return cfg


def enable(*, policy: "Policy | str | None" = None, ring: int | None = None, batch: int | None = None) -> EmuConfig:
    """Sanitize every FlyDSL launch of this process (what `FLYDSL_LDSSAN=1` does)."""
    cfg = _make_config(policy or config.get("policy"), ring or config.get("ring"), batch or config.get("batch"))
    frontend.set_global(cfg)
    return cfg


def disable() -> None:
    frontend.set_global(None)


def enabled() -> bool:
    cfg = frontend.current()
    return cfg is not None and cfg.sanitize


@contextmanager
def sanitize(policy: "Policy | str" = "round-robin", *, ring: int = 4096, batch: int = 1, resident: int = 1):
    """Sanitize the FlyDSL launches inside the block; yields the `Collector` of their results."""
    col = Collector()
    _collector_stack.append(col)
    try:
        with frontend.active(_make_config(policy, ring, batch, resident)):
            yield col
    finally:
        _collector_stack.remove(col)
