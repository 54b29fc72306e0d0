"""The run-time functions the emitters once called without them existing: llvm.insertvalue
(`R.tuple_set`) and rocdl.ds_bpermute (`R.bpermute`), run in small MLIR kernels and checked
against numpy; and the fail-closed rule: a Python exception inside a kernel's op becomes an
ldssan error naming the op and its source line."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.errors import EmulationError
from ldssan.runtime.emu.launch import parse_module, run_kernel

from .test_ops import STORE_R, T, module, run

STRUCT = "!llvm.struct<(i32, array<2 x i32>)>"


def test_insertvalue_builds_and_extracts_nested_aggregates():
    # member 0 uniform, member [1][1] per lane: the aggregate becomes per lane; the value it
    # was built from keeps its own member (SSA: insertvalue copies)
    body = f"""
      %u = llvm.mlir.undef : {STRUCT}
      %c7 = arith.constant 7 : i32
      %c100 = arith.constant 100 : i32
      %s0 = llvm.insertvalue %c7, %u[0] : {STRUCT}
      %s1 = llvm.insertvalue %t, %s0[1, 1] : {STRUCT}
      %s2 = llvm.insertvalue %c100, %s1[1, 0] : {STRUCT}
      %a = llvm.extractvalue %s2[0] : {STRUCT}
      %b = llvm.extractvalue %s2[1, 1] : {STRUCT}
      %c = llvm.extractvalue %s2[1, 0] : {STRUCT}
      %old = llvm.extractvalue %s1[1, 0] : {STRUCT}
      %ab = arith.addi %a, %b : i32
      %abc = arith.addi %ab, %c : i32
      %r = arith.subi %abc, %old : i32""" + STORE_R
    np.testing.assert_array_equal(run(body), 7 + T + 100 - 0)


def test_insertvalue_of_uniform_values_stays_uniform():
    body = f"""
      %u = llvm.mlir.undef : {STRUCT}
      %c5 = arith.constant 5 : i32
      %s0 = llvm.insertvalue %c5, %u[1, 0] : {STRUCT}
      %x = llvm.extractvalue %s0[1, 0] : {STRUCT}
      %r = arith.addi %x, %t : i32""" + STORE_R
    np.testing.assert_array_equal(run(body), T + 5)


BPERMUTE = """
      %c4 = arith.constant 4 : i32
      %c10 = arith.constant 10 : i32
      %c1 = arith.constant 1 : i32
      %addr = arith.muli %{src_lane}, %c4 : i32
      %v0 = arith.muli %t, %c10 : i32
      %v = arith.addi %v0, %c1 : i32
      %r = rocdl.ds_bpermute %addr, %v : (i32, i32) -> i32"""


def _bpermute_want(src_lane_of, active=None, base=0):
    """numpy model: lane l of each wave reads lane src_lane_of(l) % 32 of its own wave."""
    wave = (T // 32) * 32
    src = wave + src_lane_of(T) % 32
    got = src * 10 + 1 + base
    if active is not None:
        got = np.where(active[src], got, 0)
    return got


def test_bpermute_reads_the_lane_its_byte_address_names():
    # lane l reads lane 31 - l of its own wave (t ^ 31 keeps the wave bits)
    body = """
      %c31 = arith.constant 31 : i32
      %rev = arith.xori %t, %c31 : i32""" + BPERMUTE.format(src_lane="rev") + STORE_R
    np.testing.assert_array_equal(run(body), _bpermute_want(lambda l: l ^ 31))


def test_bpermute_address_wraps_modulo_the_wave():
    # byte address (t + 37) * 4: lane (t + 37) mod 32 = t + 5 of the same wave, high bits ignored
    body = """
      %c37 = arith.constant 37 : i32
      %fwd = arith.addi %t, %c37 : i32""" + BPERMUTE.format(src_lane="fwd") + STORE_R
    np.testing.assert_array_equal(run(body), _bpermute_want(lambda l: l + 37))


def test_bpermute_from_an_inactive_lane_reads_zero():
    # inside `if t % 32 < 16`: lanes 0..7 read active lanes 8..15, lanes 8..15 read inactive 16..23
    body = """
      %c32 = arith.constant 32 : i32
      %c16 = arith.constant 16 : i32
      %c8 = arith.constant 8 : i32
      %cm1 = arith.constant -1 : i32
      %c4 = arith.constant 4 : i32
      %c10 = arith.constant 10 : i32
      %c1 = arith.constant 1 : i32
      %l = arith.remsi %t, %c32 : i32
      %lo = arith.cmpi slt, %l, %c16 : i32
      %r = scf.if %lo -> (i32) {
        %fwd = arith.addi %t, %c8 : i32
        %addr = arith.muli %fwd, %c4 : i32
        %v0 = arith.muli %t, %c10 : i32
        %v = arith.addi %v0, %c1 : i32
        %q = rocdl.ds_bpermute %addr, %v : (i32, i32) -> i32
        scf.yield %q : i32
      } else {
        scf.yield %cm1 : i32
      }""" + STORE_R
    active = (T % 32) < 16
    want = np.where(active, _bpermute_want(lambda l: l + 8, active), -1)
    np.testing.assert_array_equal(run(body), want)


def test_bpermute_stays_within_each_batched_workgroup():
    body = """
      %bid = gpu.block_id x
      %b = arith.index_cast %bid : index to i32
      %c64 = arith.constant 64 : i32
      %c1000 = arith.constant 1000 : i32
      %c31 = arith.constant 31 : i32
      %rev = arith.xori %t, %c31 : i32
      %c4 = arith.constant 4 : i32
      %c10 = arith.constant 10 : i32
      %c1 = arith.constant 1 : i32
      %addr = arith.muli %rev, %c4 : i32
      %v0 = arith.muli %t, %c10 : i32
      %v1 = arith.addi %v0, %c1 : i32
      %bk = arith.muli %b, %c1000 : i32
      %v = arith.addi %v1, %bk : i32
      %r = rocdl.ds_bpermute %addr, %v : (i32, i32) -> i32
      %g0 = arith.muli %b, %c64 : i32
      %g = arith.addi %g0, %t : i32
      %p = llvm.getelementptr %out[%g] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""
    got = run(body, grid=2, batch=2)
    want = np.concatenate([_bpermute_want(lambda l: l ^ 31, base=1000 * g) for g in range(2)])
    np.testing.assert_array_equal(got, want)


