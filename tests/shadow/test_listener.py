"""The engine's declared `Listener` (runtime/shadow/engine.py): a listener sees each observed
event with the engine's arguments, before the engine handles it, and changes nothing; an
engine nobody listens to keeps its class's entry points (no per-event cost)."""

from __future__ import annotations

import inspect

from ldssan.mutate.reliance import _Recorder
from ldssan.runtime.records import Ring
from ldssan.runtime.shadow import AccessKind, CopyKind, ShadowEngine
from ldssan.runtime.shadow.engine import LISTENED, Listener

from .protocol import lane0_at_zero


class _Log:
    def __init__(self):
        self.seen = []

    def _note(name):
        def note(self, engine, *args, **kwargs):
            self.seen.append((name, engine, args, engine.events_applied))
        return note

    ds, dma, tdm = _note("ds"), _note("dma"), _note("tdm")
    barrier_signal, barrier_wait = _note("barrier_signal"), _note("barrier_wait")


def _racy_run(engine: ShadowEngine) -> list:
    """Wave 0 writes byte 0, wave 1 reads it with no barrier between: one LDS001; then a
    barrier and a copy."""
    addr, lane0 = lane0_at_zero()
    engine.ds(0, 1, addr, 4, AccessKind.WRITE, lane0)
    engine.ds(1, 2, addr, 4, AccessKind.READ, lane0)
    for w in (0, 1):
        engine.barrier_signal(w, 3, -1)
    for w in (0, 1):
        engine.barrier_wait(w, 3, -1)
    engine.dma(0, 4, addr, 4, CopyKind.TO_LDS, lane0)
    for w in (0, 1):
        engine.wave_end(w, 5)
    engine.finish()
    return [(r.rule, r.site, r.other_site) for r in engine.ring.records()]


def test_a_listener_sees_every_observed_event_in_order_and_changes_nothing():
    plain = _racy_run(ShadowEngine(64, 2, Ring()))
    engine = ShadowEngine(64, 2, Ring())
    log = _Log()
    engine.listen(log)
    assert _racy_run(engine) == plain and plain  # the same records, and there is one
    names = [name for name, *_ in log.seen]
    assert names == ["ds", "ds", "barrier_signal", "barrier_signal", "barrier_wait", "barrier_wait", "dma"]
    assert all(e is engine for _, e, _a, _n in log.seen)
    assert log.seen[0][2][:2] == (0, 1) and log.seen[2][2] == (0, 3, -1)


def test_an_unobserved_engine_keeps_its_class_entry_points():
    engine = ShadowEngine(64, 2, Ring())
    assert not set(LISTENED) & set(vars(engine))
    engine.listen(_Log())
    assert set(LISTENED) <= set(vars(engine))
    assert not set(LISTENED) & set(vars(ShadowEngine(64, 2, Ring())))  # per instance only


def test_listeners_implement_the_protocol():
    for cls in (_Recorder, _Log):
        assert issubclass(cls, Listener)
    for name in LISTENED:
        proto = [p.name for p in inspect.signature(getattr(Listener, name)).parameters.values()]
        assert [p.name for p in inspect.signature(getattr(_Recorder, name)).parameters.values()] == proto, name
        engine_params = list(inspect.signature(getattr(ShadowEngine, name)).parameters)
        assert proto == ["self", "engine", *engine_params[1:]], name  # the engine's own arguments
