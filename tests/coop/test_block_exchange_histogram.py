"""FlyDSL's BlockExchange and BlockHistogram (flydsl.extension.coop) on the virtual
gfx1250, sanitized under several scheduler policies: exact against torch, zero violations.
Each kernel reuses one storage for several collectives with the barrier the docs require
between them (the correct counterpart of test_storage_misuse.py)."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx

from .harness import (TORCH_OF, assert_equal, block_launcher, check_clean, read_blocked, sample,
                      to_striped, type_id, write_blocked)

C = fx.coop


def check_exchange(dtype, block: int, items: int, algorithm) -> None:
    """blocked->striped, then back; blocked->warp-striped, then back; then a scatter by
    reversed ranks. One storage, a barrier between collectives."""
    n = block * items

    def body(tid, A, _B, Out, Back):
        ex = C.BlockExchange[dtype, block, items, algorithm]
        storage = fx.SharedAllocator().allocate(ex.SharedStorage).peek()
        x = read_blocked(A, tid, items, dtype)
        striped = ex.blocked_to_striped(x, storage=storage)
        fx.barrier()
        write_blocked(Out, tid, items, striped)
        write_blocked(Back, tid, items, ex.striped_to_blocked(striped, storage=storage))
        fx.barrier()
        warped = ex.blocked_to_warp_striped(x, storage=storage)
        fx.barrier()
        write_blocked(Out, tid, items, warped, base=n)
        write_blocked(Back, tid, items, ex.warp_striped_to_blocked(warped, storage=storage), base=n)
        fx.barrier()
        ranks = [fx.Int32(block * items - 1) - (tid * items + i) for i in range(items)]
        write_blocked(Out, tid, items, ex.scatter_to_blocked(x, ranks, storage=storage), base=2 * n)

    x = sample(dtype, n, seed=n)
    warp = min(block, 32)
    # warp-striped: stripes within each logical warp's segment of the tile
    want_out = torch.cat([to_striped(x, block, items), to_striped(x, warp, items), x.flip(0)])

    def expect(outs, policy):
        assert_equal(outs[0], want_out, policy)
        assert_equal(outs[1][:2 * n], torch.cat([x, x]), policy)

    check_clean(block_launcher(block, body), [x], [torch.zeros(3 * n, dtype=x.dtype)] * 2, expect)


def check_histogram(dtype, block: int, items: int, bins: int, algorithm) -> None:
    """`P(x)` (clear + count), then `composite(x)` into the same counts: twice the
    histogram. Keys outside [0, bins) must be ignored."""
    assert bins <= block, "each bin is written back by thread (bin index)"

    def body(tid, A, _B, Once, Twice):
        hist = C.BlockHistogram[dtype, block, bins, algorithm]
        storage = fx.SharedAllocator().allocate(hist.SharedStorage).peek()
        x = read_blocked(A, tid, items, dtype)
        counts = hist(x, storage=storage)
        Once[tid % bins] = counts[tid % bins]
        fx.barrier()
        hist.composite(x, storage=storage)
        fx.barrier()
        Twice[tid % bins] = storage.counts[tid % bins]

    x = sample(dtype, block * items, seed=bins + items, low=-2, high=bins + 2)
    wide = x.to(torch.int64)
    counts = torch.bincount(wide[(wide >= 0) & (wide < bins)], minlength=bins).to(torch.int32)

    def expect(outs, policy):
        assert_equal(outs[0], counts, policy)
        assert_equal(outs[1], 2 * counts, policy)

    check_clean(block_launcher(block, body), [x], [torch.zeros(bins, dtype=torch.int32)] * 2, expect)


@pytest.mark.parametrize("algorithm", list(C.BlockExchangeAlgorithm), ids=lambda a: a.name)
def test_block_exchange_round_trips_and_scatter(algorithm):
    check_exchange(fx.Int32, 64, 3, algorithm)


@pytest.mark.parametrize("algorithm", list(C.BlockHistogramAlgorithm), ids=lambda a: a.name)
def test_block_histogram_init_and_composite(algorithm):
    check_histogram(fx.Int32, 64, 2, 16, algorithm)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TORCH_OF), ids=type_id)
@pytest.mark.parametrize("block, items", [(16, 2), (128, 1), (256, 4)])
@pytest.mark.parametrize("algorithm", list(C.BlockExchangeAlgorithm), ids=lambda a: a.name)
def test_block_exchange_sweep(algorithm, block, items, dtype):
    check_exchange(dtype, block, items, algorithm)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [fx.Uint8, fx.Int16, fx.Int32], ids=type_id)
@pytest.mark.parametrize("block, items, bins", [(32, 1, 8), (128, 4, 64), (256, 2, 256)])
@pytest.mark.parametrize("algorithm", list(C.BlockHistogramAlgorithm), ids=lambda a: a.name)
def test_block_histogram_sweep(algorithm, block, items, bins, dtype):
    check_histogram(dtype, block, items, bins, algorithm)
