"""TDM multicast in a 2x1 cluster, end to end (FlyDSL kernel, virtual gfx1250, engines and
the cluster checker, decoded report): each workgroup loads its own 16x16 f32 tile with a
workgroup mask naming both workgroups, so the tile lands in both LDS; after
`tensor_wait(0)` and the cluster barrier each workgroup reads both tiles and writes their
sum; a second round refills the slots after a reuse cluster barrier. The clean kernel
matches numpy and is clean under every scheduler policy; the planted one-line bugs (the
cluster barrier replaced by a workgroup barrier; the tensor wait deleted; the reuse
cluster barrier deleted) are LDS014 naming the reading line and the peer's TDM line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import arith, gpu, range_constexpr, tdm_ops
from flydsl.expr.rocdl import cluster
from flydsl.expr.typing import T
from ldssan import hook
from ldssan.runtime.emu import ALL_POLICIES, emulate

TILE = 16  # a TILE x TILE f32 tile per workgroup
TILE_BYTES = TILE * TILE * 4
THREADS = 64  # two waves: both issue a half of the tile (num_warps=2)
PER_THREAD = TILE * TILE // THREADS
ROUNDS = 2  # the slots are refilled once: the second round needs the reuse cluster barrier


def _compile(bug: str, pattern: str = "split", early: bool = False):
    @flyc.kernel
    def mcast_sum(A: fx.Tensor, Out: fx.Tensor):
        wg = gpu.block_id("x")
        tid = fx.thread_idx.x
        arena = fx.SharedAllocator(static=False)
        arena.allocate(2 * TILE_BYTES)
        lds = arena.base_ptr
        addr0 = fx.Int32(fx.ptrtoint(lds))
        addr1 = addr0 + TILE_BYTES
        view = fx.Tensor(fx.make_view(fx.recast_iter(fx.Float32, lds), fx.make_layout((2 * TILE, TILE), (TILE, 1))))
        f32 = fx.PointerType.get(elem_ty=fx.Float32.ir_type, address_space=fx.AddressSpace.Shared, alignment=4)
        own = arith.shli(arith.constant(1, type=T.i32), arith.index_cast(T.i32, wg))
        for r in range_constexpr(ROUNDS):
            if r > 0 and bug not in ("no_reuse_barrier", "no_cluster_sync"):
                cluster.cluster_barrier()  # every workgroup read the slots before they are refilled
            # split: workgroup x's tile of round r goes to slot x of both workgroups' LDS (mask
            # 0b11); shared: both workgroups load both tiles with that mask (FlyDSL's cluster
            # GEMM form: every workgroup that shares a tile issues the same multicast)
            for x in range_constexpr(2 if pattern == "shared" else 1):
                slot = arith.index(x) if pattern == "shared" else wg
                desc = tdm_ops.make_tensor_descriptor_2d(
                    global_ptr=A, lds_memref=view, global_offset=((slot + 2 * r) * arith.index(TILE), arith.index(0)),
                    tensor_shape=(TILE, TILE), strides=(TILE, 1), tile_shape=(TILE, TILE), elem_bytes=4,
                    num_warps=THREADS // 32, workgroup_mask=own if bug == "own_mask" else 0b11,
                    lds_byte_offset=slot * arith.index(TILE_BYTES), early_timeout=early)
                tdm_ops.tensor_load_2d(desc)  # TDM
            if bug != "no_wait":
                tdm_ops.tensor_wait(0)
            if bug in ("no_cluster_barrier", "no_cluster_sync"):
                gpu.barrier()
            else:
                cluster.cluster_barrier()
            for k in range(PER_THREAD):
                e = (tid * PER_THREAD + k) * 4
                s = fx.ptr_load(fx.inttoptr(f32, addr0 + e)) + fx.ptr_load(fx.inttoptr(f32, addr1 + e))  # READ
                Out[(r * 2 + fx.block_idx.x) * (TILE * TILE) + tid * PER_THREAD + k] = s

    @flyc.jit
    def launch(A: fx.Tensor, Out: fx.Tensor):
        mcast_sum(A, Out).launch(grid=(2, 1, 1), block=(THREADS, 1, 1), smem=2 * TILE_BYTES, cluster=(2, 1, 1))

    return launch


def _run(bug: str, ctx, pattern: str = "split", early: bool = False):
    a = torch.arange(2 * ROUNDS * TILE * TILE, dtype=torch.float32).reshape(2 * ROUNDS * TILE, TILE) * 0.5 - 7.0
    out = torch.zeros(2 * ROUNDS * TILE * TILE, dtype=torch.float32)
    with ctx as results:
        _compile(bug, pattern, early)(a, out)
    return a, out, results


def _reference(a: torch.Tensor) -> np.ndarray:
    """In round r each workgroup writes tile 2r + tile 2r+1, elementwise (row-major)."""
    tiles = a.numpy().reshape(ROUNDS, 2, TILE * TILE)
    return np.concatenate([np.tile(t[0] + t[1], 2) for t in tiles])


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(text))


READ, TDM = _line_of("# READ"), _line_of("# TDM")


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=str)
def test_multicast_tiles_land_in_both_workgroups_and_the_kernel_is_clean(policy):
    a, out, results = _run("none", hook.sanitize(policy))
    np.testing.assert_array_equal(out.numpy(), _reference(a))
    assert not results.violations, results.violations


@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(3)+random"])
def test_every_workgroup_issuing_the_same_multicast_is_exact_and_clean(policy):
    a, out, results = _run("none", hook.sanitize(policy), pattern="shared")
    np.testing.assert_array_equal(out.numpy(), _reference(a))
    assert not results.violations, results.violations


def test_plain_emulation_matches_numpy_and_needs_the_multicast():
    a, out, _ = _run("none", emulate("random(1)"))
    np.testing.assert_array_equal(out.numpy(), _reference(a))
    # each workgroup loading its tile into its own LDS only: the peer's slot never arrives
    a, out, _ = _run("own_mask", emulate("round-robin"))
    assert not np.array_equal(out.numpy(), _reference(a))


CAUSES = {
    "no_cluster_barrier": "no barrier phase separates the two accesses",
    "no_reuse_barrier": "no barrier phase separates the two accesses",
    "no_wait": "the async/TDM copy had no covering s_wait_asynccnt/s_wait_tensorcnt before this access",
}


@pytest.mark.parametrize("bug", sorted(CAUSES))
def test_planted_bug_is_lds014_with_the_reading_and_the_issuing_line(bug):
    verdicts = set()
    for policy in ("round-robin", "reverse", "random(3)+random"):
        _a, _out, results = _run(bug, hook.sanitize(policy))
        found = [v for v in results.violations if v.code == "LDS014"]
        assert found, results.violations
        for v in found:
            assert (v.site.line, v.other_site.line, v.message) == (READ, TDM, CAUSES[bug]), v
            assert "cluster_barrier" in v.fix
        verdicts.add(frozenset((v.code, v.site.line, v.other_site and v.other_site.line, v.message, v.count,
                                v.lds_range, frozenset(v.waves), frozenset(v.lanes)) for v in results.violations))
    assert len(verdicts) == 1, verdicts  # the same report under every schedule


# Merged requests (docs/memory-model.md): when every workgroup sharing a tile issues the same
# multicast ("shared"), each one's own tensor wait covers the tile in its own LDS, so reading
# it after the wait and a *workgroup* barrier is ordered (FlyDSL's and aiter's cluster GEMMs,
# IREE Wave's multicast pipelines). With the early-timeout bit clear the loads rendezvous, so
# workgroup barriers alone are enough; with it set a late peer re-sends the tile, so a cluster
# barrier must keep the rounds together; a missing wait is a race either way.
@pytest.mark.parametrize("early", [False, True], ids=["rendezvous", "early-timeout"])
@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(3)+random"])
def test_merged_request_is_published_by_the_readers_own_wait_and_workgroup_barrier(policy, early):
    a, out, results = _run("no_cluster_barrier", hook.sanitize(policy), pattern="shared", early=early)
    np.testing.assert_array_equal(out.numpy(), _reference(a))
    assert not results.violations, results.violations


def test_a_rendezvous_needs_no_cluster_barrier_at_all():
    a, out, results = _run("no_cluster_sync", hook.sanitize("reverse"), pattern="shared")
    np.testing.assert_array_equal(out.numpy(), _reference(a))
    assert not results.violations, results.violations


# no_cluster_sync: workgroup barriers only. A workgroup may then run a round ahead, and a
# late peer's re-send of round 0 can land on its round-1 tile. A rendezvous is the reader's
# own request, so its missing wait is the reader's own LDS010 against the same TDM line.
@pytest.mark.parametrize("bug, early, rule", [("no_wait", False, "LDS010"), ("no_wait", True, "LDS014"),
                                              ("no_cluster_sync", True, "LDS014")])
def test_merged_request_still_needs_the_wait_and_a_cluster_barrier_between_early_rounds(bug, early, rule):
    for policy in ("round-robin", "reverse", "random(3)+random"):
        _a, _out, results = _run(bug, hook.sanitize(policy), pattern="shared", early=early)
        found = [v for v in results.violations if v.code == rule]
        assert found, results.violations
        assert all((v.site.line, v.other_site.line) == (READ, TDM) for v in found), found
