"""Two waves storing identical bytes into one LDS slot with no ordering (FlyDSL's moe_sorting:
masked-off lanes park one sentinel in one slot) are LDS004, a warning: every order of the
stores leaves the same value. Different bytes stay LDS003, and a read racing such a slot is
still an error (LDS001), as the memory model says (docs/memory-model.md)."""

from __future__ import annotations

import numpy as np
import pytest

from ..sanitized import sanitize_mlir
from ..test_ops import module

N = 64  # two waves

# Every lane stores `value` into word 0 (line 10); after `sync`, every lane reads word 0
# (line 12) and writes it to out[t].
KERNEL = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c32 = arith.constant 32 : i32
      %c7 = arith.constant 7 : i32
      %wave = arith.divui %t, %c32 : i32
      %v = {value}
      llvm.store %v, %base : {type}, !llvm.ptr<3> loc("k.py":10:5)
      {sync}
      %r = llvm.load %base : !llvm.ptr<3> -> {type} loc("k.py":12:9)
      %o = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {type}
      llvm.store %r, %o : {type}, !llvm.ptr<1>"""

SENTINEL = "arith.addi %c7, %c7 : i32"  # 14 from every lane of both waves
PER_WAVE = "arith.addi %c7, %wave : i32"  # 7 from wave 0, 8 from wave 1
HALF = "arith.constant 5.000000e-01 : bf16"  # a 2-byte store of one bf16 value


def _report(value, sync="gpu.barrier", type="i32", policy="round-robin", batch=1):
    text = module(KERNEL.format(value=value, sync=sync, type=type))
    return sanitize_mlir(text, [np.zeros(N, np.int32)], grid=(batch, 1, 1), block=(N, 1, 1), policy=policy,
                         batch=batch)


def _found(report):
    return {(v.code, v.severity, v.site.line, v.other_site.line if v.other_site else None)
            for v in report.violations}


@pytest.mark.parametrize("policy,batch", [("round-robin", 1), ("lockstep", 1), ("lockstep", 2)])
@pytest.mark.parametrize("value,type", [(SENTINEL, "i32"), (HALF, "bf16")])
def test_unordered_stores_of_identical_bytes_are_a_warning(value, type, policy, batch):
    report = _report(value, type=type, policy=policy, batch=batch)
    assert _found(report) == {("LDS004", "warning", 10, 10)}, report.violations
    assert report.clean  # a warning never makes a launch unclean


def test_unordered_stores_of_different_bytes_stay_an_error():
    report = _report(PER_WAVE)
    assert _found(report) == {("LDS003", "error", 10, 10)}, report.violations
    assert not report.clean


def test_a_read_racing_a_same_value_slot_is_still_an_error():
    report = _report(SENTINEL, sync="")
    found = _found(report)
    assert ("LDS004", "warning", 10, 10) in found, report.violations
    assert ("LDS001", "error", 12, 10) in found, report.violations
    assert not report.clean
