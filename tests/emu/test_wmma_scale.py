"""Scaled WMMA (`rocdl.wmma.scale[16].f32.16x16x128.f8f6f4`) on the virtual gfx1250, checked
against the op's definition computed here independently: every element is decoded from its
bits with the OCP MX formula (not ml_dtypes, which the emulator uses), A and B are
dequantized with their block scales, multiplied in float64 and C is added.

The per-lane fragments are packed here from the layout statement in `rt/wmma.py` (a row's
packed bytes cut into runs that alternate between the lane halves); the expected value never
comes from the emulator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import range_constexpr, rocdl
from flydsl.expr.typing import T, Vector as Vec
from ldssan.runtime.emu import UnsupportedOp, emulate
from ldssan.runtime.emu import rt as R

from .test_ops import run

# name -> (exponent bits, mantissa bits, bias, codes that are NaN / Inf and so never drawn)
FORMATS = {
    "fp8_e4m3": (4, 3, 7, {0x7F, 0xFF}),
    "fp8_e5m2": (5, 2, 15, {c for c in range(256) if (c >> 2) & 0x1F == 0x1F}),
    "fp6_e2m3": (2, 3, 1, set()),
    "fp6_e3m2": (3, 2, 3, set()),
    "fp4_e2m1": (2, 1, 1, set()),
}
RUN_ELEMS = {8: 16, 6: 16, 4: 32}  # elements per lane-half run, the layout under test


def decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    """OCP MX element value of each code: (-1)^s * 2^(e-bias) * (1 + m/2^M), subnormal at e=0."""
    e_bits, m_bits, bias, _ = FORMATS[fmt]
    codes = codes.astype(np.int64)
    sign = np.where((codes >> (e_bits + m_bits)) & 1, -1.0, 1.0)
    exp = (codes >> m_bits) & ((1 << e_bits) - 1)
    man = codes & ((1 << m_bits) - 1)
    frac = man / float(1 << m_bits)
    mag = np.where(exp == 0, frac * 2.0 ** (1 - bias), (1 + frac) * 2.0 ** (exp - bias))
    return sign * mag


def bits_of(fmt: str) -> int:
    e_bits, m_bits, _, _ = FORMATS[fmt]
    return 1 + e_bits + m_bits


def random_codes(rng, fmt: str, shape) -> np.ndarray:
    bad = FORMATS[fmt][3]
    allowed = np.array([c for c in range(1 << bits_of(fmt)) if c not in bad])
    return rng.choice(allowed, size=shape)


def pack_rows(codes: np.ndarray, fmt: str) -> np.ndarray:
    """(16, 128) codes -> (32 lanes, bytes) fragments: each row as a little-endian bit string,
    cut into runs of RUN_ELEMS elements; lane half g holds runs g, g+2, ... of row lane%16."""
    w = bits_of(fmt)
    run_bytes = RUN_ELEMS[w] * w // 8
    lanes = []
    for lane in range(32):
        row = codes[lane % 16]
        bitstring = "".join(format(int(c), f"0{w}b")[::-1] for c in row)  # LSB first
        row_bytes = [int(bitstring[i:i + 8][::-1], 2) for i in range(0, len(bitstring), 8)]
        runs = [row_bytes[i:i + run_bytes] for i in range(0, len(row_bytes), run_bytes)]
        lanes.append([b for r in runs[lane // 16::2] for b in r])
    return np.array(lanes, dtype=np.uint8).view(np.int32)


def scale_words(exps: np.ndarray, opsel: int, rng) -> np.ndarray:
    """(16 rows, blocks) E8M0 exponents -> per-lane scale operand: row r in lane 16*opsel + r,
    byte j = block j; the other lane half holds different bytes the op must ignore."""
    blocks = exps.shape[1]
    lanes = rng.integers(100, 150, size=(32, blocks)).astype(np.uint8)
    lanes[16 * opsel:16 * opsel + 16] = exps
    return lanes.view(np.int32 if blocks == 4 else np.int64).reshape(32)


def cd_positions():
    lane = np.arange(32)[:, None]
    return (lane // 16) * 8 + np.arange(8)[None, :], np.broadcast_to(lane % 16, (32, 8))


C_MOD = {"none": lambda c: c, "neg": lambda c: -c, "abs": np.abs, "neg_abs": lambda c: -np.abs(c)}


def kernel_body(op: str, fa: str, fb: str, *, sel=("row0", "row0"), sfmt=("e8", "e8"), mod="none",
                a_dwords=None, b_dwords=None) -> str:
    na = a_dwords or 2 * bits_of(fa)
    nb = b_dwords or 2 * bits_of(fb)
    st = "i64" if "scale16" in op else "i32"
    return f"""
      %c8 = arith.constant 8 : i32
      %ca = arith.constant {na} : i32
      %cb = arith.constant {nb} : i32
      %oa = arith.muli %t, %ca : i32
      %ob = arith.muli %t, %cb : i32
      %oc = arith.muli %t, %c8 : i32
      %pa = llvm.getelementptr %a[%oa] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %pb = llvm.getelementptr %b[%ob] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %pc = llvm.getelementptr %c[%oc] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      %psa = llvm.getelementptr %sa[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {st}
      %psb = llvm.getelementptr %sb[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {st}
      %va = llvm.load %pa : !llvm.ptr<1> -> vector<{na}xi32>
      %vb = llvm.load %pb : !llvm.ptr<1> -> vector<{nb}xi32>
      %vc = llvm.load %pc : !llvm.ptr<1> -> vector<8xf32>
      %vsa = llvm.load %psa : !llvm.ptr<1> -> {st}
      %vsb = llvm.load %psb : !llvm.ptr<1> -> {st}
      %d = {op} %va, %vb, %vc, %vsa, %vsb, fmtA = {fa}, fmtB = {fb}, modC = {mod}, scaleAType = {sel[0]}, fmtScaleA = {sfmt[0]}, scaleBType = {sel[1]}, fmtScaleB = {sfmt[1]} : (vector<{na}xi32>, vector<{nb}xi32>, vector<8xf32>, {st}, {st}) -> vector<8xf32>
      %po = llvm.getelementptr %out[%oc] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %d, %po : vector<8xf32>, !llvm.ptr<1>"""


PARAMS = "%out: !llvm.ptr<1>, %a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>, %sa: !llvm.ptr<1>, %sb: !llvm.ptr<1>"
SCALED = "rocdl.wmma.scale.f32.16x16x128.f8f6f4"
SCALED16 = "rocdl.wmma.scale16.f32.16x16x128.f8f6f4"


def scale_codes(rng, sfmt: str, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Random scale bytes (16 rows, blocks) and their values: E8M0 2^(e-127) for e in
    121..132, or positive E4M3 codes 0x30..0x47 (0.5 .. 3.75)."""
    if sfmt == "e8":
        codes = rng.integers(121, 133, size=(16, blocks)).astype(np.uint8)
        return codes, 2.0 ** (codes.astype(np.float64) - 127)
    codes = rng.integers(0x30, 0x48, size=(16, blocks)).astype(np.uint8)
    return codes, decode(codes, "fp8_e4m3")


def check(op: str, fa: str, fb: str, *, seed=0, opsel=(0, 0), mod="none", sfmt=("e8", "e8"),
          policy="round-robin"):
    rng = np.random.default_rng(seed)
    blocks = 8 if "scale16" in op else 4
    A = random_codes(rng, fa, (16, 128))
    B = random_codes(rng, fb, (16, 128))
    C = rng.standard_normal((16, 16)).astype(np.float32)
    ea, sa = scale_codes(rng, sfmt[0], blocks)
    eb, sb = scale_codes(rng, sfmt[1], blocks)
    m, n = cd_positions()
    args = [pack_rows(A, fa), pack_rows(B, fb), np.ascontiguousarray(C[m, n]),
            scale_words(ea, opsel[0], rng), scale_words(eb, opsel[1], rng)]
    sel = tuple(f"row{s}" for s in opsel)
    out = run(kernel_body(op, fa, fb, sel=sel, mod=mod, sfmt=sfmt), n=256, block=32, params=PARAMS,
              dtype=np.float32, extra_args=args, policy=policy)
    assert_matches(out, expected(A, fa, sa, B, fb, sb, C, mod))


def expected(A, fa, sa, B, fb, sb, C, mod="none") -> np.ndarray:
    """The definition: dequantize each operand with its block scales, A·Bᵀ + modC(C), float64."""
    deq_a = decode(A, fa) * np.repeat(sa, 128 // sa.shape[1], axis=1)
    deq_b = decode(B, fb) * np.repeat(sb, 128 // sb.shape[1], axis=1)
    return deq_a @ deq_b.T + C_MOD[mod](C.astype(np.float64))


def assert_matches(out: np.ndarray, want: np.ndarray) -> None:
    """`out` is the D operand as 32 lanes x 8 values."""
    m, n = cd_positions()
    got = np.zeros((16, 16))
    got[m, n] = np.asarray(out).reshape(32, 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("fa, fb", list(itertools.product(FORMATS, FORMATS)))
def test_every_format_pair_matches_the_definition(fa, fb):
    check(SCALED, fa, fb)


@pytest.mark.parametrize("fa, fb", [("fp4_e2m1", "fp8_e4m3"), ("fp8_e5m2", "fp6_e3m2"), ("fp6_e2m3", "fp4_e2m1")])
def test_scale16_uses_one_scale_per_16_elements(fa, fb):
    check(SCALED16, fa, fb, seed=1)


@pytest.mark.parametrize("opsel", [(1, 0), (0, 1), (1, 1)])
def test_scale_opsel_takes_the_scales_from_the_upper_lanes(opsel):
    check(SCALED, "fp8_e4m3", "fp4_e2m1", seed=2, opsel=opsel, policy="random(3)")


@pytest.mark.parametrize("mod", ["neg", "abs", "neg_abs"])
def test_c_modifier_applies_to_the_accumulator(mod):
    check(SCALED, "fp4_e2m1", "fp4_e2m1", seed=3, mod=mod)


@pytest.mark.parametrize("op, sfmt", [(SCALED, ("e4m3", "e8")), (SCALED16, ("e4m3", "e4m3"))])
def test_e4m3_scale_format(op, sfmt):
    check(op, "fp4_e2m1", "fp4_e2m1", seed=5, sfmt=sfmt)


def test_block_scales_apply_per_32_element_block():
    """One block of one row scaled by 2^3 changes exactly that row's products by that block."""
    fa = fb = "fp8_e4m3"
    rng = np.random.default_rng(4)
    A = random_codes(rng, fa, (16, 128))
    B = random_codes(rng, fb, (16, 128))
    m, n = cd_positions()
    zeros_c = np.zeros((32, 8), np.float32)

    def launch(ea):
        ones_b = np.full((16, 4), 127, np.uint8)
        args = [pack_rows(A, fa), pack_rows(B, fb), zeros_c, scale_words(ea, 0, rng), scale_words(ones_b, 0, rng)]
        out = run(kernel_body(SCALED, fa, fb), n=256, block=32, params=PARAMS, dtype=np.float32, extra_args=args)
        got = np.zeros((16, 16))
        got[m, n] = out.reshape(32, 8)
        return got

    ones = np.full((16, 4), 127, np.uint8)
    bumped = ones.copy()
    bumped[5, 2] = 130
    delta = launch(bumped) - launch(ones)
    part = decode(A, fa)[5, 64:96] @ decode(B, fb)[:, 64:96].T
    np.testing.assert_allclose(delta[5], 7 * part, rtol=1e-5, atol=1e-4)
    assert not np.delete(delta, 5, axis=0).any()


@pytest.mark.parametrize("body, needle", [
    (kernel_body(SCALED, "fp8_e4m3", "fp8_e4m3", a_dwords=8), "operand A has 8 dwords per lane; fp8_e4m3 needs 16"),
    (kernel_body(SCALED, "fp4_e2m1", "fp6_e2m3", b_dwords=8), "operand B has 8 dwords per lane; fp6_e2m3 needs 12"),
    (kernel_body(SCALED, "fp4_e2m1", "fp4_e2m1", sfmt=("e5m3", "e8")), "fmtScaleA = e5m3"),
], ids=["A-too-short", "B-too-short", "e5m3-scales"])
def test_unsupported_forms_are_named_errors(body, needle):
    with pytest.raises(UnsupportedOp) as info:
        run(body, n=256, block=32, params=PARAMS, dtype=np.float32,
            extra_args=[np.zeros(512, np.int32)] * 2 + [np.zeros(256, np.float32)] + [np.zeros(64, np.int32)] * 2)
    assert needle in str(info.value) and "rocdl.wmma.scale" in str(info.value)


# A FlyDSL kernel calling the op through FlyDSL's own builder (`fx.rocdl`), launched as its
# author would: the a8w4 combination (fp4 A, fp8 B), A's scales from the upper lanes.
A_DW, B_DW = 8, 16


@flyc.kernel
def _scaled_mma(A: fx.Tensor, B: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor, C: fx.Tensor, Out: fx.Tensor):
    tid = fx.thread_idx.x
    a = Vec.from_elements([A[tid * A_DW + j] for j in range_constexpr(A_DW)], fx.Int32)
    b = Vec.from_elements([B[tid * B_DW + j] for j in range_constexpr(B_DW)], fx.Int32)
    c = Vec.from_elements([C[tid * 8 + v] for v in range_constexpr(8)], fx.Float32)
    d = Vec(rocdl.wmma_scale_f32_16x16x128_f8f6f4(T.vec(8, T.f32), a, b, c, SA[tid], SB[tid],
                                                  fmtA=4, fmtB=0, scaleAType=1))
    for v in range_constexpr(8):
        Out[tid * 8 + v] = d[v]


@flyc.jit
def scaled_mma(A: fx.Tensor, B: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor, C: fx.Tensor, Out: fx.Tensor,
               stream: fx.Stream = fx.Stream(None)):
    _scaled_mma(A, B, SA, SB, C, Out).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)


@pytest.mark.parametrize("policy", ["round-robin", "random(11)"])
def test_flydsl_kernel_with_the_rocdl_builder(policy):
    rng = np.random.default_rng(6)
    A = random_codes(rng, "fp4_e2m1", (16, 128))
    B = random_codes(rng, "fp8_e4m3", (16, 128))
    C = rng.standard_normal((16, 16)).astype(np.float32)
    ea, sa = scale_codes(rng, "e8", 4)
    eb, sb = scale_codes(rng, "e8", 4)
    m, n = cd_positions()
    out = torch.zeros(256, dtype=torch.float32)
    with emulate(policy):
        scaled_mma(torch.from_numpy(pack_rows(A, "fp4_e2m1").reshape(-1)),
                   torch.from_numpy(pack_rows(B, "fp8_e4m3").reshape(-1)),
                   torch.from_numpy(scale_words(ea, 1, rng)), torch.from_numpy(scale_words(eb, 0, rng)),
                   torch.from_numpy(np.ascontiguousarray(C[m, n]).reshape(-1)), out)
    assert_matches(out.numpy(), expected(A, "fp4_e2m1", sa, B, "fp8_e4m3", sb, C))


def test_batched_workgroups_on_the_lane_axis():
    """Two workgroups run in lockstep (batch=2) are two independent 32-lane groups."""
    rng = np.random.default_rng(7)
    groups = []
    for _ in range(2):
        A, B = random_codes(rng, "fp6_e3m2", (16, 128)), random_codes(rng, "fp8_e5m2", (16, 128))
        (ea, sa), (eb, sb) = scale_codes(rng, "e8", 4), scale_codes(rng, "e8", 4)
        groups.append((A, B, ea, sa, eb, sb, rng.standard_normal((16, 16)).astype(np.float32)))
    m, n = cd_positions()
    frag = [np.concatenate(parts) for parts in zip(*[
        (pack_rows(A, "fp6_e3m2"), pack_rows(B, "fp8_e5m2"), C[m, n], scale_words(ea, 0, rng), scale_words(eb, 0, rng))
        for A, B, ea, _, eb, _, C in groups])]
    d = R.wmma(frag[0], frag[1], frag[2], "fp6_e3m2", "fp8_e5m2", 128, scale_a=frag[3], scale_b=frag[4])
    for g, (A, B, _, sa, _, sb, C) in enumerate(groups):
        assert_matches(d[32 * g:32 * g + 32], expected(A, "fp6_e3m2", sa, B, "fp8_e5m2", sb, C))
