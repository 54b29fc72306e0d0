"""Native runs (runtime/emu/native/): lane-wise ops compiled to C give the interpreter's bits.

Each case is a small kernel whose ops form native runs, run on inputs full of edge values
(NaN of both signs, infinities, signed zeros, subnormals, bf16 rounding ties, integer
extremes) with the runs compiled and with them off; the outputs must be equal bit for bit.
Then the bundled kernels (plain, sanitized, with planted bugs), the fallbacks (no compiler,
an input of an unexpected dtype) and the disk cache."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from ldssan import hook
from ldssan.kernels import rmsnorm as rms
from ldssan.runtime.emu import emulate
from ldssan.runtime.emu import codegen
from ldssan.runtime.emu import rt as R
from ldssan.runtime.emu.launch import parse_module, run_kernel
from ldssan.runtime.emu.memory import EmuMemoryError
from ldssan.runtime import cc
from ldssan.runtime.emu.native import NativeBuildError, NativeRun, call
from ldssan.runtime.emu.native.cops import CEMIT
from ldssan.runtime.emu.native.runs import Slot
from ldssan.variants import load_variant
from tests.sanitizer.test_rmsnorm_bugs import VARIANTS, _inputs

N = 256  # lanes: 8 waves of one workgroup


def _module(body: str, out_type: str, store: bool = True) -> str:
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @kern(%out: !llvm.ptr<1>, %a: !llvm.ptr<1>, %b: !llvm.ptr<1>) kernel {{
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
      %pa = llvm.getelementptr %a[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %pb = llvm.getelementptr %b[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %ia = llvm.load %pa : !llvm.ptr<1> -> i32
      %ib = llvm.load %pb : !llvm.ptr<1> -> i32
      %x = arith.bitcast %ia : i32 to f32
      %y = arith.bitcast %ib : i32 to f32
{body}
{_STORE.format(out_type=out_type) if store else ""}
      gpu.return
    }}
  }}
}}"""


_STORE = """      %po = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {out_type}
      llvm.store %r, %po : {out_type}, !llvm.ptr<1>"""


def _edge_inputs() -> tuple[np.ndarray, np.ndarray]:
    f = np.float32
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.17549435e-38,
                        3.4028235e38, -3.4028235e38, 1.5, 2.5, 0.1, 65504.0, 1e30, -7.0, 3.0], f).view(np.uint32)
    ties = np.array([0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x7F7F_FFFF, 0x0000_8000, 0x7FC0_0001, 0xFF80_0001,
                     0x8000_0001, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 0x0000_0001], np.uint32)
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2 ** 32, N, dtype=np.uint32)
    head = np.concatenate([special, ties])
    a[:len(head)] = head
    b = np.concatenate([a[1:], a[:1]])  # every edge value meets its neighbours
    b[len(head):len(head) + 32] = a[len(head):len(head) + 32]  # and equal pairs
    return a.view(np.int32), b.view(np.int32)


def _run(body: str, out_type: str, native: str, width: int = 1, store: bool = True):
    a, b = _edge_inputs()
    out = np.full(N * width, -3, np.int32)
    launcher = run_kernel(parse_module(_module(body, out_type, store)), "kern", grid=(1, 1, 1), block=(N, 1, 1),
                          args=[out, a, b], policy="lockstep", native=native)
    return out, launcher.records[-1].stats.get("native")


_FCMP = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une",
         "uno", "true"]
_ICMP = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]


def _packed(preds: list[str], op: str, ty: str, a: str, b: str) -> str:
    """One bit per predicate, summed into %r: every predicate of `op` on (a, b)."""
    lines = ["      %acc0 = arith.constant 0 : i32"]
    for k, p in enumerate(preds):
        lines += [f"      %c{k} = {op} {p}, {a}, {b} : {ty}",
                  f"      %e{k} = arith.extui %c{k} : i1 to i32",
                  f"      %w{k} = arith.constant {1 << k} : i32",
                  f"      %m{k} = arith.muli %e{k}, %w{k} : i32",
                  f"      %acc{k + 1} = arith.addi %acc{k}, %m{k} : i32"]
    return "\n".join(lines) + f"\n      %r = arith.addi %acc{len(preds)}, %acc0 : i32"


