"""ds accesses outside the workgroup's LDS allocation do what the hardware does with them
(docs/memory-model.md, "Out-of-range LDS accesses"): a read returns 0, a write is dropped, an
atomic changes nothing and returns 0 — never another workgroup's or another offset's bytes.
A plain run warns once per launch; a sanitized run reports each as LDS031 at its line."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu.launch import parse_module, run_kernel
from ldssan.runtime.emu.rt.memory import LdsOutOfRange

from ..sanitized import sanitize_mlir
from ..test_ops import module

N = 64
LDS_WORDS = 64  # 256 bytes

# 1. lane t stores 1000+t at word t; 2. lane t stores 5000+t at word t+32 (lanes >= 32 out of
# range); 3. lane t atomically adds 7 at word t+40 (lanes >= 24 out) and keeps the old value;
# 4. lane t reads word t+16 (lanes >= 48 out) and word t. out = [read t+16 | read t | old].
KERNEL = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c1000 = arith.constant 1000 : i32
      %c5000 = arith.constant 5000 : i32
      %c7 = arith.constant 7 : i32
      %c16 = arith.constant 16 : i32
      %c32 = arith.constant 32 : i32
      %c40 = arith.constant 40 : i32
      %c64 = arith.constant 64 : i32
      %v1 = arith.addi %t, %c1000 : i32
      %p1 = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %v1, %p1 : i32, !llvm.ptr<3>
      gpu.barrier
      %v2 = arith.addi %t, %c5000 : i32
      %i2 = arith.addi %t, %c32 : i32
      %p2 = llvm.getelementptr %base[%i2] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %v2, %p2 : i32, !llvm.ptr<3> loc("k.py":12:5)
      gpu.barrier
      %i3 = arith.addi %t, %c40 : i32
      %p3 = llvm.getelementptr %base[%i3] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %old = llvm.atomicrmw add %p3, %c7 monotonic : !llvm.ptr<3>, i32 loc("k.py":14:9)
      gpu.barrier
      %i4 = arith.addi %t, %c16 : i32
      %p4 = llvm.getelementptr %base[%i4] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %p4 : !llvm.ptr<3> -> i32 loc("k.py":17:9)
      %s = llvm.load %p1 : !llvm.ptr<3> -> i32
      %o1 = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %o1 : i32, !llvm.ptr<1>
      %j = arith.addi %t, %c64 : i32
      %o2 = llvm.getelementptr %out[%j] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %s, %o2 : i32, !llvm.ptr<1>
      %k = arith.addi %j, %c64 : i32
      %o3 = llvm.getelementptr %out[%k] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %old, %o3 : i32, !llvm.ptr<1>"""


def reference() -> np.ndarray:
    lds = np.zeros(LDS_WORDS + 64, np.int64)  # room beyond the allocation: must stay unseen
    t = np.arange(N)
    lds[t] = 1000 + t
    lds[t + 32] = 5000 + t  # words >= 64 are outside the allocation: dropped below
    lds[LDS_WORDS:] = 0
    old = np.where(t + 40 < LDS_WORDS, lds[t + 40], 0)
    lds[40:LDS_WORDS] += 7
    lds[LDS_WORDS:] = 0  # out-of-range atomics change nothing
    read = np.where(t + 16 < LDS_WORDS, lds[t + 16], 0)
    return np.concatenate([read, lds[t], old]).astype(np.int32)


@pytest.mark.parametrize("policy,grid,batch", [("round-robin", 1, 1), ("lockstep", 2, 2)])
def test_out_of_range_reads_return_0_and_writes_are_dropped(policy, grid, batch):
    out = np.zeros(3 * N, np.int32)
    with pytest.warns(LdsOutOfRange, match=r"outside the workgroup's 256 bytes of LDS.*LDS031") as seen:
        run_kernel(parse_module(module(KERNEL, lds_bytes=256)), "kern", grid=(grid, 1, 1), block=(N, 1, 1),
                   args=[out], policy=policy, batch=batch)
    np.testing.assert_array_equal(out, reference())
    assert len([w for w in seen if w.category is LdsOutOfRange]) == 1  # once per launch


def test_the_sanitizer_reports_each_out_of_range_access_as_lds031_at_its_line():
    report = sanitize_mlir(module(KERNEL, lds_bytes=256), [np.zeros(3 * N, np.int32)])
    lines = {v.site.line for v in report.violations if v.code == "LDS031"}
    assert lines == {12, 14, 17}, report.violations
