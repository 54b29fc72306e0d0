"""Fault table, runaway loops: every loop form is bounded by a step budget and a time limit
(CPU seconds of emulation), and the error names the loop's source line and every wave's
position (issue 13)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ldssan.runtime.emu import EmulationTimeout, SpinTimeout, StepBudgetExceeded
from ldssan.runtime.emu import runners
from ldssan.runtime.emu import wave as wave_mod
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..sanitizer.test_copies_e2e import PARAMS, sanitize_text
from .test_ops import STORE_R, T, module

# sum of i for i in range(n): the probe of the issue with a uniform n = 2**31 - 1
UNIFORM_FOR = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %n = arith.constant {n} : i32
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%a = %c0) -> (i32) : i32 {{
        %b = arith.addi %a, %i : i32
        scf.yield %b : i32
      }} loc("k.py":7:4)""" + STORE_R  # STORE_R has no braces: safe to format

# per-lane trip count: lane t runs t + n iterations
DIVERGENT_FOR = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %n = arith.constant {n} : i32
      %ub = arith.addi %t, %n : i32
      %r = scf.for %i = %c0 to %ub step %c1 iter_args(%a = %c0) -> (i32) : i32 {{
        %b = arith.addi %a, %c1 : i32
        scf.yield %b : i32
      }} loc("k.py":9:4)""" + STORE_R  # STORE_R has no braces: safe to format

# while x < n: x += 1, with a uniform (c = 0) or per-lane (c = t) start
WHILE = """
      %c1 = arith.constant 1 : i32
      %n = arith.constant {n} : i32
      %start = {start}
      %r = scf.while (%x = %start) : (i32) -> (i32) {{
        %go = arith.cmpi slt, %x, %n : i32
        scf.condition(%go) %x : i32
      }} do {{
      ^bb0(%y: i32):
        %z = arith.addi %y, %c1 : i32
        scf.yield %z : i32
      }} loc("k.py":11:4)""" + STORE_R  # STORE_R has no braces: safe to format
UNIFORM_START = "arith.constant 0 : i32"
LANE_START = "arith.addi %t, %t : i32"


def _launch(body: str, block: int = 64, view=None):
    out = np.zeros(block, np.int32)
    view = view or parse_module(module(body))
    run_kernel(view, "kern", grid=(1, 1, 1), block=(block, 1, 1), args=[out])
    return out


def test_uniform_loop_of_2_31_iterations_fails_at_once_naming_the_loop():
    view = parse_module(module(UNIFORM_FOR.format(n=2**31 - 1)))
    t0 = time.process_time()
    with pytest.raises(StepBudgetExceeded) as info:
        _launch("", view=view)
    seconds = time.process_time() - t0
    msg = str(info.value)
    assert "2,147,483,647 iterations" in msg and "'scf.for' at k.py:7:4" in msg
    # every wave's position: wave 0 ran into the loop, wave 1 never started
    assert "wave 0: running in 'scf.for' at k.py:7:4" in msg and "wave 1: running in its first op" in msg
    assert seconds < 2, seconds  # refused before running, not after 50M iterations


def test_uniform_loops_within_the_budget_still_run():
    n = 3 * wave_mod.LONG_LOOP + 5  # long enough to be charged chunk by chunk
    out = _launch(UNIFORM_FOR.format(n=n))
    np.testing.assert_array_equal(out, np.int32(n * (n - 1) // 2))


def test_nested_uniform_loops_are_charged_per_entry(monkeypatch):
    # 10 entries of a 300-iteration loop: 3,010 steps, over a 3,000-step budget
    monkeypatch.setattr(runners, "STEP_BUDGET", 3000)
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c10 = arith.constant 10 : i32
      %c300 = arith.constant 300 : i32
      %r = scf.for %j = %c0 to %c10 step %c1 iter_args(%a = %c0) -> (i32) : i32 {
        %s = scf.for %i = %c0 to %c300 step %c1 iter_args(%b = %a) -> (i32) : i32 {
          %d = arith.addi %b, %c1 : i32
          scf.yield %d : i32
        } loc("k.py":21:8)
        scf.yield %s : i32
      } loc("k.py":20:4)""" + STORE_R
    with pytest.raises(StepBudgetExceeded, match=r"k\.py:21:8"):
        _launch(body, block=32)
    monkeypatch.setattr(runners, "STEP_BUDGET", 3010)
    np.testing.assert_array_equal(_launch(body, block=32), 3000)


