"""Op-level tests of the virtual gfx1250: small kernels written in MLIR, run on the emulator,
checked against plain numpy. Each exercises one semantic: masks, divergence, loops with
per-lane trip counts, cross-lane ops, buffer out-of-range rules, integer semantics."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu import UnsupportedOp
from ldssan.runtime.emu.launch import parse_module, run_kernel
from ldssan.runtime.emu.memory import EmuMemoryError


def module(body: str, params: str = "%out: !llvm.ptr<1>", lds_bytes: int = 256) -> str:
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    llvm.mlir.global external @lds() {{addr_space = 3 : i32, alignment = 16 : i64}} : !llvm.array<{lds_bytes} x i8>
    gpu.func @kern({params}) kernel {{
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
{body}
      gpu.return
    }}
  }}
}}"""


STORE_R = """
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""


def run(body: str, n: int = 64, *, block: int = 64, policy: str = "round-robin", extra_args=(),
        params: str = "%out: !llvm.ptr<1>", dtype=np.int32, batch: int = 1, grid: int = 1,
        lds_bytes: int = 512):
    out = np.zeros(n * grid if grid > 1 else n, dtype=dtype)
    view = parse_module(module(body, params, lds_bytes))
    run_kernel(view, "kern", grid=(grid, 1, 1), block=(block, 1, 1), args=[out, *extra_args],
               policy=policy, batch=batch)
    return out


T = np.arange(64, dtype=np.int32)


def test_divergent_if_runs_both_sides_under_masks():
    body = """
      %c16 = arith.constant 16 : i32
      %c1 = arith.constant 1 : i32
      %lt = arith.cmpi slt, %t, %c16 : i32
      %r = scf.if %lt -> (i32) {
        %a = arith.muli %t, %c16 : i32
        scf.yield %a : i32
      } else {
        %b = arith.subi %t, %c1 : i32
        scf.yield %b : i32
      }""" + STORE_R
    np.testing.assert_array_equal(run(body), np.where(T < 16, T * 16, T - 1))


def test_masked_store_leaves_inactive_lanes_untouched():
    body = """
      %c3 = arith.constant 3 : i32
      %c0 = arith.constant 0 : i32
      %c7 = arith.constant 7 : i32
      %m = arith.remsi %t, %c3 : i32
      %z = arith.cmpi eq, %m, %c0 : i32
      scf.if %z {
        %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %c7, %p : i32, !llvm.ptr<1>
      }"""
    np.testing.assert_array_equal(run(body), np.where(T % 3 == 0, 7, 0))


@pytest.mark.parametrize("batch", [1, 2])
def test_loop_with_per_lane_trip_count(batch):
    # sum_{i < tid % 5} i, a loop whose trip count differs per lane
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c5 = arith.constant 5 : i32
      %n = arith.remsi %t, %c5 : i32
      %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %c0) -> (i32) : i32 {
        %a = arith.addi %acc, %i : i32
        scf.yield %a : i32
      }""" + STORE_R
    n = T % 5
    want = n * (n - 1) // 2
    got = run(body, grid=2 if batch == 2 else 1, batch=batch)
    np.testing.assert_array_equal(got[:64], want)


def test_scf_while_with_per_lane_exit():
    # count steps of x -> x // 2 until x == 0, starting at tid
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c2 = arith.constant 2 : i32
      %w:2 = scf.while (%x = %t, %k = %c0) : (i32, i32) -> (i32, i32) {
        %go = arith.cmpi ne, %x, %c0 : i32
        scf.condition(%go) %x, %k : i32, i32
      } do {
      ^bb0(%x2: i32, %k2: i32):
        %h = arith.divsi %x2, %c2 : i32
        %k3 = arith.addi %k2, %c1 : i32
        scf.yield %h, %k3 : i32, i32
      }
      %r = arith.addi %w#1, %c0 : i32""" + STORE_R
    want = np.array([int(x).bit_length() for x in T])
    np.testing.assert_array_equal(run(body), want)


@pytest.mark.parametrize("mode, expect", [
    ("xor", lambda L: L ^ 5), ("down", lambda L: np.where((L % 32) + 3 < 32, L + 3, L)),
    # MLIR's gpu-to-rocdl lowering checks only the upper bound: `up` wraps within the wave
    ("up", lambda L: L - L % 32 + (L % 32 - 3) % 32),
])
def test_gpu_shuffle_stays_within_the_wave(mode, expect):
    off = 5 if mode == "xor" else 3
    body = f"""
      %off = arith.constant {off} : i32
      %w = arith.constant 32 : i32
      %r, %valid = gpu.shuffle {mode} %t, %off, %w : i32""" + STORE_R
    np.testing.assert_array_equal(run(body), expect(T))


