"""`plan.plan_launch` on its own: how a launch runs (strategy, lockstep, batch, workgroups per
run) and why, from the launch's geometry and options, with the kernel's lockstep verdict
given by a stand-in oracle: no kernel is translated or run, except in the last tests, which
check that a launch runs the plan it records."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ldssan.runtime.emu.launch import parse_module, run_kernel
from ldssan.runtime.emu.plan import (AUTO, CLUSTER_REFUSAL, LANE_BUDGET, TAINT_REFUSAL, Geometry, Strategy,
                                     auto_batch, plan_launch)
from ldssan.runtime.emu.sched import Policy

from .test_ops import STORE_R, module

LOCKSTEP = Policy.parse("lockstep")
RR = Policy.parse("round-robin")
LOOP = "a while loop with a barrier steered by workgroup data"


def geometry(groups: int = 64, threads: int = 256, lds: int = 4096, cluster=None) -> Geometry:
    return Geometry("kern", (groups, 1, 1), (threads, 1, 1), 0, lds, {}, cluster)


class Oracle:
    """The kernel's lockstep verdicts (`refused[batched]`), and the questions asked."""

    def __init__(self, batched: str | None = None, single: str | None = None):
        self.refused = {True: batched, False: single}
        self.asked: list[bool] = []

    def __call__(self, batched: bool) -> str | None:
        self.asked.append(batched)
        return self.refused[batched]


def plan(geom=None, *, policy=LOCKSTEP, batch=AUTO, resident=1, taint=False, oracle=None):
    oracle = oracle if oracle is not None else Oracle()
    return plan_launch(geom or geometry(), policy=policy, batch=batch, resident=resident, taint=taint,
                       lockstep_refusal=oracle), oracle


def test_the_geometry_counts_threads_waves_workgroups_and_cluster_size():
    g = geometry(groups=6, threads=65, cluster=(2, 1, 1))
    assert (g.n_threads, g.n_waves, g.n_groups, g.cluster_size) == (65, 3, 6, 2)
    assert geometry().cluster_size == 1


def test_a_lockstep_kernel_runs_batched_within_the_lane_budget():
    per = LANE_BUDGET // (32 * 8)  # workgroups of 8 waves within the lane budget
    got, oracle = plan(geometry(groups=4 * per))
    assert got.strategy is Strategy.LOCKSTEP and got.lockstep and got.lockstep_batched
    assert got.batch == auto_batch(4 * per, 8, 4096) == per
    assert got.policy == LOCKSTEP and got.per_run == 1
    assert oracle.asked == [True]  # one question: the batched translation
    assert (got.lockstep_refused, got.lockstep_batch_refused) == (None, None)


def test_a_kernel_refused_across_workgroups_runs_one_workgroup_per_lockstep_context():
    got, oracle = plan(oracle=Oracle(batched=LOOP))
    assert got.strategy is Strategy.LOCKSTEP and got.lockstep and not got.lockstep_batched
    assert got.batch == 1 and got.lockstep_batch_refused == LOOP and got.lockstep_refused is None
    assert oracle.asked == [True, False]
    assert LOOP in got.why("batch")


def test_a_kernel_refused_in_lockstep_runs_per_wave_under_the_per_wave_policy():
    got, oracle = plan(oracle=Oracle(batched=LOOP, single="a spin-wait"))
    assert got.strategy is Strategy.BATCHES and not got.lockstep
    assert got.policy == RR and got.batch == 1
    assert (got.lockstep_refused, got.lockstep_batch_refused) == ("a spin-wait", LOOP)
    assert got.why("lockstep") == "a spin-wait"


def test_an_asked_batch_is_kept_when_lockstep_is_refused():
    # per-wave runs batch when asked (they re-run a diverging chunk one by one); the
    # unbatched lockstep translation is not tried: the user asked for workgroups side by side
    got, oracle = plan(batch=4, oracle=Oracle(batched=LOOP))
    assert got.strategy is Strategy.BATCHES and got.batch == 4 and got.policy == RR
    assert oracle.asked == [True] and got.lockstep_refused == LOOP and got.lockstep_batch_refused is None


@pytest.mark.parametrize("batch, want", [(AUTO, 1), (3, 3)])
def test_a_per_wave_policy_batches_only_when_asked_and_never_asks_the_kernel(batch, want):
    got, oracle = plan(policy=RR, batch=batch)
    assert got.strategy is Strategy.BATCHES and got.batch == want and got.policy == RR
    assert oracle.asked == [] and got.lockstep_refused is None