@pytest.mark.parametrize("kind, body, where", [
    ("uniform for", UNIFORM_FOR.format(n=40_000_000), "k.py:7:4"),
    ("divergent for", DIVERGENT_FOR.format(n=40_000_000), "k.py:9:4"),
    ("uniform while", WHILE.format(n=40_000_000, start=UNIFORM_START), "k.py:11:4"),
    ("divergent while", WHILE.format(n=40_000_000, start=LANE_START), "k.py:11:4"),
], ids=["uniform-for", "divergent-for", "uniform-while", "divergent-while"])
def test_every_loop_form_stops_at_the_time_limit(monkeypatch, kind, body, where):
    # within the step budget, but far too long: the time guard (CPU seconds) stops it
    monkeypatch.setattr(runners, "TIME_LIMIT", 0.3)
    monkeypatch.setattr(runners, "STEP_BUDGET", 10**9)
    from ldssan.runtime.emu import sched

    monkeypatch.setattr(sched, "SPIN_LIMIT", 10**9)  # the while forms spin: time them, not the spin count
    t0 = time.process_time()
    with pytest.raises(EmulationTimeout) as info:
        _launch(body, block=32)
    seconds = time.process_time() - t0
    msg = str(info.value)
    assert "time limit exceeded" in msg and "0.3 s (CPU)" in msg and where in msg, msg
    assert "wave 0: running in" in msg
    assert seconds < 10, (kind, seconds)


@pytest.mark.parametrize("body", [
    DIVERGENT_FOR.format(n=5000),
    WHILE.format(n=5000, start=UNIFORM_START),
    WHILE.format(n=5000, start=LANE_START),
], ids=["divergent-for", "uniform-while", "divergent-while"])
def test_every_loop_form_exhausts_the_step_budget(monkeypatch, body):
    monkeypatch.setattr(runners, "STEP_BUDGET", 1000)
    from ldssan.runtime.emu import sched

    monkeypatch.setattr(sched, "SPIN_LIMIT", 10**9)
    with pytest.raises(StepBudgetExceeded, match="more than 1,000 loop iterations") as info:
        _launch(body, block=32)
    assert "'scf." in str(info.value) and "k.py:" in str(info.value)


def test_loops_under_the_budget_give_their_values():
    out = _launch(DIVERGENT_FOR.format(n=3))
    np.testing.assert_array_equal(out, T + 3)
    out = _launch(WHILE.format(n=70, start=LANE_START))
    np.testing.assert_array_equal(out, np.maximum(2 * T, 70))


def test_a_spin_wait_is_still_a_spin_timeout(monkeypatch):
    # a uniform while with no progress is a spin: SpinTimeout (a DeadlockError), as before
    body = WHILE.format(n=5, start=UNIFORM_START).replace("%z = arith.addi %y, %c1 : i32",
                                                          "%z = arith.addi %y, %c0s : i32")
    body = "      %c0s = arith.constant 0 : i32" + body
    from ldssan.runtime.emu import sched

    monkeypatch.setattr(sched, "SPIN_LIMIT", 500)
    with pytest.raises(SpinTimeout, match="spin budget exhausted"):
        _launch(body, block=32)


def test_sanitized_runaway_loop_is_an_error_not_a_hang():
    t0 = time.process_time()
    with pytest.raises(StepBudgetExceeded, match=r"'scf\.for' at k\.py:7:4"):
        sanitize_text(module(UNIFORM_FOR.format(n=2**31 - 1), PARAMS, 512))
    assert time.process_time() - t0 < 10  # instrumentation and translation included
