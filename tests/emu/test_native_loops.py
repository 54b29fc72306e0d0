"""Uniform `scf.for` loops compiled whole into native runs (runtime/emu/native/loops.py).

A loop without stores runs lane after lane, its carried values in registers; a loop that
stores runs its iterations around the lanes, as the interpreter does. Both must give the
interpreter's bits and charge what its Python loop charges (budget, op count); a loop that
stores into what it loads, or runs longer than the budget, runs as Python."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import StepBudgetExceeded
from ldssan.runtime.emu import codegen
from ldssan.runtime.emu.launch import parse_module, run_kernel

from .test_native import N, _edge_inputs, _module

_DESC = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %stride = arith.constant 0 : i16
      %nrec = arith.constant {nrec} : i64
      %flags = arith.constant 159744 : i32
      %rs = rocdl.make.buffer.rsrc %a, %stride, %nrec, %flags : <1> to <8>
      %ro = rocdl.make.buffer.rsrc %out, %stride, %nrec, %flags : <1> to <8>
      %lb = arith.constant {lb} : i32
      %ub = arith.constant {ub} : i32
      %st = arith.constant {step} : i32"""

# Fibonacci-like carried pair (the yield swaps them), an f32 and a bf16 vector fed by loads of
# word t + i of %a (NaN, infinities, ties: `_edge_inputs`), a loop-counter product per lane
CARRIED = _DESC + """
      %vz = arith.constant dense<0.000000e+00> : vector<2xbf16>
      %res:3 = scf.for %i = %lb to %ub step %st iter_args(%p = %x, %q = %y, %v = %vz) -> (f32, f32, vector<2xbf16>) : i32 {{
        %w = arith.addi %t, %i : i32
        %o = arith.muli %w, %c4 : i32
        %ld = rocdl.raw.ptr.buffer.load %rs, %o, %c0, 0 : i32
        %f = arith.bitcast %ld : i32 to f32
        %s = arith.addf %p, %q : f32
        %m = arith.mulf %s, %f : f32
        %vb = rocdl.raw.ptr.buffer.load %rs, %o, %c0, 0 : vector<2xbf16>
        %v2 = arith.addf %v, %vb : vector<2xbf16>
        scf.yield %q, %m, %v2 : f32, f32, vector<2xbf16>
      }}
      %vf = arith.extf %res#2 : vector<2xbf16> to vector<2xf32>
      %vs = vector.reduction <add>, %vf : vector<2xf32> into f32
      %vi = arith.bitcast %vs : f32 to i32
      %pi = arith.bitcast %res#0 : f32 to i32
      %qi = arith.bitcast %res#1 : f32 to i32
      %pq = arith.xori %pi, %qi : i32
      %r = arith.addi %pq, %vi : i32"""

# lane t stores into word t + i in iteration i: the words lanes share hold the last
# iteration's value, as when every lane runs an iteration before the next begins
STORES = _DESC + """
      scf.for %i = %lb to %ub step %st : i32 {{
        %w = arith.addi %t, %i : i32
        %o = arith.muli %w, %c4 : i32
        %ld = rocdl.raw.ptr.buffer.load %rs, %o, %c0, 0 : i32
        %k = arith.muli %i, %t : i32
        %d = arith.xori %ld, %k : i32
        %ot = arith.muli %w, %c4 : i32
        rocdl.raw.ptr.buffer.store %d, %ro, %ot, %c0, 0 : i32
      }}"""


def _launch(body: str, native: str, store: bool = True, step_budget=None):
    a, b = _edge_inputs()
    out = np.full(N, -3, np.int32)
    launcher = run_kernel(parse_module(_module(body, "i32", store)), "kern", grid=(1, 1, 1), block=(N, 1, 1),
                          args=[out, a, b], policy="lockstep", native=native, step_budget=step_budget)
    rec = launcher.records[-1]
    return out, rec.stats.get("native"), rec.wave_ops


def _loop_runs() -> list:
    """The native runs that compile a loop whole, in every cached translation (the tests clear
    the cache first)."""
    return [r for p in codegen._CACHE.values() if p.native for r in p.native.runs if "scf.for" in r.ops]