def _nan_pairs(ty: str) -> str:
    """+ - * / of (x, y) in `ty`, each result's bits weighted by an odd number and summed: a
    change in any one changes %r (which NaN an op returns when both are NaN differs per op
    and per type: cops.nan_winner)."""
    lines, ops = [], ["addf", "subf", "mulf", "divf"]
    if ty == "f32":
        lines += ["      %xv = arith.addf %x, %x : f32", "      %yv = arith.addf %y, %y : f32"]
    else:
        lines += [f"      %xv = arith.truncf %x : f32 to {ty}", f"      %yv = arith.truncf %y : f32 to {ty}"]
    lines.append("      %acc0 = arith.constant 0 : i32")
    for k, op in enumerate(ops):
        lines.append(f"      %o{k} = arith.{op} %xv, %yv : {ty}")
        if ty == "f32":
            lines.append(f"      %i{k} = arith.bitcast %o{k} : f32 to i32")
        else:
            lines += [f"      %h{k} = arith.bitcast %o{k} : {ty} to i16", f"      %i{k} = arith.extui %h{k} : i16 to i32"]
        lines += [f"      %w{k} = arith.constant {2 * k + 1} : i32", f"      %m{k} = arith.muli %i{k}, %w{k} : i32",
                  f"      %acc{k + 1} = arith.addi %acc{k}, %m{k} : i32"]
    return "\n".join(lines) + f"\n      %r = arith.addi %acc{len(ops)}, %acc0 : i32"


_SHUFFLES = """
      %c1 = arith.constant 1 : i32
      %c3 = arith.constant 3 : i32
      %c5 = arith.constant 5 : i32
      %c8 = arith.constant 8 : i32
      %c16 = arith.constant 16 : i32
      %c32 = arith.constant 32 : i32
      %c33 = arith.constant 33 : i32
      %s1, %ok1 = gpu.shuffle xor %x, %c5, %c32 : f32
      %a1 = arith.addf %s1, %y : f32
      %s2, %ok2 = gpu.shuffle up %a1, %c3, %c16 : f32
      %a2 = arith.mulf %s2, %x : f32
      %s3, %ok3 = gpu.shuffle down %a2, %c1, %c8 : f32
      %s4, %ok4 = gpu.shuffle idx %s3, %c33, %c32 : f32
      %v = vector.broadcast %s4 : f32 to vector<2xf32>
      %s5, %ok5 = gpu.shuffle xor %v, %c16, %c32 : vector<2xf32>
      %e = vector.extract %s5[1] : f32 from vector<2xf32>
      %i4 = arith.bitcast %e : f32 to i32
      %acc0 = arith.addi %i4, %i4 : i32""" + "".join(f"""
      %b{k} = arith.extui %ok{k} : i1 to i32
      %w{k} = arith.constant {1 << k} : i32
      %m{k} = arith.muli %b{k}, %w{k} : i32
      %acc{k} = arith.addi %acc{k - 1}, %m{k} : i32""" for k in range(1, 6))


_VECTOR_SHIFTS = """
      %va = vector.broadcast %ia : i32 to vector<4xi32>
      %vb = vector.broadcast %ib : i32 to vector<4xi32>
      %k16 = arith.constant dense<16> : vector<4xi32>
      %k3 = arith.constant dense<3> : vector<4xi32>
      %s0 = arith.shrui %va, %k16 : vector<4xi32>
      %s1 = arith.shli %vb, %k3 : vector<4xi32>
      %s2 = arith.shrsi %va, %k16 : vector<4xi32>
      %x0 = arith.xori %s0, %s1 : vector<4xi32>
      %x1 = arith.addi %x0, %s2 : vector<4xi32>"""


