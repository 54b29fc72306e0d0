"""FlyDSL's BlockReduce and BlockScan (flydsl.extension.coop) in one-workgroup kernels on
the virtual gfx1250, sanitized under several scheduler policies: every algorithm variant,
element types and block sizes, exact against torch, zero violations."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx

from .harness import (TORCH_OF, assert_equal, block_launcher, check_clean, read_blocked, sample,
                      type_id, wrap, write_blocked)

C = fx.coop
OPS = {"add": fx.ReductionOp.ADD, "max": fx.ReductionOp.MAX, "min": fx.ReductionOp.MIN}


def _host_reduce(x: torch.Tensor, op: str) -> torch.Tensor:
    if op == "add":
        return wrap(x.to(torch.int64).sum() if not x.is_floating_point() else x.sum(), x.dtype)
    return x.max() if op == "max" else x.min()


def check_block_reduce(dtype, block: int, items: int, algorithm, op: str = "add") -> None:
    def body(tid, A, _B, Out, _OB):
        reduce = C.BlockReduce[dtype, block, algorithm]
        storage = fx.SharedAllocator().allocate(reduce.SharedStorage).peek()
        tile = read_blocked(A, tid, items, dtype)
        Out[tid] = reduce(tile if items > 1 else tile[0], OPS[op], storage=storage)

    x = sample(dtype, block * items, seed=block + items)
    want = _host_reduce(x, op).expand(block)

    check_clean(block_launcher(block, body), [x], [torch.zeros(block, dtype=x.dtype)],
                lambda outs, policy: assert_equal(outs[0], want, policy))


def check_block_scan(dtype, block: int, items: int, algorithm) -> None:
    """Inclusive and exclusive (seeded with `init`) sums through one storage, with the
    barrier the docs require between the two collectives."""
    init = 5

    def body(tid, A, _B, Inc, Exc):
        scan = C.BlockScan[dtype, block, algorithm]
        storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
        tile = read_blocked(A, tid, items, dtype)
        write_blocked(Inc, tid, items, scan.inclusive(tile, fx.ReductionOp.ADD, storage=storage))
        fx.barrier()
        write_blocked(Exc, tid, items, scan.exclusive(tile, fx.ReductionOp.ADD, storage=storage,
                                                      init=dtype(init)))

    x = sample(dtype, block * items, seed=3 * block + items)
    wide = x.to(torch.float64 if x.is_floating_point() else torch.int64)
    inclusive = wide.cumsum(0)
    exclusive = torch.cat([wide.new_zeros(1), inclusive[:-1]]) + init

    def expect(outs, policy):
        assert_equal(outs[0], wrap(inclusive, x.dtype), policy)
        assert_equal(outs[1], wrap(exclusive, x.dtype), policy)

    check_clean(block_launcher(block, body), [x], [torch.zeros_like(x)] * 2, expect)


@pytest.mark.parametrize("dtype", [fx.Int32, fx.Float32], ids=type_id)
@pytest.mark.parametrize("algorithm", list(C.BlockReduceAlgorithm), ids=lambda a: a.name)
def test_block_reduce_every_algorithm(algorithm, dtype):
    check_block_reduce(dtype, 128, 1, algorithm)


# 16 threads: below a wave the primitive narrows its logical warp to the block.
@pytest.mark.parametrize("block, items, op", [(16, 1, "max"), (64, 4, "min"), (256, 2, "add")])
def test_block_reduce_sizes_and_ops(block, items, op):
    check_block_reduce(fx.Int32, block, items, C.BlockReduceAlgorithm.RAKING, op)


@pytest.mark.parametrize("algorithm", list(C.BlockScanAlgorithm), ids=lambda a: a.name)
def test_block_scan_every_algorithm(algorithm):
    check_block_scan(fx.Int32, 128, 2, algorithm)


def test_block_scan_float_items():
    check_block_scan(fx.Float32, 64, 3, C.BlockScanAlgorithm.WARP_SCANS)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TORCH_OF), ids=type_id)
@pytest.mark.parametrize("block, items", [(16, 1), (64, 1), (128, 4), (512, 1)])
@pytest.mark.parametrize("algorithm", list(C.BlockReduceAlgorithm), ids=lambda a: a.name)
def test_block_reduce_sweep(algorithm, block, items, dtype):
    check_block_reduce(dtype, block, items, algorithm)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TORCH_OF), ids=type_id)
@pytest.mark.parametrize("block, items", [(16, 2), (96, 1), (256, 3)])
@pytest.mark.parametrize("algorithm", list(C.BlockScanAlgorithm), ids=lambda a: a.name)
def test_block_scan_sweep(algorithm, block, items, dtype):
    check_block_scan(dtype, block, items, algorithm)
