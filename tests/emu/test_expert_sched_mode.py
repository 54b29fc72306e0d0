"""s_setreg of SCHED_MODE's DEP_MODE (hwreg 26, bits 1:0): the value 2 (expert scheduling mode,
what LLVM's amdgpu-expert-scheduling-mode writes at kernel entry) changes no IR value and runs as a
no-op; any other value, or one known only at run time, is refused naming the register."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp

from .test_ops import STORE_R, T, run

DEP_MODE = 26 | (0 << 6) | ((2 - 1) << 11)  # hwreg(26, offset 0, size 2)


def _body(value: str) -> str:
    return f"""
      %hw = arith.constant {DEP_MODE} : i32
      %v = {value}
      llvm.call_intrinsic "llvm.amdgcn.s.setreg"(%hw, %v) : (i32, i32) -> () loc("k.py":4:2)
      %c5 = arith.constant 5 : i32
      %r = arith.addi %t, %c5 : i32""" + STORE_R


def test_expert_scheduling_mode_2_changes_no_value():
    np.testing.assert_array_equal(run(_body("arith.constant 2 : i32")), T + 5)


@pytest.mark.parametrize("value, shown", [("arith.constant 1 : i32", "the value 1"),
                                          ("arith.addi %t, %t : i32", "a value known only at run time")])
def test_another_dep_mode_is_refused_naming_the_register_and_value(value, shown):
    with pytest.raises(UnsupportedOp) as info:
        run(_body(value))
    msg = str(info.value)
    assert "llvm.amdgcn.s.setreg" in msg and "hwreg id 26, offset 0, size 2" in msg and shown in msg, msg
    assert "k.py:4:2" in msg, msg
