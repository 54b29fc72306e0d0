"""FlyDSL's other block primitives (flydsl.extension.coop): BlockLoad/BlockStore in every
algorithm, BlockShuffle, BlockDiscontinuity, BlockAdjacentDifference and BlockRadixRank in
every ranking policy, on the virtual gfx1250, sanitized under several scheduler policies:
exact against torch, zero violations."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx

from ldssan.report import render_text

from .harness import (POLICIES, assert_equal, block_launcher, check_clean, line_of, read_blocked,
                      run_sanitized, sample, to_striped, write_blocked)

C = fx.coop
BLOCK, ITEMS = 64, 2
N = BLOCK * ITEMS
_TRANSPOSING = {"TRANSPOSE", "WARP_TRANSPOSE", "WARP_TRANSPOSE_TIMESLICED"}  # need LDS scratch


@pytest.mark.parametrize("name", [a.name for a in C.BlockLoadAlgorithm])
def test_block_load_store_round_trip(name):
    """Load with one algorithm, store with its namesake: the tile comes back unchanged,
    and the loaded items have the ownership the algorithm promises."""

    def body(tid, A, _B, Copy, Owned):
        load = C.BlockLoad[fx.Int32, BLOCK, ITEMS, C.BlockLoadAlgorithm[name]]
        store = C.BlockStore[fx.Int32, BLOCK, ITEMS, C.BlockStoreAlgorithm[name]]
        alloc = fx.SharedAllocator()
        scratch = {}
        if name in _TRANSPOSING:
            scratch = dict(load=dict(storage=alloc.allocate(load.SharedStorage).peek()),
                           store=dict(storage=alloc.allocate(store.SharedStorage).peek()))
        items = load(A, **scratch.get("load", {}))
        write_blocked(Owned, tid, ITEMS, items)
        store(Copy, items, **scratch.get("store", {}))

    x = sample(fx.Int32, N, seed=21)
    owned = to_striped(x, BLOCK, ITEMS) if name == "STRIPED" else x

    def expect(outs, policy):
        assert_equal(outs[0], x, policy)
        assert_equal(outs[1], owned, policy)

    check_clean(block_launcher(BLOCK, body), [x], [torch.zeros_like(x)] * 2, expect)


def test_block_shuffle_up_down_rotate():
    def body(tid, A, _B, Out, Scalars):
        shuffle = C.BlockShuffle[fx.Int32, BLOCK, C.BlockShuffleAlgorithm.SHARED_MEMORY]
        storage = fx.SharedAllocator().allocate(shuffle.SharedStorage).peek()
        x = read_blocked(A, tid, ITEMS)
        up = shuffle.up(x, storage=storage, predecessor=fx.Int32(-1))
        fx.barrier()
        write_blocked(Out, tid, ITEMS, up)
        down = shuffle.down(x, storage=storage, successor=fx.Int32(-2))
        fx.barrier()
        write_blocked(Out, tid, ITEMS, down, base=N)
        rotated = shuffle.rotate(x[0], distance=3, storage=storage)
        Scalars[tid] = rotated

    x = sample(fx.Int32, N, seed=22)
    firsts = x[::ITEMS]  # each thread's item 0

    def expect(outs, policy):
        assert_equal(outs[0][:N], torch.cat([torch.tensor([-1], dtype=x.dtype), x[:-1]]), policy)
        assert_equal(outs[0][N:], torch.cat([x[1:], torch.tensor([-2], dtype=x.dtype)]), policy)
        assert_equal(outs[1], firsts.roll(-3), policy)  # thread t gets thread t+3's value

    check_clean(block_launcher(BLOCK, body), [x], [torch.zeros(2 * N, dtype=x.dtype),
                                                   torch.zeros(BLOCK, dtype=x.dtype)], expect)


def test_block_discontinuity_and_adjacent_difference():
    def body(tid, A, _B, Flags, Diffs):
        flags = C.BlockDiscontinuity[fx.Int32, BLOCK, C.BlockShuffleAlgorithm.SHARED_MEMORY]
        diff = C.BlockAdjacentDifference[fx.Int32, BLOCK, C.BlockShuffleAlgorithm.SHARED_MEMORY]
        alloc = fx.SharedAllocator()
        flag_storage = alloc.allocate(flags.SharedStorage).peek()
        diff_storage = alloc.allocate(diff.SharedStorage).peek()
        x = read_blocked(A, tid, ITEMS)
        heads, tails = flags.flag_heads_and_tails(x, storage=flag_storage)
        write_blocked(Flags, tid, ITEMS, heads)
        write_blocked(Flags, tid, ITEMS, tails, base=N)
        write_blocked(Diffs, tid, ITEMS, diff.subtract_left(x, storage=diff_storage))
        fx.barrier()
        write_blocked(Diffs, tid, ITEMS, diff.subtract_right(x, storage=diff_storage), base=N)

    x = sample(fx.Int32, N, seed=23, low=0, high=3)  # short runs of equal values
    change = x[1:] != x[:-1]
    true = torch.tensor([True])
    heads, tails = torch.cat([true, change]), torch.cat([change, true])
    left = torch.cat([x[:1], x[1:] - x[:-1]])  # the first item passes through
    right = torch.cat([x[:-1] - x[1:], x[-1:]])  # the last item passes through

    def expect(outs, policy):
        assert_equal(outs[0], torch.cat([heads, tails]).to(torch.int32), policy)
        assert_equal(outs[1], torch.cat([left, right]), policy)

    check_clean(block_launcher(BLOCK, body), [x], [torch.zeros(2 * N, dtype=torch.int32)] * 2, expect)


_WARP_STRIPED = {"MATCH", "MATCH_EARLY_COUNTS_ANY", "MATCH_EARLY_COUNTS_ATOMIC_OR"}
# BASIC and MEMOIZE end every bin's scan with `storage.prefix[digit] = offset` executed by
# every thread of every wave with no barrier between the waves' stores (flydsl 0.5.0,
# extension/coop/block/radix_rank.py:659). The value is block-uniform, so the result is
# right: unordered stores of identical bytes are benign by the memory model, so ldssan reports
# them as the LDS004 warning (never an error) at the rank call, against the same call in
# another wave, and the launch stays clean.
_SAME_VALUE_STORES = {"BASIC", "MEMOIZE"}


def _rank_body(name: str):
    warp = 32

    def position(tid, i):
        if name in _WARP_STRIPED:
            return (tid // warp) * warp * ITEMS + tid % warp + i * warp
        return tid * ITEMS + i

    def body(tid, A, _B, Ranks, _OB):
        rank = C.BlockRadixRank.with_radix_bits(4)[fx.Int32, BLOCK, ITEMS, C.BlockRadixRankAlgorithm[name]]
        storage = fx.SharedAllocator().allocate(rank.SharedStorage).peek()
        keys = [A[position(tid, i)] for i in range(ITEMS)]
        ranks = rank(keys, storage=storage, begin_bit=0, end_bit=4)  # <rank call>
        for i in range(ITEMS):
            Ranks[position(tid, i)] = ranks[i]

    return body


@pytest.mark.parametrize("name", [a.name for a in C.BlockRadixRankAlgorithm if a.name != "EARLY_COUNTS"])
def test_block_radix_rank(name):
    """Each key's rank is its position in the stable ascending sort by its low 4 bits.
    MATCH policies take warp-striped ownership, read straight from global memory."""
    x = sample(fx.Int32, N, seed=24, low=0, high=16)
    want = torch.empty(N, dtype=torch.int32)
    want[torch.sort(x, stable=True).indices] = torch.arange(N, dtype=torch.int32)
    launch = block_launcher(BLOCK, _rank_body(name))
    expect = lambda outs, policy: assert_equal(outs[0], want, policy)  # noqa: E731
    if name not in _SAME_VALUE_STORES:
        check_clean(launch, [x], [torch.zeros_like(x)], expect)
        return
    line = line_of(__file__, "# <rank call>")
    for policy in POLICIES:
        outs, report = run_sanitized(launch, [x], [torch.zeros_like(x)], policy)
        expect(outs, policy)
        found = {(v.code, v.site.file, v.site.line, v.other_site.line) for v in report.violations}
        assert found == {("LDS004", __file__, line, line)}, render_text(report)
        assert report.clean and all(v.severity == "warning" for v in report.violations), render_text(report)
        # the racing bytes are the 16 Int32 bin prefixes, nothing else
        assert all(v.buffer is not None and v.buffer.size == 16 * 4 for v in report.violations), \
            render_text(report)
