"""Batched workgroups whose sync streams part: a wait, ds op or barrier under a condition that
differs across workgroups, a persistent loop that one workgroup leaves before the others.
The batch's engine splits at each such event into the workgroups it reaches and the others
(`runtime/emu/split.py`), so every report is the report of the workgroups run one by one;
the emulation runs on batched (a TDM op is issued only by the waves that reach it), and a
loop a workgroup could spin in waiting on one that left it is not batched."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu.launch import AUTO, parse_module, run_kernel
from ldssan.runtime.emu.uniformity import lockstep_refusal

from .sanitized import sanitize_mlir
from .test_copies_wmma import _tdm_body
from .test_lockstep import WORK_LOOP
from .test_ops import module

# each lane's LDS word (%q) and its workgroup id (%b)
LANE_SLOT = """
      %c32 = arith.constant 32 : i32
      %c64 = arith.constant 64 : i32
      %bx = gpu.block_id x
      %b = arith.index_cast %bx : index to i32
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %q = llvm.getelementptr %lds[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32"""

# every lane stores its id to LDS; some workgroups wait for their stores (dscnt) before a bare
# split barrier (which does not wait for them), then each lane reads a word of the other wave
PARTED = """
      %c0 = arith.constant 0 : i32""" + LANE_SLOT + """
      llvm.store %t, %q : i32, !llvm.ptr<3>
{sync}
      rocdl.s.barrier.signal id = -1
      rocdl.s.barrier.wait id = -1
      %u = arith.addi %t, %c32 : i32
      %o = arith.remsi %u, %c64 : i32
      %q2 = llvm.getelementptr %lds[%o] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q2 : !llvm.ptr<3> -> i32
      %g = arith.muli %b, %c64 : i32
      %gi = arith.addi %g, %t : i32
      %p = llvm.getelementptr %out[%gi] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""

SYNCS = {
    # workgroup 0 waits, workgroup 1 does not: a race in workgroup 1 only
    "wait_in_one": (
        """      %is0 = arith.cmpi eq, %b, %c0 : i32
      scf.if %is0 {
        rocdl.s.wait.dscnt 0
      }""", {1}),
    # workgroup 0 issues one more ds store, then every workgroup leaves one ds op outstanding:
    # in workgroup 0 that is the extra store, in workgroup 1 the store the barrier publishes
    "extra_store_in_one": (
        """      %is0 = arith.cmpi eq, %b, %c0 : i32
      scf.if %is0 {
        %x = arith.addi %t, %c64 : i32
        %qx = llvm.getelementptr %lds[%x] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
        llvm.store %t, %qx : i32, !llvm.ptr<3>
      }
      rocdl.s.wait.dscnt 1""", {1}),
    # both wait, at different sites: clean
    "waits_apart": (
        """      %is0 = arith.cmpi eq, %b, %c0 : i32
      scf.if %is0 {
        rocdl.s.wait.dscnt 0
      } else {
        rocdl.s.wait.dscnt 0
      }""", set()),
}


def _races(report):
    return sorted((v.code, tuple(sorted(v.workgroups)), v.site.line, v.other_site.line if v.other_site else None)
                  for v in report.violations if v.code.startswith("LDS00"))


def _sanitized(text, **launch):
    return sanitize_mlir(text, [np.zeros(128, np.int32)], grid=(2, 1, 1), **launch)


@pytest.mark.parametrize("name", list(SYNCS))
@pytest.mark.parametrize("policy", ["lockstep", "round-robin"])
def test_batched_reports_are_the_one_by_one_reports(name, policy):
    sync, racy = SYNCS[name]
    text = module(PARTED.format(sync=sync), "%out: !llvm.ptr<1>", 512)
    alone = _races(_sanitized(text, policy=policy, batch=1))
    together = _races(_sanitized(text, policy=policy, batch=2))
    assert together == alone
    assert {g for _c, groups, _l, _o in alone for g in groups} == racy, alone


def test_a_batch_splits_only_where_the_streams_part():
    from ldssan.runtime.emu import split as S

    parted = []
    real = S.BatchSplit.refine

    def refine(self, part, reached):
        parted.append(len(part.log))
        return real(self, part, reached)

    S.BatchSplit.refine = refine
    try:
        for name, (sync, _racy) in SYNCS.items():
            _sanitized(module(PARTED.format(sync=sync), "%out: !llvm.ptr<1>", 512), policy="lockstep", batch=2)
        same = "      rocdl.s.wait.dscnt 0"  # every workgroup waits: one stream
        _sanitized(module(PARTED.format(sync=same), "%out: !llvm.ptr<1>", 512), policy="lockstep", batch=2)
    finally:
        S.BatchSplit.refine = real
    # each parted kernel split once, after the events every workgroup had in common
    assert len(parted) == len(SYNCS) and all(n > 0 for n in parted), parted


def test_a_work_loop_left_unevenly_has_the_one_by_one_reports():
    text = module(WORK_LOOP, "%out: !llvm.ptr<1>", 512)
    want = sanitize_mlir(text, [np.zeros(32, np.int32)], grid=(3, 1, 1), policy="round-robin")
    got = sanitize_mlir(text, [np.zeros(32, np.int32)], grid=(3, 1, 1), policy="lockstep", batch=AUTO)
    assert sorted(map(str, got.violations)) == sorted(map(str, want.violations)) == []


# the work loop, and after it lane 0 of each workgroup marks out[20 + workgroup] in global memory
WORK_LOOP_THEN_STORE = WORK_LOOP + """
      %bx = gpu.block_id x
      %b = arith.index_cast %bx : index to i32
      %c20 = arith.constant 20 : i32
      %slot = arith.addi %b, %c20 : i32
      %pm = llvm.getelementptr %out[%slot] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      scf.if %lead {
        llvm.store %c1, %pm : i32, !llvm.ptr<1>
      }"""

# workgroups 1.. spin until workgroup 0 sets out[31], which it does after their loop in
# program order: batched, they would spin with workgroup 0 held behind the loop
_SPIN = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c31 = arith.constant 31 : i32
      %bx = gpu.block_id x
      %b = arith.index_cast %bx : index to i32
      %flag = llvm.getelementptr %out[%c31] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %waiter = arith.cmpi ne, %b, %c0 : i32
      scf.if %waiter {
        %n = scf.while (%k = %c0) : (i32) -> (i32) {
          %f = llvm.load volatile %flag : !llvm.ptr<1> -> i32
          %go = arith.cmpi eq, %f, %c0 : i32
          scf.condition(%go) %k : i32
        } do {
        ^bb0(%k2: i32):
          %k3 = arith.addi %k2, %c1 : i32
          scf.yield %k3 : i32
        }
      }"""
CROSS_SPIN = _SPIN + """
      %setter = arith.cmpi eq, %b, %c0 : i32
      scf.if %setter {
        llvm.store %c1, %flag : i32, !llvm.ptr<1>
      }
      %p = llvm.getelementptr %out[%b] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %c1, %p : i32, !llvm.ptr<1>"""
# the flag set on the if's other side: lockstep runs the then side (the spin) first
CROSS_SPIN_ELSE = _SPIN.removesuffix("\n      }") + """
      } else {
        llvm.store %c1, %flag : i32, !llvm.ptr<1>
      }"""


@pytest.mark.parametrize("body", [WORK_LOOP_THEN_STORE, CROSS_SPIN, CROSS_SPIN_ELSE],
                         ids=["store-after", "cross-spin", "cross-spin-else"])
def test_a_loop_another_workgroup_may_spin_in_is_not_batched(body):
    blocks = parse_module(module(body)).functions["kern"].body
    why = lockstep_refusal(blocks, batched=True)
    assert why is not None and "outside LDS after it" in why, why
    assert lockstep_refusal(blocks, batched=False) is None  # each workgroup still runs in lockstep
    outs = {}
    for policy in ("round-robin", "lockstep"):
        out = np.zeros(32, np.int32)
        launcher = run_kernel(parse_module(module(body)), "kern", grid=(3, 1, 1), block=(64, 1, 1), args=[out],
                              policy=policy, resident=3, batch=AUTO)
        rec = launcher.records[0]
        assert rec.policy == policy and rec.batch == 1
        if policy == "lockstep":
            assert "outside LDS after it" in rec.stats["lockstep_batch_refused"]
        outs[policy] = out
    np.testing.assert_array_equal(outs["lockstep"], outs["round-robin"])


def test_a_tdm_op_is_issued_only_by_the_workgroups_that_reach_it():
    # the copy sits under `if wave 0 and workgroup 0`: workgroup 1 reads its LDS unwritten
    body = _tdm_body(True).replace(
        "%wave0 = arith.cmpi slt, %t, %c32i : i32", """%w0 = arith.cmpi slt, %t, %c32i : i32
      %bx = gpu.block_id x
      %bi = arith.index_cast %bx : index to i32
      %b0 = arith.cmpi eq, %bi, %c0 : i32
      %wave0 = arith.andi %w0, %b0 : i1""")
    text = module(body, "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", 512)
    src = np.arange(100, 124, dtype=np.int32)
    outs = {}
    for policy, batch in (("lockstep", 2), ("round-robin", 2)):
        out = np.zeros(64, np.int32)
        launcher = run_kernel(parse_module(text), "kern", grid=(2, 1, 1), block=(64, 1, 1), args=[out, src],
                              policy=policy, batch=batch)
        assert launcher.records[0].batch == batch
        outs[policy, batch] = out
    # both workgroups store to out[t], workgroup 1's lanes last: what its fresh LDS held
    for out in outs.values():
        assert (out == -1).all(), out


def _moe_case(name):
    from ldssan.kernels import mega_moe as M
    from ldssan.variants import load_variant

    from ..sanitizer.test_mega_moe_bugs import BUGS

    return M if name == "clean" else load_variant(M, BUGS[name][0], tag=name)


def _moe_bug_names():
    from ..sanitizer.test_mega_moe_bugs import BUGS

    # tile_word_in_a_ring_slot reads its next work item out of a TDM tile: with 3 workgroups
    # that data keeps the loop going past the time limit under the per-wave scheduler
    return ["clean", *(name for name in BUGS if name != "tile_word_in_a_ring_slot")]


@pytest.mark.parametrize("name", _moe_bug_names())
def test_mega_moe_with_workgroups_leaving_the_work_loop_apart(name):
    """3 persistent workgroups share the work items unevenly: the batch splits in the last
    round, and the reports are those of the workgroups in lockstep one by one (interleaved);
    the clean kernel's output is the per-wave scheduler's."""
    import torch

    from ldssan import hook
    from ldssan.runtime.emu import frontend

    from ..sanitizer.test_mega_moe_bugs import _inputs
    from .test_lockstep import _reports

    mod = _moe_case(name)
    args = _inputs()
    got, launches = {}, {}
    for policy, batch in (("lockstep", 1), ("lockstep", "auto"), ("round-robin", 1)):
        if policy == "round-robin" and name != "clean":
            continue  # a race's data steers the route kernel's later work differently per schedule
        with hook.sanitize(policy, resident=3, batch=batch) as col:
            out = mod.mega_moe(*args, persistent=3)
            launches[batch] = list(frontend.current().launches)
        got[policy, batch] = (_reports(col.violations), out)
    assert got["lockstep", "auto"][0] == got["lockstep", 1][0]
    assert bool(got["lockstep", "auto"][0]) == (name != "clean")
    gemms = [r for r in launches["auto"] if r.kernel.startswith("moe_gemm")]
    assert all(r.batch == 3 for r in gemms), gemms
    assert any(r.stats.get("split_batches") for r in gemms), gemms
    if name == "clean":
        assert got["round-robin", 1][0] == []
        assert torch.equal(got["lockstep", "auto"][1], got["round-robin", 1][1])


# a grid-stride loop, `for row in range(block_id, 10, 4)` as FlyDSL's persistent kernels run
# it: workgroups 0-1 make 3 trips, 2-3 make 2. Each trip stores to LDS and reads the other
# wave's word; {sync} is the barrier between (nothing: a race in every trip)
GRID_STRIDE = """
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %c10 = arith.constant 10 : i32""" + LANE_SLOT + """
      %u = arith.addi %t, %c32 : i32
      %o = arith.remsi %u, %c64 : i32
      %q2 = llvm.getelementptr %lds[%o] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %last = scf.while (%x = %b) : (i32) -> (i32) {
        %go = arith.cmpi slt, %x, %c10 : i32
        scf.condition(%go) %x : i32
      } do {
      ^bb0(%y: i32):
        llvm.store %y, %q : i32, !llvm.ptr<3>
{sync}
        %v = llvm.load %q2 : !llvm.ptr<3> -> i32
        gpu.barrier
        %nx = arith.addi %y, %c4 : i32
        scf.yield %nx : i32
      }
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %last, %p : i32, !llvm.ptr<1>"""


@pytest.fixture
def parts_at_finish(monkeypatch) -> list:
    """The workgroups (positions) of each part of every batch that split, at its end."""
    from ldssan.runtime.emu import split as S

    parts = []
    real = S.BatchSplit.finish
    monkeypatch.setattr(S.BatchSplit, "finish",
                        lambda self: (len(self.parts) > 1 and parts.append([p.ks.tolist() for p in self.parts])) or real(self))
    return parts


def _grid_stride_races(racy: bool, batch: int) -> list:
    text = module(GRID_STRIDE.replace("{sync}", "" if racy else "        gpu.barrier"), "%out: !llvm.ptr<1>", 512)
    return _races(sanitize_mlir(text, [np.zeros(128, np.int32)], grid=(4, 1, 1), policy="lockstep", batch=batch))


@pytest.mark.parametrize("racy", [False, True])
def test_a_grid_stride_loop_parts_the_batch_in_two(racy, parts_at_finish):
    """The workgroups that leave the loop a trip early part from the others once, into two
    engines (one per trip count), not one per workgroup; the reports are the one-by-one
    reports."""
    parts = parts_at_finish
    alone = _grid_stride_races(racy, batch=1)
    together = _grid_stride_races(racy, batch=4)
    assert together == alone
    assert parts == [[[0, 1], [2, 3]]], parts
    assert bool(alone) == racy and (not racy or {g for _c, gs, _l, _o in alone for g in gs} == {0, 1, 2, 3}), alone


def test_a_part_past_the_log_bound_splits_per_workgroup(monkeypatch, parts_at_finish):
    """A part whose event log outgrows `LOG_BYTES` splits into one engine per workgroup (which
    log nothing), and still reports what the workgroups run one by one report."""
    from ldssan.runtime.emu import split as S

    monkeypatch.setattr(S, "LOG_BYTES", 20 * S.ENTRY_BYTES)
    alone = _grid_stride_races(True, batch=1)
    together = _grid_stride_races(True, batch=4)
    assert parts_at_finish == [[[0], [1], [2], [3]]], parts_at_finish
    assert together == alone and alone