CASES = {
    "shifts by constants": ("""
      %k0 = arith.constant 0 : i32
      %k1 = arith.constant 1 : i32
      %k7 = arith.constant 7 : i32
      %k31 = arith.constant 31 : i32
      %a0 = arith.shli %ia, %k7 : i32
      %a1 = arith.shrui %ib, %k1 : i32
      %a2 = arith.shrsi %ia, %k31 : i32
      %a3 = arith.shrsi %ib, %k7 : i32
      %a4 = arith.shli %ib, %k0 : i32
      %a5 = arith.shrui %ia, %k31 : i32
      %a6 = llvm.ashr %a0, %k1 : i32
      %b0 = arith.addi %a0, %a1 : i32
      %b1 = arith.xori %b0, %a2 : i32
      %b2 = arith.addi %b1, %a3 : i32
      %b3 = arith.xori %b2, %a4 : i32
      %b4 = arith.addi %b3, %a5 : i32
      %r = arith.xori %b4, %a6 : i32""", "i32", 1),
    # FlyDSL's bf16 rounding shifts vectors by a splat (`dense<16>`); a non-splat count stays Python
    "vector shifts by splats": (_VECTOR_SHIFTS + """
      %kv = arith.constant dense<[0, 1, 31, 7]> : vector<4xi32>
      %s3 = arith.shrui %vb, %kv : vector<4xi32>
      %r = arith.xori %x1, %s3 : vector<4xi32>""", "vector<4xi32>", 4),
    "vector shuffle": ("""
      %va = vector.broadcast %ia : i32 to vector<4xi32>
      %vb = vector.broadcast %ib : i32 to vector<2xi32>
      %k = arith.constant 3 : i32
      %vc = vector.insert %k, %va [2] : i32 into vector<4xi32>
      %s = vector.shuffle %vc, %vb [5, 2, 0, 4, 2] : vector<4xi32>, vector<2xi32>
      %e0 = vector.extract %s[0] : i32 from vector<5xi32>
      %e1 = vector.extract %s[1] : i32 from vector<5xi32>
      %e3 = vector.extract %s[3] : i32 from vector<5xi32>
      %m = arith.muli %e0, %e1 : i32
      %r = arith.subi %m, %e3 : i32""", "i32", 1),
    "shuffles": (_SHUFFLES + "\n      %r = arith.addi %acc5, %t : i32", "i32", 1),
    # in a branch of a third of the lanes: the others are inactive sources, which read 0
    "shuffles of some lanes": ("""
      %c0i = arith.constant 0 : i32
      %c3i = arith.constant 3 : i32
      %third = arith.remsi %t, %c3i : i32
      %some = arith.cmpi ne, %third, %c0i : i32
      %r = scf.if %some -> (i32) {""" + _SHUFFLES + """
        scf.yield %acc5 : i32
      } else {
        scf.yield %t : i32
      }""", "i32", 1),
    "NaN pairs f32": (_nan_pairs("f32"), "i32", 1),
    "NaN pairs bf16": (_nan_pairs("bf16"), "i32", 1),
    "float arithmetic": ("""
      %s = arith.addf %x, %y : f32
      %m = arith.mulf %s, %x : f32
      %d = arith.divf %m, %y : f32
      %u = arith.subf %d, %x : f32
      %n = arith.negf %u : f32
      %r = arith.bitcast %n : f32 to i32""", "i32", 1),
    "min max select": ("""
      %hi = arith.maximumf %x, %y : f32
      %lo = arith.minimumf %x, %y : f32
      %lt = arith.cmpf olt, %hi, %lo : f32
      %s = arith.select %lt, %hi, %lo : f32
      %q = arith.addf %s, %hi : f32
      %r = arith.bitcast %q : f32 to i32""", "i32", 1),
    "cmpf every predicate": (_packed(_FCMP, "arith.cmpf", "f32", "%x", "%y"), "i32", 1),
    "cmpi every predicate": (_packed(_ICMP, "arith.cmpi", "i32", "%ia", "%ib"), "i32", 1),
    "math": ("""
      %q = math.sqrt %x : f32
      %s = math.rsqrt %y : f32
      %ab = math.absf %x : f32
      %u = arith.addf %q, %s : f32
      %v = arith.mulf %u, %ab : f32
      %r = arith.bitcast %v : f32 to i32""", "i32", 1),
    "bf16": ("""
      %xb = arith.truncf %x : f32 to bf16
      %yb = arith.truncf %y : f32 to bf16
      %s = arith.addf %xb, %yb : bf16
      %m = arith.mulf %s, %xb : bf16
      %d = arith.divf %m, %yb : bf16
      %n = arith.negf %d : bf16
      %c = arith.cmpf ult, %n, %xb : bf16
      %sel = arith.select %c, %n, %yb : bf16
      %e = arith.extf %sel : bf16 to f32
      %ce = arith.extui %c : i1 to i32
      %eb = arith.bitcast %e : f32 to i32
      %r = arith.xori %eb, %ce : i32""", "i32", 1),
    "integers": ("""
      %s = arith.addi %ia, %ib : i32
      %m = arith.muli %s, %ia : i32
      %d = arith.subi %m, %ib : i32
      %an = arith.andi %d, %ia : i32
      %o = arith.ori %an, %ib : i32
      %r = arith.xori %o, %s : i32""", "i32", 1),
    "integer casts": ("""
      %e = arith.extsi %ia : i32 to i64
      %m = arith.muli %e, %e : i64
      %tr = arith.trunci %m : i64 to i32
      %i8 = arith.trunci %ia : i32 to i8
      %bs = arith.extsi %i8 : i8 to i32
      %bu = arith.extui %i8 : i8 to i32
      %one = arith.trunci %ib : i32 to i1
      %os = arith.extsi %one : i1 to i32
      %ic = arith.index_cast %ia : i32 to index
      %k = arith.index_castui %ic : index to i32
      %s1 = arith.addi %tr, %bs : i32
      %s2 = arith.addi %s1, %bu : i32
      %s3 = arith.xori %s2, %os : i32
      %bo = arith.cmpi slt, %ia, %ib : i32
      %bn = arith.andi %bo, %one : i1
      %bx = arith.ori %bn, %one : i1
      %by = arith.xori %bx, %bo : i1
      %bz = arith.extui %by : i1 to i32
      %s4 = arith.addi %s3, %bz : i32
      %r = arith.subi %s4, %k : i32""", "i32", 1),
    "int to float, f64": ("""
      %f = arith.sitofp %ia : i32 to f32
      %l = arith.extsi %ib : i32 to i64
      %g = arith.sitofp %l : i64 to f32
      %e = arith.extf %f : f32 to f64
      %h = arith.mulf %e, %e : f64
      %w = arith.extf %g : f32 to f64
      %z = arith.addf %h, %w : f64
      %tz = arith.truncf %z : f64 to f32
      %q = arith.divf %tz, %x : f32
      %r = arith.bitcast %q : f32 to i32""", "i32", 1),
    "vectors": ("""
      %v = vector.broadcast %x : f32 to vector<4xf32>
      %w = vector.insert %y, %v [2] : f32 into vector<4xf32>
      %m = arith.mulf %w, %v : vector<4xf32>
      %e = vector.extract %m[2] : f32 from vector<4xf32>
      %s = vector.reduction <add>, %m, %e : vector<4xf32> into f32
      %p = vector.reduction <mul>, %w : vector<4xf32> into f32
      %vb = vector.bitcast %m : vector<4xf32> to vector<8xbf16>
      %vb2 = arith.addf %vb, %vb : vector<8xbf16>
      %sb = vector.reduction <add>, %vb2 : vector<8xbf16> into bf16
      %sbf = arith.extf %sb : bf16 to f32
      %vi = vector.bitcast %vb2 : vector<8xbf16> to vector<4xi32>
      %ri = vector.reduction <add>, %vi : vector<4xi32> into i32
      %mi = vector.reduction <mul>, %vi : vector<4xi32> into i32
      %u1 = arith.addf %s, %p : f32
      %u2 = arith.addf %u1, %sbf : f32
      %tb = arith.bitcast %u2 : f32 to i32
      %x1 = arith.xori %ri, %tb : i32
      %x2 = arith.addi %x1, %mi : i32
      %rv = vector.broadcast %x2 : i32 to vector<4xi32>
      %vv = vector.broadcast %x : f32 to vector<4xf32>
      %vw = arith.mulf %vv, %w : vector<4xf32>
      %vwi = vector.bitcast %vw : vector<4xf32> to vector<4xi32>
      %vz = arith.xori %vwi, %vi : vector<4xi32>
      %r = arith.addi %rv, %vz : vector<4xi32>""", "vector<4xi32>", 4),
}


