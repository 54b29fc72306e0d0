"""memref.global / get_global and the memref accesses FlyDSL's legacy SmemAllocator makes,
against MLIR's definitions (mlir.llvm.org, 'memref' dialect): a global in workgroup memory is
an LDS buffer laid out with the module's other LDS globals; `memref.view` shifts the base by
its byte offset; element (i, j) of a memref is at base + (offset + i*s0 + j*s1) * element
bytes; `vector.load` reads consecutive elements from that address; a constant global in
global memory holds its `dense<>` initial value (a splat fills it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldssan.passes.ir.types import parse_memref
from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..sanitized import sanitize_mlir

N = 64
WG = "#gpu.address_space<workgroup>"
TABLE = [[10, 11, 12, 13], [20, 21, 22, 23]]

# Lane t stores 3t into element t of an i32 view 64 bytes into @smem, then (after `sync`) reads
# element 63 - t, adds table[(t / 4) & 1][t % 4] from a constant global and the f32 splat
# @half (as 2 * 0.5 = 1), and stores the sum to out[t]; out[64 + t] gets the view's aligned
# base address and out[128 + t] element 0 of a vector.load of 4 elements at index 4 * (t % 16).
KERNEL = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    llvm.mlir.global external @lds() {{addr_space = 3 : i32, alignment = 16 : i64}} : !llvm.array<48 x i8>
    memref.global "private" @smem : memref<512xi8, {WG}> {{alignment = 1024 : i64}}
    memref.global "private" constant @table : memref<2x4xi32> = dense<{TABLE}>
    memref.global "private" constant @half : memref<4xf32> = dense<5.000000e-01>
    gpu.func @kern(%out: !llvm.ptr<1>) kernel {{
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %c15 = arith.constant 15 : index
      %c63 = arith.constant 63 : index
      %c64 = arith.constant 64 : index
      %c3i = arith.constant 3 : i32
      %c64i = arith.constant 64 : i32
      %g = memref.get_global @smem : memref<512xi8, {WG}>
      %v = memref.view %g[%c64][] : memref<512xi8, {WG}> to memref<64xi32, {WG}>
      %t3 = arith.muli %t, %c3i : i32
      memref.store %t3, %v[%tid] : memref<64xi32, {WG}> loc("k.py":20:5)
      {{sync}}
      %j = arith.subi %c63, %tid : index
      %x = memref.load %v[%j] : memref<64xi32, {WG}> loc("k.py":22:9)
      %tb = memref.get_global @table : memref<2x4xi32>
      %col = arith.remui %tid, %c4 : index
      %q = arith.divui %tid, %c4 : index
      %row = arith.andi %q, %c1 : index
      %y = memref.load %tb[%row, %col] : memref<2x4xi32>
      %hb = memref.get_global @half : memref<4xf32>
      %h = memref.load %hb[%col] : memref<4xf32>
      %hh = arith.addf %h, %h : f32
      %one = arith.fptosi %hh : f32 to i32
      %xy = arith.addi %x, %y : i32
      %s = arith.addi %xy, %one : i32
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %s, %p : i32, !llvm.ptr<1>
      %base = memref.extract_aligned_pointer_as_index %v : memref<64xi32, {WG}> -> index
      %b32 = arith.index_cast %base : index to i32
      %t64 = arith.addi %t, %c64i : i32
      %pb = llvm.getelementptr %out[%t64] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %b32, %pb : i32, !llvm.ptr<1>
      %k = arith.remui %tid, %c15 : index
      %k4 = arith.muli %k, %c4 : index
      %vec = vector.load %v[%k4] : memref<64xi32, {WG}>, vector<4xi32>
      %e0 = vector.extract %vec[0] : i32 from vector<4xi32>
      %t128 = arith.addi %t64, %c64i : i32
      %pv = llvm.getelementptr %out[%t128] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %e0, %pv : i32, !llvm.ptr<1>
      gpu.return
    }}
  }}
}}"""


def _text(sync="gpu.barrier"):
    return KERNEL.replace("{sync}", sync)


def reference() -> np.ndarray:
    t = np.arange(N)
    lds = 3 * t  # the view's element e holds 3e
    table = np.array(TABLE)
    sums = lds[63 - t] + table[(t // 4) & 1, t % 4] + 1
    base = np.full(N, 1024 + 64)  # @lds takes bytes 0..47, @smem is aligned to 1024
    first = lds[4 * (t % 15)]
    return np.concatenate([sums, base, first]).astype(np.int32)


@pytest.mark.parametrize("policy", ["round-robin", "lockstep"])
def test_lds_and_constant_memref_globals_read_and_write_as_defined(policy):
    out = np.zeros(3 * N, np.int32)
    run_kernel(parse_module(_text()), "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[out], policy=policy)
    np.testing.assert_array_equal(out, reference())


def test_batched_workgroups_each_have_their_own_memref_lds():
    out = np.zeros(3 * N, np.int32)
    # two workgroups writing the same out: equal values, but each must read its own LDS
    run_kernel(parse_module(_text()), "kern", grid=(2, 1, 1), block=(N, 1, 1), args=[out],
               policy="lockstep", batch=2)
    np.testing.assert_array_equal(out, reference())


def test_the_sanitizer_sees_memref_lds_accesses_at_their_lines():
    clean = sanitize_mlir(_text(), [np.zeros(3 * N, np.int32)])
    assert clean.clean, clean.violations
    racy = sanitize_mlir(_text(sync=""), [np.zeros(3 * N, np.int32)])
    pairs = {(v.code, v.site.line, v.other_site.line) for v in racy.violations}
    assert ("LDS001", 22, 20) in pairs, racy.violations
    assert {v.site.buffer for v in racy.violations} == {"smem"}


def test_a_mutable_global_memref_is_refused_with_the_reason():
    text = _text().replace('memref.global "private" constant @table', 'memref.global "private" @table')
    with pytest.raises(UnsupportedOp, match=r"memref.get_global.*mutable global.*across launches"):
        run_kernel(parse_module(text), "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[np.zeros(3 * N, np.int32)])


def test_memref_types_give_the_lowered_layout():
    two_d = parse_memref(f"memref<4x8xbf16, strided<[16, 1], offset: 4>, {WG}>")
    assert (two_d.shape, two_d.strides, two_d.offset, two_d.space, two_d.nbytes) == ((4, 8), (16, 1), 4, 3, 64)
    assert parse_memref("memref<2x3x4xf32>").strides == (12, 4, 1)
    assert parse_memref("memref<?x4xf32>") is None  # dynamic: refused at the access
    assert parse_memref("memref<4xf32, strided<[?]>>") is None


def test_rows_taint_follows_memref_lds_accesses():
    # `ldssan rows`: a racy memref LDS read taints what it loads, through to the output
    import torch
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    from ldssan.passes.instrument import Instrumenter
    from ldssan.passes.ir.irview import view_module
    from ldssan.runtime.emu.taint import TaintSource, tracking

    with _create_mlir_context():
        mod = ir.Module.parse(_text())
        Instrumenter(mod.operation).run()
        view = view_module(mod)
    sites = json.loads(view.attrs["ldssan.sites"])["sites"]
    read = next(s["id"] for s in sites if s["kind"] == "ds_read" and s["line"] == 22)
    out = np.zeros(3 * N, np.int32)
    with tracking([TaintSource("kern", read, 0)]) as st:
        run_kernel(view, "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[out])
        taint = st.tensor_taint(torch.from_numpy(out))
    np.testing.assert_array_equal(out, reference())
    assert (taint[:N] == 1).all() and (taint[N:] == 0).all(), taint
