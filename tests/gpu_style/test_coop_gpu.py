"""A FlyDSL cooperative primitive (BlockReduce, BlockScan) in a kernel, tested the way
FlyDSL's own coop tests are written: block-wide collectives through LDS, device
allocations, `stream=torch.cuda.Stream()`, results against host folds."""

from __future__ import annotations

import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="requires GPU")


def block_reduce(values: torch.Tensor, dtype, block: int, algorithm) -> torch.Tensor:
    @flyc.kernel(known_block_size=[block, 1, 1])
    def kernel(A: fx.Tensor, Out: fx.Tensor):
        reduce = fx.coop.BlockReduce[dtype, (block, 1, 1), algorithm]
        storage = fx.SharedAllocator().allocate(reduce.SharedStorage).peek()
        tid = fx.thread_idx.x
        Out[tid] = reduce(A[tid], fx.ReductionOp.ADD, storage=storage)

    @flyc.jit
    def launch(A: fx.Tensor, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        kernel(A, Out).launch(grid=(1, 1, 1), block=(block, 1, 1), stream=stream)

    out = torch.zeros(block, dtype=values.dtype, device="cuda")
    launch(values, out, stream=torch.cuda.Stream())
    torch.cuda.synchronize()
    return out.cpu()


def block_scan(values: torch.Tensor, dtype, block: int) -> torch.Tensor:
    @flyc.kernel(known_block_size=[block, 1, 1])
    def kernel(A: fx.Tensor, Out: fx.Tensor):
        scan = fx.coop.BlockScan[dtype, (block, 1, 1), fx.coop.BlockScanAlgorithm.WARP_SCANS]
        storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
        tid = fx.thread_idx.x
        Out[tid] = scan.inclusive(A[tid], fx.ReductionOp.ADD, storage=storage)

    @flyc.jit
    def launch(A: fx.Tensor, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        kernel(A, Out).launch(grid=(1, 1, 1), block=(block, 1, 1), stream=stream)

    out = torch.zeros_like(values)
    launch(values, out, stream=fx.Stream(torch.cuda.current_stream()))
    torch.cuda.synchronize()
    return out.cpu()


@requires_gpu
@pytest.mark.parametrize("algorithm", ["WARP_REDUCTIONS", "RAKING"])
def test_block_reduce_sum_in_every_thread(algorithm):
    torch.manual_seed(1)
    values = torch.randint(-1000, 1000, (128,), dtype=torch.int32, device="cuda")

    out = block_reduce(values, fx.Int32, 128, getattr(fx.coop.BlockReduceAlgorithm, algorithm))

    total = values.cpu().sum().to(torch.int32)
    torch.testing.assert_close(out, total.expand(128))


@requires_gpu
def test_block_scan_inclusive_float():
    torch.manual_seed(2)
    values = torch.randn(64, device="cuda")

    out = block_scan(values, fx.Float32, 64)

    torch.testing.assert_close(out, values.cpu().cumsum(0), rtol=1e-5, atol=1e-5)
