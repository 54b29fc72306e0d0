"""Scheduler tests: every policy runs, a deadlock is reported (never hung), bad launches fail clearly."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import ALL_POLICIES, DeadlockError, Policy, StepBudgetExceeded
from ldssan.runtime.emu import runners
from ldssan.runtime.emu.launch import parse_module, run_kernel

from .test_ops import STORE_R, T, module, run

# Each wave stores its id, then reads its neighbour wave's slot after a barrier.
NEIGHBOUR = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c32 = arith.constant 32 : i32
      %c128 = arith.constant 128 : i32
      %pl = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %t, %pl : i32, !llvm.ptr<3>
      gpu.barrier
      %j0 = arith.addi %t, %c32 : i32
      %j = arith.remsi %j0, %c128 : i32
      %q = llvm.getelementptr %base[%j] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q : !llvm.ptr<3> -> i32""" + STORE_R


@pytest.mark.parametrize("policy", [str(p) for p in ALL_POLICIES])
def test_every_policy_runs_a_correct_kernel(policy):
    got = run(NEIGHBOUR, n=128, block=128, policy=policy)
    t = np.arange(128)
    np.testing.assert_array_equal(got, (t + 32) % 128)


def test_policies_order_waves_differently():
    # Without the barrier, the value read depends on which wave ran first.
    racy = NEIGHBOUR.replace("      gpu.barrier\n", "")
    rr = run(racy, n=128, block=128, policy="round-robin")
    rev = run(racy, n=128, block=128, policy="reverse")
    assert not np.array_equal(rr, rev)


def test_policy_parse_and_errors():
    assert Policy.parse("random(7)+early") == Policy("random", 7, "early")
    assert str(Policy.parse("rr")) == "round-robin"
    with pytest.raises(ValueError, match="unknown scheduler policy"):
        Policy.parse("fastest")


def test_deadlock_is_reported_with_each_wave_position():
    # Wave 0 skips the signal, then every wave waits: the phase can never complete.
    body = """
      %c32 = arith.constant 32 : i32
      %w = arith.divsi %t, %c32 : i32
      %c0 = arith.constant 0 : i32
      %not0 = arith.cmpi ne, %w, %c0 : i32
      scf.if %not0 {
        rocdl.s.barrier.signal id = -1 loc("k.py":10:4)
      }
      rocdl.s.barrier.wait id = -1 loc("k.py":11:4)"""
    with pytest.raises(DeadlockError) as info:
        run(body, block=64)
    msg = str(info.value)
    assert "wave 0: waiting at barrier -1" in msg and "wave 1: waiting at barrier -1" in msg
    assert "'rocdl.s.barrier.wait' at k.py:11:4" in msg
    assert "arrived [1] of live [0, 1]" in msg


def test_runaway_loop_exhausts_the_step_budget(monkeypatch):
    monkeypatch.setattr(runners, "STEP_BUDGET", 1000)
    body = """
      %c0 = arith.constant 0 : i32
      %w = scf.while (%x = %t) : (i32) -> (i32) {
        %go = arith.cmpi sge, %x, %c0 : i32
        scf.condition(%go) %x : i32
      } do {
      ^bb0(%y: i32):
        scf.yield %y : i32
      }"""
    with pytest.raises(StepBudgetExceeded, match="step budget exhausted"):
        run(body)


@pytest.mark.parametrize("grid, block, match", [
    ((1, 1, 1), (2048, 1, 1), "bad launch geometry"),
    ((0, 1, 1), (64, 1, 1), "bad launch geometry"),
])
def test_bad_launch_geometry_is_a_clear_error(grid, block, match):
    view = parse_module(module("      %r = arith.addi %t, %t : i32" + STORE_R))
    with pytest.raises(ValueError, match=match):
        run_kernel(view, "kern", grid=grid, block=block, args=[np.zeros(64, np.int32)])