def test_readfirstlane_takes_the_first_active_lane():
    body = """
      %c4 = arith.constant 4 : i32
      %c100 = arith.constant 100 : i32
      %ge = arith.cmpi sge, %t, %c4 : i32
      %r = scf.if %ge -> (i32) {
        %f = rocdl.readfirstlane %t : i32
        scf.yield %f : i32
      } else {
        scf.yield %c100 : i32
      }""" + STORE_R
    # wave 0: first active lane is 4; wave 1 (lanes 32..63): 32
    np.testing.assert_array_equal(run(body), np.where(T < 4, 100, np.where(T < 32, 4, 32)))


def test_buffer_load_out_of_range_reads_zero_and_store_is_dropped():
    src = np.arange(100, 164, dtype=np.int32)
    body = """
      %c0 = arith.constant 0 : i32
      %c4 = arith.constant 4 : i32
      %stride = arith.constant 0 : i16
      %nrec = arith.constant 80 : i64
      %flags = arith.constant 159744 : i32
      %rs = rocdl.make.buffer.rsrc %src, %stride, %nrec, %flags : <1> to <8>
      %ro = rocdl.make.buffer.rsrc %out, %stride, %nrec, %flags : <1> to <8>
      %off = arith.muli %t, %c4 : i32
      %v = rocdl.raw.ptr.buffer.load %rs, %off, %c0, 0 : i32
      %v1 = arith.addi %v, %c4 : i32
      rocdl.raw.ptr.buffer.store %v1, %ro, %off, %c0, 0 : i32"""
    got = run(body, params="%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", extra_args=[src])
    want = np.where(T < 20, src + 4, 0)  # 80 bytes = 20 words in range, on both sides
    np.testing.assert_array_equal(got, want)


def test_integer_semantics_match_c():
    vals = np.array([-7, 7, -8, 9], dtype=np.int32)
    body = """
      %c3 = arith.constant 3 : i32
      %c4 = arith.constant 4 : i32
      %cm7 = arith.constant -7 : i32
      %q = arith.divsi %cm7, %c3 : i32
      %rm = arith.remsi %cm7, %c3 : i32
      %sh = arith.shrui %cm7, %c4 : i32
      %fq = arith.floordivsi %cm7, %c3 : i32
      %i1 = arith.constant 1 : i32
      %i2 = arith.constant 2 : i32
      %i3 = arith.constant 3 : i32
      %p0 = llvm.getelementptr %out[0] : (!llvm.ptr<1>) -> !llvm.ptr<1>, i32
      %p1 = llvm.getelementptr %out[1] : (!llvm.ptr<1>) -> !llvm.ptr<1>, i32
      %p2 = llvm.getelementptr %out[2] : (!llvm.ptr<1>) -> !llvm.ptr<1>, i32
      %p3 = llvm.getelementptr %out[3] : (!llvm.ptr<1>) -> !llvm.ptr<1>, i32
      %z = arith.constant 0 : i32
      %first = arith.cmpi eq, %t, %z : i32
      scf.if %first {
        llvm.store %q, %p0 : i32, !llvm.ptr<1>
        llvm.store %rm, %p1 : i32, !llvm.ptr<1>
        llvm.store %sh, %p2 : i32, !llvm.ptr<1>
        llvm.store %fq, %p3 : i32, !llvm.ptr<1>
      }"""
    got = run(body)[:4]
    assert list(got) == [-2, -1, (2**32 - 7) >> 4, -3], vals


def test_vector_ops_and_bitcast():
    body = """
      %v0 = vector.broadcast %t : i32 to vector<4xi32>
      %c2 = arith.constant dense<[1, 2, 3, 4]> : vector<4xi32>
      %v1 = arith.muli %v0, %c2 : vector<4xi32>
      %s = vector.reduction <add>, %v1 : vector<4xi32> into i32
      %b = llvm.bitcast %v1 : vector<4xi32> to vector<8xi16>
      %e = vector.extract %b[2] : i16 from vector<8xi16>
      %e32 = arith.extsi %e : i16 to i32
      %r = arith.addi %s, %e32 : i32""" + STORE_R
    np.testing.assert_array_equal(run(body), T * 10 + T * 2)