@pytest.mark.parametrize("case", list(CASES))
def test_native_runs_give_the_interpreters_bits(case):
    body, out_type, width = CASES[case]
    got, stats = _run(body, out_type, "on", width)
    want, off = _run(body, out_type, "off", width)
    assert off is None  # nothing compiled when off
    assert stats["calls"] >= 1 and stats["fallbacks"] == 0 and "not_built" not in stats, stats
    np.testing.assert_array_equal(got, want)


def _twin(name: str, tested: set[str]) -> bool:
    """`name` runs the same Python as an op a case tests: the same emitter and, for the
    table-driven ones, the same template (ops/llvm.py's aliases, math's unary table)."""
    from ldssan.runtime.emu.ops import arith, load_all, math as math_ops

    emitters = load_all()
    for table in (arith._BINARY, math_ops._UNARY):
        if name in table:
            return any(emitters.get(t) is emitters[name] and table.get(t) == table[name] for t in tested)
    return any(emitters.get(t) is emitters[name] for t in tested)


def test_vector_shifts_by_a_splat_are_compiled():
    got, stats = _run(_VECTOR_SHIFTS + "\n      %r = arith.addi %x1, %va : vector<4xi32>", "vector<4xi32>", "on", 4)
    want, _ = _run(_VECTOR_SHIFTS + "\n      %r = arith.addi %x1, %va : vector<4xi32>", "vector<4xi32>", "off", 4)
    assert not {"arith.shrui", "arith.shli", "arith.shrsi"} & set(stats["interpreted"]), stats
    np.testing.assert_array_equal(got, want)


