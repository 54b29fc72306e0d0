"""rocdl.ds.load.tr16.b128 (gfx1250 ds_load_tr16_b128) against its public description (ROCm's
write-up of the instruction for Triton's gfx1250 lowering): every lane reads 16 contiguous
bytes (8 x b16) at its own LDS address, like a ds_load_b128, then in each group of 8 lanes
lane 8g+i receives element i of lanes 8g..8g+7. The sanitizer sees it as that ds read."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..sanitized import sanitize_mlir
from ..test_ops import module

N = 64
PERM = 5  # lane t reads LDS row (5 t) mod 64: independent addresses, not a geometric tile

# Thread t writes row t of LDS (8 x i16: 8t .. 8t+7) at byte 16 t; after `sync`, lane t
# transpose-loads row (5 t) mod 64 and stores its 8 elements (as 4 x i32) to out[4t ..].
KERNEL = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c8 = arith.constant 8 : i32
      %c5 = arith.constant 5 : i32
      %c63 = arith.constant 63 : i32
      %c4 = arith.constant 4 : i32
      %t8 = arith.muli %t, %c8 : i32
      %t8h = arith.trunci %t8 : i32 to i16
      %v0 = vector.broadcast %t8h : i16 to vector<8xi16>
      %iota = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : vector<8xi16>
      %row = arith.addi %v0, %iota : vector<8xi16>
      %wp = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, vector<8xi16>
      llvm.store %row, %wp : vector<8xi16>, !llvm.ptr<3>
      {sync}
      %r5 = arith.muli %t, %c5 : i32
      %src = arith.andi %r5, %c63 : i32
      %rp = llvm.getelementptr %base[%src] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, vector<8xi16>
      {guard}
      %v = rocdl.ds.load.tr16.b128 %rp : !llvm.ptr<3> -> vector<8xi16> loc("k.py":30:7)
      %w = llvm.bitcast %v : vector<8xi16> to vector<4xi32>
      %t4 = arith.muli %t, %c4 : i32
      %op = llvm.getelementptr %out[%t4] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %w, %op : vector<4xi32>, !llvm.ptr<1>
      {end}"""


def _text(sync="gpu.barrier", guard="", end=""):
    return module(KERNEL.format(sync=sync, guard=guard, end=end), lds_bytes=1024)


def reference() -> np.ndarray:
    """(64, 8) int16: what each lane holds, from the description."""
    rows = np.arange(N)[:, None] * 8 + np.arange(8)[None, :]  # LDS row r holds 8r .. 8r+7
    read = rows[(PERM * np.arange(N)) % N]  # lane t's own 16-byte read
    out = np.empty_like(read)
    for lane in range(N):
        g, i = divmod(lane, 8)
        out[lane] = [read[8 * g + j, i] for j in range(8)]
    return out.astype(np.int16)


@pytest.mark.parametrize("policy", ["round-robin", "lockstep"])
def test_each_lane_gets_element_i_of_its_group(policy):
    out = np.zeros(4 * N, np.int32)
    run_kernel(parse_module(_text()), "kern", grid=(1, 1, 1), block=(N, 1, 1), args=[out], policy=policy)
    np.testing.assert_array_equal(out.view(np.int16).reshape(N, 8), reference())


def test_a_group_split_by_the_exec_mask_is_refused_with_the_reason():
    guard = """%c3 = arith.constant 3 : i32
      %lt = arith.cmpi slt, %t, %c3 : i32
      scf.if %lt {"""
    with pytest.raises(UnsupportedOp, match=r"rocdl.ds.load.tr16.b128' at k.py:30:7.*splits a group of 8 lanes"):
        run_kernel(parse_module(_text(guard=guard, end="}")), "kern", grid=(1, 1, 1), block=(N, 1, 1),
                   args=[np.zeros(4 * N, np.int32)])


def test_the_sanitizer_sees_its_read_of_each_lanes_16_bytes():
    clean = sanitize_mlir(_text(), [np.zeros(4 * N, np.int32)])
    assert clean.clean, clean.violations
    racy = sanitize_mlir(_text(sync=""), [np.zeros(4 * N, np.int32)])
    found = {(v.code, v.site.line) for v in racy.violations}
    assert ("LDS001", 30) in found, racy.violations