@pytest.mark.parametrize("policy", [LOCKSTEP, RR])
@pytest.mark.parametrize("resident, per_run", [(1, 1), (4, 2), (16, 8)])
def test_a_cluster_launch_runs_whole_clusters_per_wave(policy, resident, per_run):
    got, oracle = plan(geometry(cluster=(2, 1, 1)), policy=policy, resident=resident)
    assert got.strategy is Strategy.CLUSTERS and got.per_run == per_run
    assert not got.lockstep and got.batch == 1 and got.policy == RR and oracle.asked == []
    assert got.lockstep_refused == (CLUSTER_REFUSAL if policy.lockstep else None)


def test_resident_workgroups_run_interleaved_per_wave():
    got, _ = plan(policy=RR, batch=4, resident=3)
    assert got.strategy is Strategy.RESIDENT and got.per_run == 3 and not got.lockstep and got.batch == 1


def test_resident_workgroups_refused_across_workgroups_run_as_interleaved_lockstep_contexts():
    got, oracle = plan(resident=2, oracle=Oracle(batched=LOOP))
    assert got.strategy is Strategy.RESIDENT and got.lockstep and not got.lockstep_batched
    assert got.per_run == 2 and got.policy == LOCKSTEP and oracle.asked == [True, False]


def test_resident_workgroups_share_a_lockstep_batch():
    # workgroups of 1024 threads: the auto batch (`per`), cut to a multiple of resident=3, so
    # workgroups that wait on one another run side by side
    per = LANE_BUDGET // (32 * 32)
    assert per % 3, "the budget must leave a cut to make"
    got, _ = plan(geometry(groups=per + 4, threads=1024), resident=3)
    assert auto_batch(per + 4, 32, 4096) == per
    cut = per - per % 3
    assert got.strategy is Strategy.LOCKSTEP and got.batch == cut and got.per_run == 1
    assert [d.value for d in got.decisions if d.what == "batch"] == [per, cut] and "resident=3" in got.why("batch")


def test_a_lockstep_batch_holding_the_whole_grid_needs_no_resident_workgroups():
    got, _ = plan(geometry(groups=4), resident=2)
    assert got.strategy is Strategy.LOCKSTEP and got.batch == 4 and got.per_run == 1


def test_taint_runs_per_wave_without_asking_the_kernel():
    got, oracle = plan(taint=True)
    assert got.strategy is Strategy.BATCHES and not got.lockstep and got.policy == RR
    assert oracle.asked == [] and got.lockstep_refused == TAINT_REFUSAL == got.lockstep_batch_refused


def test_the_plan_is_frozen_and_every_decision_has_a_reason():
    got, _ = plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.batch = 2
    assert {d.what for d in got.decisions} == {"batch", "lockstep", "strategy"}
    assert all(d.why for d in got.decisions)


# -- a launch runs its plan ------------------------------------------------------------------------

NEIGHBOUR = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %pl = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %t, %pl : i32, !llvm.ptr<3>
      gpu.barrier
      %c32 = arith.constant 32 : i32
      %c64 = arith.constant 64 : i32
      %j0 = arith.addi %t, %c32 : i32
      %j = arith.remsi %j0, %c64 : i32
      %q = llvm.getelementptr %base[%j] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q : !llvm.ptr<3> -> i32""" + STORE_R


@pytest.mark.parametrize("options, strategy, batch", [
    ({"policy": "lockstep", "batch": AUTO}, Strategy.LOCKSTEP, 4),
    ({"policy": "round-robin", "batch": 2}, Strategy.BATCHES, 2),
    ({"policy": "round-robin", "resident": 2}, Strategy.RESIDENT, 1),
    ({"policy": "round-robin", "cluster": (2, 1, 1)}, Strategy.CLUSTERS, 1),
])
def test_a_launch_records_the_plan_it_ran(options, strategy, batch):
    out = np.zeros(64, dtype=np.int32)  # every workgroup writes the same 64 values
    launcher = run_kernel(parse_module(module(NEIGHBOUR)), "kern", grid=(4, 1, 1), block=(64, 1, 1),
                          args=[out], **options)
    rec = launcher.records[0]
    assert rec.plan.strategy is strategy and rec.batch == batch
    assert rec.policy == str(rec.plan.policy)
    np.testing.assert_array_equal(out, (np.arange(64) + 32) % 64)
