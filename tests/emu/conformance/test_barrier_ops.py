"""The barrier-family ops beside the workgroup barrier: s.barrier.signal.isfirst (a signal
with an i1 result), wave.barrier (no execution effect) and s.get.barrier.state (refused)."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.passes.abi import BarrierForm
from ldssan.passes.gfx1250 import classify, refused
from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel

from ._harness import SRC, run_op
from ..test_ops import module


def test_isfirst_is_a_signal_true_in_exactly_one_wave_the_first_in_canonical_order():
    # IntrinsicsAMDGPU.td: true for the first wave to signal. Which one arrives first depends
    # on timing; ldssan decides it in canonical (wave id) order: wave 0.
    for policy in ("round-robin", "reverse", "random(5)"):
        out = np.zeros(64, dtype=np.int32)
        body = """
      %f = rocdl.s.barrier.signal.isfirst id = -1 -> i1
      rocdl.s.barrier.wait id = -1
      %r = arith.extui %f : i1 to i32
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""
        run_kernel(parse_module(module(body)), "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[out],
                   policy=policy)
        np.testing.assert_array_equal(out, np.repeat([1, 0], 32), err_msg=policy)


def test_the_pass_instruments_isfirst_as_a_signal():
    assert not refused("rocdl.s.barrier.signal.isfirst")
    event = classify("rocdl.s.barrier.signal.isfirst", [], attrs={"id": -1})
    assert [(c.hook, c.where, c.args[0].value) for c in event.calls] == [
        ("__ldssan_barrier", "before", int(BarrierForm.SIGNAL))]


def test_wave_barrier_has_no_execution_effect():
    (got,) = run_op("""
      rocdl.wave.barrier
      %v = arith.addi %src, %c1 : i32""", ["%v"], "mod3")
    np.testing.assert_array_equal(got[got != -7777], (SRC + 1)[got != -7777])


@pytest.mark.parametrize("op", ["rocdl.s.get.barrier.state id = -1 -> i32"])
def test_barrier_state_reads_are_refused_by_name(op):
    with pytest.raises(UnsupportedOp, match=r"'rocdl.s.get.barrier.state' at .*depends on timing"):
        run_op(f"""
      %v = {op}""", ["%v"])