def test_every_compiled_op_is_covered_by_a_case():
    text = " ".join(body for body, _, _ in CASES.values()).replace("\n", " ")
    text += " " + _buffer_body(600, 4).replace("\n", " ")
    tested = {n for n in CEMIT if f" {n} " in text}
    untested = sorted(n for n in CEMIT if n not in tested and not _twin(n, tested))
    assert not untested, f"C emitters without a differential case or a tested twin: {untested}"


def _buffer_body(nrec: int, step: int) -> str:
    """Odd lanes load word t+step/4 of %a through a buffer descriptor of `nrec` bytes (lanes past
    it read 0); every lane loads 16 bytes at 16*t as bf16 pairs and sums them."""
    return f"""
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c4 = arith.constant 4 : i32
      %c16 = arith.constant 16 : i32
      %cs = arith.constant {step} : i32
      %stride = arith.constant 0 : i16
      %nrec = arith.constant {nrec} : i64
      %flags = arith.constant 159744 : i32
      %rs = rocdl.make.buffer.rsrc %a, %stride, %nrec, %flags : <1> to <8>
      %off = arith.muli %t, %c4 : i32
      %odd = arith.andi %t, %c1 : i32
      %isodd = arith.cmpi ne, %odd, %c0 : i32
      %one = scf.if %isodd -> (i32) {{
        %o2 = arith.addi %off, %cs : i32
        %v = rocdl.raw.ptr.buffer.load %rs, %o2, %c0, 0 : i32
        %w = arith.xori %v, %ib : i32
        scf.yield %w : i32
      }} else {{
        scf.yield %ia : i32
      }}
      %o16 = arith.muli %t, %c16 : i32
      %q = arith.subi %o16, %off : i32
      %vv = rocdl.raw.ptr.buffer.load %rs, %q, %c0, 0 : vector<4xi32>
      %vb = vector.bitcast %vv : vector<4xi32> to vector<8xbf16>
      %vf = arith.extf %vb : vector<8xbf16> to vector<8xf32>
      %s = vector.reduction <add>, %vf : vector<8xf32> into f32
      %sb = arith.bitcast %s : f32 to i32
      %r = arith.addi %one, %sb : i32"""