def test_a_python_exception_in_an_op_is_an_ldssan_error_naming_the_op():
    # an element index past the vector (poison in LLVM) makes numpy raise IndexError inside
    # the generated code: the user sees the op and its source line, the IndexError as cause
    src = module("""
      %v = arith.constant dense<[1, 2, 3, 4]> : vector<4xi32>
      %c9 = arith.constant 9 : i32
      %i = arith.addi %t, %c9 : i32
      %r = llvm.extractelement %v[%i : i32] : vector<4xi32> loc("my_kernel.py":17:5)""" + STORE_R)
    view = parse_module(src)
    with pytest.raises(EmulationError) as info:
        run_kernel(view, "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[np.zeros(64, np.int32)])
    err = info.value
    assert not isinstance(err, (IndexError, TypeError, AttributeError))
    assert "'llvm.extractelement' at my_kernel.py:17:5" in str(err)
    assert "IndexError" in str(err) and isinstance(err.__cause__, IndexError)
    assert err.op_name == "llvm.extractelement"
    assert any("while running wave 0 of kernel kern" in n for n in err.__notes__)


def test_a_not_implemented_case_at_run_time_is_unsupported_op():
    # a TDM descriptor beyond 2-D (non-zero group 2) is only seen when the op runs
    src = module("""
      %c1 = arith.constant 1 : i32
      %g0 = vector.broadcast %c1 : i32 to vector<4xi32>
      %g1 = vector.broadcast %c1 : i32 to vector<8xi32>
      %g2 = vector.broadcast %c1 : i32 to vector<4xi32>
      %g4 = vector.broadcast %c1 : i32 to vector<8xi32>
      rocdl.tensor.load.to.lds %g0, %g1, %g2, %g2, %g4, 0 : vector<4xi32>, vector<8xi32> loc("tdm.py":3:1)""")
    view = parse_module(src)
    with pytest.raises(UnsupportedOp, match=r"'rocdl.tensor.load.to.lds' at tdm.py:3:1: .*beyond 2-D") as info:
        run_kernel(view, "kern", grid=(1, 1, 1), block=(32, 1, 1), args=[np.zeros(64, np.int32)])
    assert isinstance(info.value, EmulationError)


def test_an_emitter_crash_at_translation_is_an_ldssan_error_naming_the_op(monkeypatch):
    from ldssan.runtime.emu import ops

    def broken(t, op):
        raise KeyError("no such attribute")

    monkeypatch.setitem(ops.EMITTERS, "arith.muli", broken)
    src = module("""
      %r = arith.muli %t, %t : i32 loc("emit.py":8:2)""" + STORE_R)
    with pytest.raises(EmulationError, match=r"'arith.muli' at emit.py:8:2 failed in translating @kern: KeyError") as info:
        run_kernel(parse_module(src), "kern", grid=(1, 1, 1), block=(32, 1, 1), args=[np.zeros(32, np.int32)])
    assert isinstance(info.value.__cause__, KeyError)
