"""FlyDSL's legacy SmemAllocator LDS fed by a TDM load (the pattern of FlyDSL's
test_tdm_mcast_add_gfx1250.py without a cluster): the descriptor takes the LDS memref's aligned
pointer, the waves read the tile back through vector.load on the memref. Runs exact, checks
clean, and a missing tensor wait is reported at the read with the copy's line."""

import inspect  # no `from __future__ import annotations`: FlyDSL reads the kernel's annotations

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import vector
from flydsl.compiler.kernel_function import CompilationContext
from flydsl.expr import arith, as_ir_value, gpu, tdm_ops
from flydsl.utils.smem_allocator import SmemAllocator, SmemPtr, get_op_result_or_value

import ldssan
from ldssan.runtime.emu import emulate

ROWS, COLS = 16, 32  # an f32 tile
THREADS = 64
PER_THREAD = ROWS * COLS // THREADS  # 8 consecutive elements each
pytestmark = pytest.mark.filterwarnings("ignore:SmemAllocator is the legacy")


def _tile_kernel(wait: bool):
    alloc = SmemAllocator(None, arch="gfx1250", global_sym_name="tile_smem")
    alloc.ptr = ROWS * COLS * 4

    @flyc.kernel
    def tile_kernel(Src: fx.Tensor, Out: fx.Tensor):
        tid = gpu.thread_id("x")
        with ir.InsertionPoint(CompilationContext.get_current().gpu_module_body):
            alloc.finalized = False
            alloc.finalize()
        tile = SmemPtr(alloc.get_base(), 0, ir.F32Type.get(), shape=(ROWS * COLS,))
        lds = get_op_result_or_value(tile.get())
        desc = tdm_ops.make_tensor_descriptor_2d(
            global_ptr=Src, lds_memref=lds, global_offset=(arith.index(0), arith.index(0)),
            tensor_shape=(ROWS, COLS), strides=(COLS, 1), tile_shape=(ROWS, COLS), elem_bytes=4,
            num_warps=THREADS // 32)
        tdm_ops.tensor_load_2d(desc)  # <copy>
        if wait:
            tdm_ops.tensor_wait(0)
        gpu.barrier()
        first = tid * arith.index(PER_THREAD)
        v = vector.load(ir.VectorType.get([PER_THREAD], ir.F32Type.get()), as_ir_value(lds),  # <read>
                        [as_ir_value(first)])
        total = vector.reduction(ir.F32Type.get(), vector.CombiningKind.ADD, v)
        Out[fx.thread_idx.x] = fx.Float32(total)

    @flyc.jit
    def launch(Src: fx.Tensor, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        tile_kernel(Src, Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def _line(marker: str) -> int:
    lines, first = inspect.getsourcelines(_tile_kernel)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def _inputs():
    src = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS)
    return src, torch.zeros(THREADS, dtype=torch.float32)


def test_a_tdm_tile_in_smem_allocator_lds_reads_back_exact():
    src, out = _inputs()
    with emulate():
        _tile_kernel(wait=True)(src, out)
    expected = src.reshape(THREADS, PER_THREAD).sum(dim=1)
    torch.testing.assert_close(out, expected)


def test_the_sanitizer_sees_the_copy_into_memref_lds_and_the_reads():
    src, out = _inputs()
    with ldssan.sanitize() as ctx:
        _tile_kernel(wait=True)(src, out)
    (clean,) = ctx.results
    assert clean.report.clean, clean.report.violations
    with ldssan.sanitize() as ctx:
        _tile_kernel(wait=False)(*_inputs())
    (racy,) = ctx.results
    found = {(v.code, v.site.line, v.other_site.line if v.other_site else None) for v in racy.report.violations}
    assert ("LDS010", _line("<read>"), _line("<copy>")) in found, racy.report.violations