def test_buffer_loads_in_native_runs_read_zero_past_num_records():
    # 600 bytes: lanes reading past byte 600 get 0, as in R.buffer_load; the windows are inside %a
    body = _buffer_body(600, 4)
    got, stats = _run(body, "i32", "on")
    want, _ = _run(body, "i32", "off")
    assert stats["calls"] >= 2 and stats["fallbacks"] == 0, stats
    assert stats["compiled_ops"] >= 8, stats  # the loads are inside runs
    np.testing.assert_array_equal(got, want)


def test_loads_through_a_descriptor_wider_than_its_tensor_run_natively():
    # num_records past the tensor (kernels often pass 2**32 - 1): the C checks each address
    body = _buffer_body(1 << 40, 0).replace("%q = arith.subi %o16, %off : i32", "%q = arith.subi %off, %off : i32")
    got, stats = _run(body, "i32", "on")
    want, _ = _run(body, "i32", "off")
    assert stats["calls"] >= 2 and stats["fallbacks"] == 0, stats
    np.testing.assert_array_equal(got, want)


def test_a_load_outside_every_tensor_is_the_interpreters_error():
    # within num_records but past the tensor: the C stops, the Python lines name the access
    body = _buffer_body(1 << 40, 4)
    for native in ("off", "on"):
        with pytest.raises(EmuMemoryError, match="outside every tensor"):
            _run(body, "i32", native)


def test_buffer_stores_in_native_runs_write_within_num_records_only():
    # loads, then arithmetic and a store of %out through a 600-byte descriptor: lanes past it
    # write nothing (the -3 fill stays); the loads run before the store's run
    body = _buffer_body(600, 4) + """
      %ro = rocdl.make.buffer.rsrc %out, %stride, %nrec, %flags : <1> to <8>
      %r2 = arith.muli %r, %r : i32
      %r3 = arith.xori %r2, %ia : i32
      rocdl.raw.ptr.buffer.store %r3, %ro, %off, %c0, 0 : i32"""
    got, stats = _run(body, "i32", "on", store=False)
    want, _ = _run(body, "i32", "off", store=False)
    assert stats["calls"] >= 3 and stats["fallbacks"] == 0, stats
    np.testing.assert_array_equal(got, want)
    assert (want[150:] == -3).all() and (want[:150] != -3).any()


def _wide_store_body(past: bool) -> str:
    """Loads through a descriptor of 2^40 bytes, 16 bytes at 0 (`past`: at 12t, past %a for
    the last lanes), in the run of a store of %out through a 600-byte descriptor."""
    body = _buffer_body(1 << 40, 0)
    if not past:
        body = body.replace("%q = arith.subi %o16, %off : i32", "%q = arith.subi %off, %off : i32")
    return body.replace("      %off = arith.muli", """      %c600 = arith.constant 600 : i64
      %ro = rocdl.make.buffer.rsrc %out, %stride, %c600, %flags : <1> to <8>
      %off = arith.muli""") + """
      %r2 = arith.muli %r, %r : i32
      rocdl.raw.ptr.buffer.store %r2, %ro, %off, %c0, 0 : i32"""


def test_a_run_that_stores_through_wide_descriptors_runs_natively():
    # windows not whole inside their tensors: a dry run checks every address first, then
    # the run stores (it never stops half way)
    body = _wide_store_body(False)
    got, stats = _run(body, "i32", "on", store=False)
    want, _ = _run(body, "i32", "off", store=False)
    assert stats["fallbacks"] == 0 and stats["calls"] >= 1, stats
    np.testing.assert_array_equal(got, want)