def test_lds_store_then_other_wave_reads_after_barrier():
    body = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c63 = arith.constant 63 : i32
      %pl = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %t, %pl : i32, !llvm.ptr<3>
      gpu.barrier
      %j = arith.subi %c63, %t : i32
      %q = llvm.getelementptr %base[%j] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q : !llvm.ptr<3> -> i32""" + STORE_R
    for policy in ("round-robin", "reverse", "random(5)"):
        np.testing.assert_array_equal(run(body, policy=policy), 63 - T)


def test_global_access_outside_every_tensor_is_an_error():
    body = """
      %c1000 = arith.constant 100000 : i32
      %i = arith.addi %t, %c1000 : i32
      %p = llvm.getelementptr %out[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %t, %p : i32, !llvm.ptr<1>"""
    with pytest.raises(EmuMemoryError, match="outside every tensor"):
        run(body)


def test_unknown_op_names_the_op_and_the_source_line():
    src = module("""
      %r = rocdl.wavefrontsize : i32 loc("my_kernel.py":42:8)""")
    view = parse_module(src)
    with pytest.raises(UnsupportedOp, match=r"no implementation for 'rocdl.wavefrontsize' at my_kernel.py:42:8.*"
                                            r"ldssan env.*please report"):
        run_kernel(view, "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[np.zeros(64, np.int32)])


def test_non_finite_float_constants():
    body = """
      %ninf = arith.constant 0xFF800000 : f32
      %one = arith.constant 1.0 : f32
      %m = arith.maximumf %ninf, %one : f32
      %r = arith.fptosi %m : f32 to i32""" + STORE_R
    np.testing.assert_array_equal(run(body), 1)


@pytest.mark.parametrize("name", ["gpu.lane_id", "math.ctpop"])
def test_a_one_line_emitter_refuses_an_op_without_the_value_it_writes(name):
    # a malformed op (no result / no operand) is UnsupportedOp naming it, not an IndexError
    from types import SimpleNamespace

    from ldssan.runtime.emu.codegen import Translator
    from ldssan.runtime.emu.ops import load_all

    op = SimpleNamespace(name=name, loc='"k.py":3:4', results=[], operands=[])
    t = SimpleNamespace(unsupported=lambda o, d="": Translator.unsupported(None, o, d), mask="M0",
                        v=lambda vid: f"v{vid}", out=lambda text: pytest.fail(f"emitted {text!r}"))
    with pytest.raises(UnsupportedOp, match=f"'{name}' at \"k.py\":3:4"):
        load_all()[name](t, op)


def _ordered_sum(acc, xs):
    r = np.float32(acc)
    for x in xs:
        r = np.float32(r + np.float32(x))
    return r


def test_float_reduction_is_ordered_with_the_accumulator_first():
    # vector.reduction lowers to llvm.vector.reduce.fadd (no reassoc): ((acc + x0) + x1) + ...
    # with every step rounded to f32. Pairwise or acc-last summation rounds these differently.
    xs = [3e7, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    acc = 1.0e8
    dense = ", ".join(f"{x:e}" for x in xs)
    body = f"""
      %v = arith.constant dense<[{dense}]> : vector<8xf32>
      %c0 = arith.constant {acc:e} : f32
      %tf = arith.sitofp %t : i32 to f32
      %a = arith.addf %c0, %tf : f32
      %s = vector.reduction <add>, %v, %a : vector<8xf32> into f32
      %n = vector.reduction <add>, %v : vector<8xf32> into f32
      %sb = arith.bitcast %s : f32 to i32
      %nb = arith.bitcast %n : f32 to i32
      %r = arith.xori %sb, %nb : i32""" + STORE_R
    want = [(_ordered_sum(acc + t, xs).view(np.int32) ^ _ordered_sum(xs[0], xs[1:]).view(np.int32))
            for t in range(64)]
    # the case tells the orders apart: numpy's pairwise sum, and the accumulator added last
    assert np.sum(np.float32(xs)) != _ordered_sum(xs[0], xs[1:])
    assert np.sum(np.float32(xs)) + np.float32(acc) != _ordered_sum(acc, xs)
    np.testing.assert_array_equal(run(body), want)