def test_non_contiguous_argument_is_rejected():
    view = parse_module(module("      %r = arith.addi %t, %t : i32" + STORE_R))
    with pytest.raises(ValueError, match="C-contiguous"):
        run_kernel(view, "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[np.zeros(128, np.int32)[::2]])


def test_batched_workgroups_match_unbatched():
    body = """
      %b = gpu.block_id x
      %bi = arith.index_cast %b : index to i32
      %c64 = arith.constant 64 : i32
      %o = arith.muli %bi, %c64 : i32
      %i = arith.addi %o, %t : i32
      %r = arith.muli %i, %bi : i32
      %p = llvm.getelementptr %out[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""
    one = run(body, grid=3, batch=1)
    three = run(body, grid=3, batch=3)
    np.testing.assert_array_equal(one, three)
    np.testing.assert_array_equal(one[64:128], (T + 64) * 1)


SPIN = """
      %b = gpu.block_id x
      %bi = arith.index_cast %b : index to i32
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c42 = arith.constant 42 : i32
      %setter = arith.cmpi eq, %bi, %c{setter} : i32
      scf.if %setter {{
        llvm.store %c1, %src : i32, !llvm.ptr<1>
      }}
      %waiter = arith.cmpi eq, %bi, %c0 : i32
      scf.if %waiter {{
        %w = scf.while (%x = %c0) : (i32) -> (i32) {{
          %f = llvm.load %src : !llvm.ptr<1> -> i32
          %go = arith.cmpi eq, %f, %c0 : i32
          scf.condition(%go) %x : i32
        }} do {{
        ^bb0(%y: i32):
          scf.yield %y : i32
        }}
        %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %c42, %p : i32, !llvm.ptr<1>
      }}"""


def _spin(setter: int, resident: int, policy="round-robin"):
    out = np.zeros(64, np.int32)
    flag = np.zeros(1, np.int32)
    view = parse_module(module(SPIN.format(setter=setter), "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>"))
    run_kernel(view, "kern", grid=(2, 1, 1), block=(64, 1, 1), args=[out, flag], policy=policy,
               resident=resident)
    return out


@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(2)"])
def test_resident_workgroups_see_each_others_flags(policy):
    # workgroup 0 spins until workgroup 1 sets a flag: only works with both resident
    np.testing.assert_array_equal(_spin(setter=1, resident=2, policy=policy), 42)


def test_a_spin_that_never_ends_is_reported_not_hung(monkeypatch):
    from ldssan.runtime.emu import sched

    monkeypatch.setattr(sched, "SPIN_LIMIT", 2000)
    with pytest.raises(sched.SpinTimeout) as info:
        _spin(setter=1, resident=1)  # workgroup 1 never runs while workgroup 0 spins
    msg = str(info.value)
    assert "spin budget exhausted" in msg and "wave 0: running in 'scf.while'" in msg


# Two LDS tickets per lane with a counter wait (a yield point) between them, then a barrier
# and a third: the tickets give the order the waves ran in.
TICKETS = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c1 = arith.constant 1 : i32
      %c128 = arith.constant 128 : i32
      %c256 = arith.constant 256 : i32
      %a = llvm.atomicrmw add %base, %c1 monotonic : !llvm.ptr<3>, i32
      rocdl.s.wait.dscnt 0
      %b = llvm.atomicrmw add %base, %c1 monotonic : !llvm.ptr<3>, i32
      gpu.barrier
      %c = llvm.atomicrmw add %base, %c1 monotonic : !llvm.ptr<3>, i32
      %pa = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %a, %pa : i32, !llvm.ptr<1>
      %tb = arith.addi %t, %c128 : i32
      %pb = llvm.getelementptr %out[%tb] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %b, %pb : i32, !llvm.ptr<1>
      %tc = arith.addi %t, %c256 : i32
      %pc = llvm.getelementptr %out[%tc] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %c, %pc : i32, !llvm.ptr<1>"""


def _ticket_order(policy: str) -> list[tuple[int, int]]:
    got = run(TICKETS, n=384, block=128, policy=policy).reshape(3, 4, 32)  # (ticket, wave, lane)
    first = got[:, :, 0] - got.min()  # lane 0's tickets: one per (ticket, wave)
    return sorted(((int(first[k, w]), k, w) for k in range(3) for w in range(4)))


def test_canonical_policy_runs_each_half_phase_wave_by_wave():
    # MODEL.md section 5's order: (half-phase, wave, program order) -- wave 0's two tickets
    # before wave 1's first, whatever yield points sit in between; the barrier's half-phase after
    order = [(k, w) for _v, k, w in _ticket_order("canonical")]
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3),
                     (2, 0), (2, 1), (2, 2), (2, 3)]
    assert [(k, w) for _v, k, w in _ticket_order("round-robin")] != order  # the wait is a switch point