def test_a_run_that_would_stop_half_way_stores_nothing_before_the_error():
    # the last lanes' loads leave %a: the dry run finds it before any lane stores, and the
    # Python lines name the access, as the interpreter does, with %out untouched
    a, b = _edge_inputs()
    for native in ("off", "on"):
        out = np.full(N, -3, np.int32)
        with pytest.raises(EmuMemoryError, match="outside every tensor"):
            run_kernel(parse_module(_module(_wide_store_body(True), "i32", False)), "kern", grid=(1, 1, 1),
                       block=(N, 1, 1), args=[out, a, b], policy="lockstep", native=native)
        assert (out == -3).all(), native


def test_a_store_into_a_tensor_its_run_loads_runs_the_python_lines():
    # lane after lane, lane t would read lane t-1's new word; the interpreter loads all first
    body = _buffer_body(600, 4) + """
      %r2 = arith.muli %r, %r : i32
      %r3 = arith.xori %r2, %ia : i32
      rocdl.raw.ptr.buffer.store %r3, %rs, %off, %c0, 0 : i32
      %again = rocdl.raw.ptr.buffer.load %rs, %off, %c0, 0 : i32
      %k = arith.addi %again, %r : i32
      %r = arith.addi %k, %r3 : i32"""
    body = body.replace("%r = arith.addi %one, %sb : i32", "%r0 = arith.addi %one, %sb : i32")
    body = body.replace("%r2 = arith.muli %r, %r", "%r2 = arith.muli %r0, %r0").replace(
        "%k = arith.addi %again, %r :", "%k = arith.addi %again, %r0 :")
    got, stats = _run(body, "i32", "on")
    want, _ = _run(body, "i32", "off")
    assert stats["fallbacks"] >= 1, stats
    np.testing.assert_array_equal(got, want)


def test_a_replayed_launch_restores_what_native_stores_wrote(monkeypatch):
    # the memo keeps the bytes a launch wrote, from the written-byte masks native stores mark
    monkeypatch.setenv("FLYDSL_LDSSAN_NATIVE", "on")
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, 2048, generator=gen).to(torch.bfloat16)
    g = torch.randn(2048, generator=gen).to(torch.bfloat16)
    out = torch.zeros_like(x)
    stores = []

    def spy(run, ctx, ins):
        got = call(run, ctx, ins)
        stores.extend(w for w in run.windows if w[2] and got is not None and ctx.gmem.tracking)
        return got

    monkeypatch.setattr(R, "native", spy)
    with hook.sanitize("lockstep") as col:
        rms.rmsnorm(x, g, out=out)
        first = out.clone()
        out.zero_()  # the replay must write every byte the launch wrote
        rms.rmsnorm(x, g, out=out)
    assert [r.memo for r in col.results] == ["recorded", "replayed"]
    assert stores  # the first call's stores ran natively, with memory tracked
    assert torch.equal(first.view(torch.int16), out.view(torch.int16))
    assert not torch.equal(out, torch.zeros_like(out))


class _Ctx:
    L = 4


def test_an_unexpected_input_falls_back_to_python():
    run = NativeRun("NR0", (Slot(np.dtype(np.float32), 1, True),), (Slot(np.dtype(np.float32), 1, True),), ("x",),
                    fn=lambda *a: pytest.fail("the C must not run"))
    assert call(run, _Ctx, (np.zeros(4, np.int32),)) is None  # another dtype
    assert call(run, _Ctx, (np.zeros(5, np.float32),)) is None  # another lane count
    assert run.fallbacks == 2 and run.calls == 0


def test_no_compiler_runs_the_python_lines_and_says_why(monkeypatch):
    def fail(source):
        raise NativeBuildError("no C compiler: test")

    monkeypatch.setattr(codegen, "load_native", fail)
    codegen.clear_cache()
    body, out_type, width = CASES["bf16"]
    got, stats = _run(body, out_type, "on", width)
    codegen.clear_cache()
    want, _ = _run(body, out_type, "off", width)
    assert stats["calls"] == 0 and stats["not_built"] == "no C compiler: test"
    np.testing.assert_array_equal(got, want)


