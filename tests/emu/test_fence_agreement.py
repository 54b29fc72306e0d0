"""The virtual gfx1250 and the happens-before engine agree on fences, for every ordering x
scope: the emulator lands a wave's queued ds stores at a fence exactly when the engine
drains the wave's outstanding ds ops there (both ask ldssan.passes.abi.fence_drains).

The expected decision is written out here from the gfx1250 lowering (docs/memory-model.md,
Fences): a fence at workgroup scope or wider that is not one-as compiles to s_wait_dscnt 0
(+ loadcnt/storecnt); one-as, wavefront and singlethread fences, and monotonic ordering,
emit no wait."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ldssan.decode import Report
from ldssan.passes.abi import ORDERINGS, SCOPES, BarrierForm
from ldssan.passes.ir.irview import UNKNOWN_LOC, Op
from ldssan.runtime.emu.hooks import ShadowHooks
from ldssan.runtime.emu.ops.llvm import fence as emit_fence
from ldssan.runtime.records import Ring, Rule
from ldssan.runtime.shadow import AccessKind, Counter, ShadowEngine

from ..shadow.protocol import lane0_at_zero
from .sanitized import sanitize_mlir
from .test_ops import module

DRAINING_SCOPES = {"", "workgroup", "agent", "cluster"}  # not one-as, not narrower than the workgroup
COMBOS = list(itertools.product(ORDERINGS, SCOPES))
# `llvm.fence` verifies only with acquire or stronger: monotonic exists in the ABI, not in IR.
IR_COMBOS = [(o, s) for o, s in COMBOS if ORDERINGS[o] != "monotonic"]


def expected_drains(ordering: int, scope: str) -> bool:
    return ORDERINGS[ordering] != "monotonic" and scope in DRAINING_SCOPES


def _id(combo) -> str:
    o, s = combo
    return f"{ORDERINGS[o]}-{s or 'system'}"


# -- each side on its own, every ordering x scope -----------------------------------------------

class _Probe:
    def __init__(self):
        self.flushed = False

    def flush_ds(self, keep: int = 0):
        self.flushed = True


class _Out:
    def __init__(self):
        self.lines: list[str] = []

    def out(self, line: str) -> None:
        self.lines.append(line)


def _emulator_lands(ordering: int, scope: str) -> bool:
    """Run the code the emulator's fence emitter generates against a probe wave."""
    t = _Out()
    emit_fence(t, Op("llvm.fence", (), (), (), {"ordering": ordering, "syncscope": scope}, [], UNKNOWN_LOC))
    probe = _Probe()
    exec("\n".join(t.lines), {"ctx": probe})
    return probe.flushed


def _engine_publishes(ordering: int, scope: str) -> bool:
    """Wave 0 stores, fences, signals; wave 1 reads after the barrier: no LDS001 iff drained."""
    ring = Ring()
    eng = ShadowEngine(64, 2, ring)
    addr, lane0 = lane0_at_zero()
    eng.ds(0, 1, addr, 4, AccessKind.WRITE, lane0)
    eng.fence(0, 2, ORDERINGS[ordering], scope)
    for w in (0, 1):
        eng.barrier_signal(w, 3, -1)
    for w in (0, 1):
        eng.barrier_wait(w, 4, -1)
    eng.ds(1, 5, addr, 4, AccessKind.READ, lane0)
    eng.wait(1, 6, Counter.DS, 0)
    for w in (0, 1):
        eng.wave_end(w, 7)
    eng.finish()
    return not any(r.rule == Rule.RAW_UNPUBLISHED for r in ring.records())


@pytest.mark.parametrize("combo", COMBOS, ids=_id)
def test_emitter_and_engine_decide_the_same(combo):
    ordering, scope = combo
    want = expected_drains(ordering, scope)
    assert _emulator_lands(ordering, scope) == want
    assert _engine_publishes(ordering, scope) == want


# -- end to end: one kernel, both executors observed at the signal ------------------------------

def _run_sanitized(text: str, out: np.ndarray) -> Report:
    """Instrument an MLIR kernel, run 64 lanes (two waves) round-robin, sanitized."""
    return sanitize_mlir(text, [out], policy="round-robin")


def _kernel(ordering: int, scope: str) -> str:
    sync = f'syncscope("{scope}") ' if scope else ""
    body = f"""
      %c1 = arith.constant 1 : i32
      %c63 = arith.constant 63 : i32
      %b = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %p = llvm.getelementptr %b[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %w = arith.addi %t, %c1 : i32
      llvm.store %w, %p : i32, !llvm.ptr<3>
      llvm.fence {sync}{ORDERINGS[ordering]}
      rocdl.s.barrier.signal id = -1
      rocdl.s.barrier.wait id = -1
      llvm.fence syncscope("workgroup") acquire
      %r0 = arith.subi %c63, %t : i32
      %q = llvm.getelementptr %b[%r0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %v = llvm.load %q : !llvm.ptr<3> -> i32
      %o = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %v, %o : i32, !llvm.ptr<1>"""
    return module(body, "%out: !llvm.ptr<1>", 512)


@pytest.mark.parametrize("combo", IR_COMBOS, ids=_id)
def test_fence_lands_stores_exactly_when_the_engine_drains(combo, monkeypatch):
    ordering, scope = combo
    want = expected_drains(ordering, scope)
    seen = []
    original = ShadowHooks.barrier

    def probe(self, site, form, bid, mask):
        # at the signal (the fence has run): the emulator's queue and the engine's ds counter
        if form == BarrierForm.SIGNAL:
            ws = self.engine._waves[self.wave]
            seen.append((not self.ctx.ds_queue, ws.done[Counter.DS] >= ws.seq[Counter.DS]))
        return original(self, site, form, bid, mask)

    monkeypatch.setattr(ShadowHooks, "barrier", probe)
    out = np.zeros(64, np.int32)
    report = _run_sanitized(_kernel(ordering, scope), out)
    assert seen == [(want, want)] * 2  # one signal per wave
    # round-robin: wave 0 reads wave 1's words first, before wave 1 flushes on its own load
    assert (out[:32] == 64 - np.arange(32)).all() == want
    assert ("LDS001" in {v.code for v in report.violations if v.severity == "error"}) == (not want)
