"""Fault table, barriers: a barrier under a partial exec mask, waves running different
barrier sequences, and cluster / named barriers are never run silently (issue 13).

Plain emulation raises `BarrierDivergenceError` exactly where the sanitizer reports LDS020
(one semantics); cluster and named barriers are refused at translation."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import BarrierDivergenceError, DeadlockError, UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..sanitizer.test_copies_e2e import PARAMS, sanitize_text
from .test_ops import module

WAVE_ID = """
      %c32 = arith.constant 32 : i32
      %w = arith.divsi %t, %c32 : i32
      %c0 = arith.constant 0 : i32
      %is0 = arith.cmpi eq, %w, %c0 : i32"""

# `if lane < 16: gpu.barrier()` — every wave reaches it with half its lanes
PARTIAL = """
      %c16 = arith.constant 16 : i32
      %lt = arith.cmpi slt, %t, %c16 : i32
      scf.if %lt {
        gpu.barrier loc("k.py":11:8)
      }"""
PARTIAL_SPLIT = """
      %c8 = arith.constant 8 : i32
      %lt = arith.cmpi sge, %t, %c8 : i32
      scf.if %lt {
        rocdl.s.barrier.signal id = -1 loc("k.py":12:8)
      }
      rocdl.s.barrier.wait id = -1 loc("k.py":13:4)"""
# barriers in a wave-divergent branch: wave 0 and wave 1 meet phase 0 at different barriers
BRANCH = WAVE_ID + """
      scf.if %is0 {
        gpu.barrier loc("k.py":11:8)
      } else {
        gpu.barrier loc("k.py":13:8)
      }"""
# wave 0 runs one more barrier than wave 1 before their common one: the phases skew
EXTRA = WAVE_ID + """
      scf.if %is0 {
        gpu.barrier loc("k.py":11:8)
      }
      gpu.barrier loc("k.py":13:4)"""
# a second signal before the wait
DOUBLE_SIGNAL = """
      rocdl.s.barrier.signal id = -1 loc("k.py":10:4)
      rocdl.s.barrier.signal id = -1 loc("k.py":11:4)
      rocdl.s.barrier.wait id = -1 loc("k.py":12:4)"""
# legal: wave 1 exits early (an ended wave drops out of barrier -1), wave 0 runs one more
EARLY_EXIT = WAVE_ID + """
      gpu.barrier loc("k.py":9:4)
      scf.if %is0 {
        gpu.barrier loc("k.py":11:8)
      }"""
# legal: one barrier op reached by every wave in a loop of uniform trip count
LOOPED = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c3 = arith.constant 3 : i32
      scf.for %i = %c0 to %c3 step %c1 : i32 {
        gpu.barrier loc("k.py":8:8)
      }"""


def _run(body: str, *, grid: int = 1, batch: int = 1, policy: str = "round-robin"):
    view = parse_module(module(body))
    run_kernel(view, "kern", grid=(grid, 1, 1), block=(64, 1, 1), args=[np.zeros(64 * grid, np.int32)],
               batch=batch, policy=policy)


@pytest.mark.parametrize("batch", [1, 2])
def test_barrier_under_a_partial_exec_mask_is_an_error(batch):
    with pytest.raises(BarrierDivergenceError) as info:
        _run(PARTIAL, grid=2, batch=batch)
    msg = str(info.value)
    assert "partial exec mask" in msg and "'gpu.barrier' at k.py:11:8" in msg, msg
    assert "lanes 0-15 at the barrier, lanes 16-31 not" in msg, msg


def test_split_signal_under_a_partial_exec_mask_is_an_error():
    with pytest.raises(BarrierDivergenceError, match=r"lanes 8-31 at the barrier, lanes 0-7 not") as info:
        _run(PARTIAL_SPLIT)
    assert "'rocdl.s.barrier.signal' at k.py:12:8" in str(info.value)


@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(3)"])
def test_waves_meeting_a_phase_at_different_barriers_is_an_error(policy):
    with pytest.raises(BarrierDivergenceError) as info:
        _run(BRANCH, policy=policy)
    msg = str(info.value)
    assert "different barrier sequences" in msg, msg
    assert "k.py:11:8" in msg and "k.py:13:8" in msg and "wave 0" in msg and "wave 1" in msg, msg


def test_a_wave_running_one_more_barrier_is_an_error():
    with pytest.raises(BarrierDivergenceError) as info:
        _run(EXTRA)
    msg = str(info.value)
    assert "barrier phase 0" in msg and "k.py:11:8" in msg and "k.py:13:4" in msg, msg


def test_a_second_signal_before_the_wait_is_an_error():
    with pytest.raises(BarrierDivergenceError, match=r"signals barrier -1 again in "
                       r"'rocdl.s.barrier.signal' at k.py:11:4 before waiting"):
        _run(DOUBLE_SIGNAL)


def test_barrier_divergence_is_a_deadlock_error():
    # a hang on hardware: callers that catch DeadlockError (campaign hang triage) catch it too
    assert issubclass(BarrierDivergenceError, DeadlockError)


@pytest.mark.parametrize("body", [EARLY_EXIT, LOOPED], ids=["early-exit", "looped"])
def test_legal_barrier_sequences_still_run(body):
    _run(body)
    _run(body, grid=2, batch=2)


@pytest.mark.parametrize("body, diverges", [
    (BRANCH, True), (EXTRA, True), (DOUBLE_SIGNAL, True), (EARLY_EXIT, False), (LOOPED, False),
], ids=["branch", "extra", "double-signal", "early-exit", "looped"])
def test_plain_error_exactly_where_the_sanitizer_reports_lds020(body, diverges):
    report = sanitize_text(module(body, PARAMS, 512))
    assert ("LDS020" in {v.code for v in report.violations}) == diverges, report.violations
    if diverges:
        with pytest.raises(BarrierDivergenceError):
            _run(body)
    else:
        _run(body)


def test_sanitizer_reports_a_partial_mask_barrier_as_lds020_with_the_lanes():
    report = sanitize_text(module(PARTIAL, PARAMS, 512))
    lds020 = [v for v in report.violations if v.code == "LDS020"]
    assert lds020 and set(lds020[0].lanes) == set(range(16)), report.violations


@pytest.mark.parametrize("op, bid, kind", [
    ("rocdl.s.barrier.signal", -3, "cluster barrier"),
    ("rocdl.s.barrier.wait", -3, "cluster barrier"),
    ("rocdl.s.barrier.signal", 1, "named barrier"),
    ("rocdl.s.barrier.wait", 1, "named barrier"),
])
@pytest.mark.parametrize("sanitized", [False, True], ids=["plain", "sanitized"])
def test_cluster_and_named_barriers_are_refused(op, bid, kind, sanitized):
    body = f"""
      {op} id = {bid} loc("k.py":21:4)"""
    with pytest.raises(UnsupportedOp) as info:
        if sanitized:
            sanitize_text(module(body, PARAMS, 512))
        else:
            _run(body)
    msg = str(info.value)
    assert f"'{op}' at k.py:21:4" in msg and f"barrier id {bid} ({kind})" in msg, msg
    # a cluster barrier runs only in a cluster launch (tests/emu/test_clusters.py)
    assert ("outside a cluster launch" if bid == -3 else "named and trap barriers are not modeled") in msg, msg