def test_compiled_runs_are_cached_on_disk_and_a_damaged_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = "#include <stdint.h>\nint64_t twice(int64_t x) { return 2 * x; }\n"
    lib = cc.load(source)
    lib.twice.restype = ctypes.c_int64
    assert lib.twice(ctypes.c_int64(21)) == 42
    so = cc.cache_dir() / f"{cc.digest(source)}.so"
    assert so.is_file()

    def no_compiler(*a, **k):
        raise AssertionError("compiled again")

    monkeypatch.setattr(cc.subprocess, "run", no_compiler)
    cc.load(source)  # from the cache
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    # a damaged object (never loaded by this process: a loaded one is never rewritten in place)
    other = source.replace("2 * x", "3 * x")
    damaged = cc.cache_dir() / f"{cc.digest(other)}.so"
    damaged.write_bytes(b"not an object")
    lib = cc.load(other)
    lib.twice.restype = ctypes.c_int64
    assert lib.twice(ctypes.c_int64(5)) == 15


def test_a_source_that_does_not_compile_is_a_named_error(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(NativeBuildError, match="the C compiler failed"):
        cc.load("this is not C\n")
    assert not list(cc.cache_dir().glob("*.so"))


def _rmsnorm(native: str):
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(64, 2048, generator=gen) * 3).to(torch.bfloat16)
    g = torch.randn(2048, generator=gen).to(torch.bfloat16)
    with emulate("lockstep", native=native) as cfg:
        y = rms.rmsnorm(x, g)
    return y, cfg.launches[-1].stats.get("native")


def test_bundled_rmsnorm_plain_is_bit_exact_with_native_runs():
    got, stats = _rmsnorm("on")
    want, _ = _rmsnorm("off")
    assert stats["calls"] > 0 and stats["compiled_ops"] > 0 and stats["fallbacks"] == 0, stats
    # the record names what cuts the runs: its LDS accesses, not the arithmetic it compiles
    assert "llvm.load" in stats["interpreted"] and "arith.mulf" not in stats["interpreted"], stats
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("name", ["a_no_barrier_1", "d_uninit_slot"])
def test_planted_bugs_are_reported_alike_with_native_runs(name, monkeypatch):
    edits = VARIANTS[name][0]
    mod = load_variant(rms, edits, tag=name)
    x, g = _inputs()
    seen = {}
    for native in ("on", "off"):
        monkeypatch.setenv("FLYDSL_LDSSAN_NATIVE", native)
        with hook.sanitize("lockstep", memo=0) as col:
            y = mod.rmsnorm(x, g)
        seen[native] = (y.view(torch.int16).clone(),
                        sorted((v.code, v.site.line, v.other_site.line if v.other_site else None, v.count)
                               for v in col.violations))
    assert seen["on"][1] and seen["on"][1] == seen["off"][1]
    assert torch.equal(seen["on"][0], seen["off"][0])


def test_auto_compiles_a_kernel_once_its_python_runs_would_pay_for_the_compile(tmp_path, monkeypatch):
    # an empty disk cache: "auto" runs the runs as Python first, and builds once the lane-ops
    # they ran that way are worth the compile (here: after about one launch's work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    codegen.clear_cache()
    first, stats = _rmsnorm("auto")
    assert stats["calls"] == 0 and stats["python_calls_before_build"] > 0, stats
    owed = next(p.native for p in codegen._CACHE.values() if p.native).owed
    monkeypatch.setattr(cc, "COMPILE_FIXED_S", owed * codegen.SAVED_PER_LANE_OP_S * 1.5)
    monkeypatch.setattr(cc, "COMPILE_PER_LINE_S", 0.0)
    codegen.clear_cache()
    seen = [_rmsnorm("auto") for _ in range(3)]
    assert seen[0][1]["calls"] == 0 and seen[1][1]["calls"] > 0, [s for _, s in seen]  # built in the 2nd
    assert seen[2][1].get("python_calls_before_build", 0) == 0 and seen[2][1]["calls"] > 0
    for y, _ in seen:
        assert torch.equal(y.view(torch.int16), first.view(torch.int16))
    # now on disk: a new process (a cleared translation cache) loads it at once
    codegen.clear_cache()
    _, stats = _rmsnorm("auto")
    assert stats["calls"] > 0 and "python_calls_before_build" not in stats, stats