@pytest.mark.parametrize("bounds", [(1, 11, 2), (0, 64, 1), (5, 5, 1), (7, 3, 1)], ids=str)
def test_a_loop_with_carried_values_runs_whole_and_gives_the_interpreters_bits(bounds):
    lb, ub, step = bounds
    body = CARRIED.format(nrec=4 * N, lb=lb, ub=ub, step=step)
    codegen.clear_cache()
    got, stats, ops_on = _launch(body, "on")
    assert [r.calls for r in _loop_runs()] == [1], stats  # the whole loop: one call
    want, _, ops_off = _launch(body, "off")
    np.testing.assert_array_equal(got, want)
    assert ops_on == ops_off  # the op count the Python loop charges, charged once
    assert stats["fallbacks"] == 0, stats


def test_a_loop_that_stores_runs_its_iterations_around_the_lanes():
    body = STORES.format(nrec=4 * N, lb=0, ub=6, step=1)
    codegen.clear_cache()
    got, stats, ops_on = _launch(body, "on", store=False)
    assert [r.calls for r in _loop_runs()] == [1], stats
    want, _, ops_off = _launch(body, "off", store=False)
    np.testing.assert_array_equal(got, want)
    assert ops_on == ops_off


def test_a_loop_that_stores_into_what_it_loads_runs_as_python():
    body = STORES.format(nrec=4 * N, lb=0, ub=6, step=1).replace(
        "rocdl.raw.ptr.buffer.store %d, %ro", "rocdl.raw.ptr.buffer.store %d, %rs")
    codegen.clear_cache()
    got, stats, _ = _launch(body, "on", store=False)
    assert [r.fallbacks for r in _loop_runs()] == [1], stats
    want, _, _ = _launch(body, "off", store=False)
    np.testing.assert_array_equal(got, want)


def test_a_loop_longer_than_the_budget_fails_as_the_python_loop_does():
    body = CARRIED.format(nrec=4 * N, lb=0, ub=1000, step=1)
    for native in ("on", "off"):
        with pytest.raises(StepBudgetExceeded, match="1,000 iterations"):
            _launch(body, native, step_budget=500)


# an index-typed counter; a loop inside a branch of some lanes (its loads under their mask);
# a loop whose body shuffles (not compiled whole: its body's runs are, iteration by iteration)
OTHER_LOOPS = {
    "index counter": """
      %i0 = arith.constant 0 : index
      %i1 = arith.constant 1 : index
      %i7 = arith.constant 7 : index
      %r = scf.for %i = %i0 to %i7 step %i1 iter_args(%acc = %ia) -> (i32) {
        %k = arith.index_cast %i : index to i32
        %m = arith.muli %acc, %k : i32
        %s = arith.xori %m, %ib : i32
        scf.yield %s : i32
      }""",
    "inside a branch": _DESC.format(nrec=4 * N, lb=0, ub=5, step=1).replace("{", "{{").replace("}", "}}") + """
      %c3 = arith.constant 3 : i32
      %third = arith.remsi %t, %c3 : i32
      %some = arith.cmpi ne, %third, %c0 : i32
      %r = scf.if %some -> (i32) {
        %l = scf.for %i = %lb to %ub step %st iter_args(%acc = %ia) -> (i32) : i32 {
          %w = arith.addi %t, %i : i32
          %o = arith.muli %w, %c4 : i32
          %ld = rocdl.raw.ptr.buffer.load %rs, %o, %c0, 0 : i32
          %s = arith.addi %acc, %ld : i32
          scf.yield %s : i32
        }
        scf.yield %l : i32
      } else {
        scf.yield %ib : i32
      }""",
    "shuffles in the body": """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %c32 = arith.constant 32 : i32
      %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %ia) -> (i32) : i32 {
        %f = arith.sitofp %acc : i32 to f32
        %sh, %ok = gpu.shuffle xor %f, %c1, %c32 : f32
        %g = arith.addf %sh, %x : f32
        %gi = arith.bitcast %g : f32 to i32
        %s = arith.xori %gi, %acc : i32
        scf.yield %s : i32
      }""",
}


@pytest.mark.parametrize("name", list(OTHER_LOOPS))
def test_other_loops_give_the_interpreters_bits(name):
    body = OTHER_LOOPS[name]
    codegen.clear_cache()
    got, stats, ops_on = _launch(body, "on")
    whole = [r.calls for r in _loop_runs()]
    assert whole == ([] if name == "shuffles in the body" else [1]), whole
    want, _, ops_off = _launch(body, "off")
    np.testing.assert_array_equal(got, want)
    assert ops_on == ops_off and stats["fallbacks"] == 0, stats
