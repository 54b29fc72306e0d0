"""FlyDSL's warp collectives (flydsl.extension.coop: reductions, scans, broadcast,
segmented and batched reductions, WarpExchange, warp merge and bitonic sorts) on the
virtual gfx1250 at every logical width, in a two-wave workgroup, sanitized under several
scheduler policies: exact against torch per logical warp, zero violations.

Widths below 32 run `gpu.shuffle` with width < 32 (issue #10 item 4)."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx

from .harness import (TORCH_OF, assert_equal, block_launcher, check_clean, read_blocked, sample,
                      to_striped, type_id, wrap, write_blocked)

C = fx.coop
BLOCK = 64  # two waves, so a logical warp's lanes and the other wave's never mix
WIDTHS = [32, 16, 8, 4, 2]


def _groups(x: torch.Tensor, width: int) -> torch.Tensor:
    return x.reshape(-1, width)


def _per_lane(per_group: torch.Tensor, width: int) -> torch.Tensor:
    return per_group.reshape(-1, 1).expand(-1, width).reshape(-1)


def check_reductions_and_scans(dtype, width: int) -> None:
    """warp_sum, warp_max and warp_scan_with_aggregate (seeded) in one kernel."""
    init = 3

    def body(tid, A, _B, Out, _OB):
        x = dtype(A[tid])
        Out[tid] = C.warp_sum(x, width=width)
        Out[BLOCK + tid] = C.warp_max(x, width=width)
        inclusive, exclusive, aggregate = C.warp_scan_with_aggregate(
            x, fx.ReductionOp.ADD, width=width, init=dtype(init))
        Out[2 * BLOCK + tid] = inclusive
        Out[3 * BLOCK + tid] = exclusive
        Out[4 * BLOCK + tid] = aggregate

    x = sample(dtype, BLOCK, seed=width)
    groups = _groups(x.double() if x.is_floating_point() else x.long(), width)
    inclusive = groups.cumsum(1) + init
    want = torch.cat([_per_lane(groups.sum(1), width), _per_lane(groups.max(1).values, width),
                      inclusive.reshape(-1), (inclusive - groups).reshape(-1),
                      _per_lane(groups.sum(1), width)])
    want = wrap(want, x.dtype)

    check_clean(block_launcher(BLOCK, body), [x], [torch.zeros(5 * BLOCK, dtype=x.dtype)],
                lambda outs, policy: assert_equal(outs[0], want, policy))


@pytest.mark.parametrize("width", WIDTHS)
def test_warp_reductions_and_scans(width):
    check_reductions_and_scans(fx.Int32, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_warp_broadcast(width):
    """A uniform source lane, and a per-lane source; both relative to the logical warp."""

    def body(tid, A, _B, Out, _OB):
        lane = tid % width
        Out[tid] = C.warp_broadcast(A[tid], 3 % width, width=width)
        Out[BLOCK + tid] = C.warp_broadcast(A[tid], (lane * 5 + 1) % width, width=width)

    x = sample(fx.Int32, BLOCK, seed=11)
    groups = _groups(x, width)
    per_lane_source = (torch.arange(width) * 5 + 1) % width
    want = torch.cat([_per_lane(groups[:, 3 % width], width), groups[:, per_lane_source].reshape(-1)])

    check_clean(block_launcher(BLOCK, body), [x], [torch.zeros(2 * BLOCK, dtype=x.dtype)],
                lambda outs, policy: assert_equal(outs[0], want, policy))


@pytest.mark.parametrize("width", [32, 8])
def test_warp_segmented_and_batched_reductions(width):
    """Head-segmented sums (every third lane starts a segment) and a two-batch reduction
    (lane i of each logical warp owns batch i)."""

    def body(tid, A, B, Out, _OB):
        lane = tid % width
        head = (lane % 3 == 0).select(fx.Int32(1), fx.Int32(0))
        Out[tid] = C.warp_head_segmented_sum(A[tid], head, width=width)
        Out[BLOCK + tid] = C.warp_sum_batched([A[tid], B[tid]], width=width)

    a, b = sample(fx.Int32, BLOCK, seed=5), sample(fx.Int32, BLOCK, seed=6)
    lanes = torch.arange(BLOCK) % width
    heads = lanes % 3 == 0
    segment = torch.cumsum(heads.long(), 0) - 1  # each segment numbered block-wide
    seg_sums = torch.zeros(int(segment.max()) + 1, dtype=torch.int64).index_add_(0, segment, a.long())
    batched = torch.stack([_groups(a, width).sum(1), _groups(b, width).sum(1)], 1)  # [group, batch]

    def expect(outs, policy):
        got = outs[0]
        # Only a segment's head lane and a batch's owner lane hold specified results.
        assert_equal(got[:BLOCK][heads], seg_sums[segment[heads]].int(), policy)
        owners = lanes < 2
        assert_equal(got[BLOCK:][owners], batched.reshape(-1).int(), policy)

    check_clean(block_launcher(BLOCK, body), [a, b], [torch.zeros(2 * BLOCK, dtype=a.dtype)], expect)


@pytest.mark.parametrize("algorithm, width, items", [(C.WarpExchangeAlgorithm.SHARED, 8, 3),
                                                     (C.WarpExchangeAlgorithm.SHARED, 32, 2),
                                                     (C.WarpExchangeAlgorithm.SHUFFLE, 4, 4)],
                         ids=["SHARED-w8", "SHARED-w32", "SHUFFLE-w4"])
def test_warp_exchange_round_trip(algorithm, width, items):
    def body(tid, A, _B, Striped, Back):
        ex = C.WarpExchange[fx.Int32, width, items, algorithm]
        # one scratch per logical warp, as the SHARED policy requires
        scratch = fx.SharedAllocator().allocate(fx.Array[ex.SharedStorage, BLOCK // width]).peek()
        storage = scratch[tid // width]
        striped = ex.blocked_to_striped(read_blocked(A, tid, items), storage=storage)
        write_blocked(Striped, tid, items, striped)
        fx.barrier()
        write_blocked(Back, tid, items, ex.striped_to_blocked(striped, storage=storage))

    x = sample(fx.Int32, BLOCK * items, seed=width + items)

    def expect(outs, policy):
        assert_equal(outs[0], to_striped(x, width, items), policy)
        assert_equal(outs[1], x, policy)

    check_clean(block_launcher(BLOCK, body), [x], [torch.zeros_like(x)] * 2, expect)


def check_warp_sorts(dtype, width: int, items: int) -> None:
    """warp_merge_sort (stable, blocked; payload = original position) and
    warp_bitonic_sort (unstable, striped: keys exact, payload must point at its key)."""
    n = BLOCK * items

    def body(tid, Keys, Pos, Out, OutPos):
        keys, pos = read_blocked(Keys, tid, items, dtype), read_blocked(Pos, tid, items)
        merged_keys, merged_pos = C.warp_merge_sort(keys, pos, width=width)
        write_blocked(Out, tid, items, merged_keys)
        write_blocked(OutPos, tid, items, merged_pos)
        bitonic_keys, bitonic_pos = C.warp_bitonic_sort(keys, pos, width=width)
        write_blocked(Out, tid, items, bitonic_keys, base=n)
        write_blocked(OutPos, tid, items, bitonic_pos, base=n)

    keys = sample(dtype, n, seed=width * items, low=-9, high=9)
    pos = torch.arange(n, dtype=torch.int32)
    sorted_g = torch.sort(_groups(keys, width * items), stable=True)
    merged = sorted_g.values.reshape(-1)
    merged_pos = (sorted_g.indices + torch.arange(0, n, width * items).reshape(-1, 1)).reshape(-1).int()

    def expect(outs, policy):
        assert_equal(outs[0][:n], merged, policy)
        assert_equal(outs[1][:n], merged_pos, policy)
        assert_equal(outs[0][n:], to_striped(merged, width, items), policy)
        # equal keys may swap in a bitonic network: each payload must still name its key
        assert_equal(keys[outs[1][n:].long()], outs[0][n:], policy)
        assert_equal(outs[1][n:].sort().values, pos, policy)

    check_clean(block_launcher(BLOCK, body), [keys, pos], [torch.zeros(2 * n, dtype=keys.dtype),
                                                           torch.zeros(2 * n, dtype=torch.int32)], expect)


@pytest.mark.parametrize("width, items", [(32, 2), (8, 3)])
def test_warp_merge_and_bitonic_sort(width, items):
    check_warp_sorts(fx.Int32, width, items)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TORCH_OF), ids=type_id)
@pytest.mark.parametrize("width", WIDTHS)
def test_warp_reductions_and_scans_sweep(width, dtype):
    check_reductions_and_scans(dtype, width)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [fx.Int16, fx.Float32, fx.Int64], ids=type_id)
@pytest.mark.parametrize("width, items", [(32, 1), (16, 4), (4, 2), (2, 5)])
def test_warp_sorts_sweep(width, items, dtype):
    check_warp_sorts(dtype, width, items)
