"""The 32x16x128 f4 scaled WMMA (`rocdl.wmma.scale[16].f32.32x16x128.f4`) on the virtual gfx1250,
checked against the op's definition computed here: fp4 e2m1 codes decoded with ml_dtypes'
float4_e2m1fn, block scales with float8_e8m0fnu (or float8_e4m3fn), each operand dequantized
with its scales, A·Bᵀ in float64, modC(C) added.

The per-lane fragments are packed here from the layout the public kernels use (sources: the
docstring of rt/wmma.py): A's 16 dwords are two 16-row fp4 operands (rows 0-15, then 16-31),
each row's 64 bytes cut into 16-byte runs that alternate between the lane halves; D's value v of
lane l is row (v // 8) * 16 + (l // 16) * 8 + v % 8, column l % 16; A's row r takes its scales
from lane r, B's row r from lane 16 * scaleBType + r. The expected value never comes from the
emulator."""

from __future__ import annotations

import ml_dtypes
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

SCALE = "rocdl.wmma.scale.f32.32x16x128.f4"
SCALE16 = "rocdl.wmma.scale16.f32.32x16x128.f4"
PARAMS = "%out: !llvm.ptr<1>, %a: !llvm.ptr<1>, %b: !llvm.ptr<1>, %c: !llvm.ptr<1>, %sa: !llvm.ptr<1>, %sb: !llvm.ptr<1>"
SCALE_DTYPE = {"e8": ml_dtypes.float8_e8m0fnu, "e4m3": ml_dtypes.float8_e4m3fn}

LANE = np.arange(32)[:, None]
VAL = np.arange(16)[None, :]
D_ROW = (VAL // 8) * 16 + (LANE // 16) * 8 + VAL % 8  # (lane, value) -> row of D (and C)
D_COL = np.broadcast_to(LANE % 16, (32, 16))


def fp4(codes: np.ndarray) -> np.ndarray:
    return codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)


def pack_16_rows(codes: np.ndarray) -> np.ndarray:
    """(16, 128) fp4 codes -> (32 lanes, 32 bytes): a row's bytes (even k in the low nibble)
    in 16-byte runs; lane half g holds runs g and g + 2 of row lane % 16."""
    row_bytes = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # (16, 64)
    lanes = [np.concatenate([row_bytes[lane % 16, 16 * g:16 * g + 16], row_bytes[lane % 16, 32 + 16 * g:48 + 16 * g]])
             for lane in range(32) for g in [lane // 16]]
    return np.array(lanes)


def pack_a(codes: np.ndarray) -> np.ndarray:
    """(32, 128) codes -> (32 lanes, 16 dwords): rows 0-15 in dwords 0-7, rows 16-31 in 8-15."""
    return np.concatenate([pack_16_rows(codes[:16]), pack_16_rows(codes[16:])], axis=1).view(np.int32)


def pack_b(codes: np.ndarray) -> np.ndarray:
    return pack_16_rows(codes).view(np.int32)


def lane_words(per_lane: np.ndarray) -> np.ndarray:
    """(32 lanes, blocks) scale bytes -> one i32 (4 blocks) or i64 (8 blocks) per lane."""
    return np.ascontiguousarray(per_lane, dtype=np.uint8).view(np.int32 if per_lane.shape[1] == 4 else np.int64).reshape(32)


def b_scale_words(codes: np.ndarray, opsel: int, rng) -> np.ndarray:
    """B's (16 rows, blocks) scale codes in lanes 16 * opsel + r; the other half holds other
    bytes the op must ignore."""
    lanes = rng.integers(100, 150, size=(32, codes.shape[1])).astype(np.uint8)
    lanes[16 * opsel:16 * opsel + 16] = codes
    return lane_words(lanes)


def scale_codes(rng, sfmt: str, shape) -> np.ndarray:
    """E8M0 exponents 121..132 or positive E4M3 codes 0x30..0x47 (0.5 .. 3.75)."""
    lo, hi = (121, 133) if sfmt == "e8" else (0x30, 0x48)
    return rng.integers(lo, hi, size=shape).astype(np.uint8)


def expected(A, sa, B, sb, C, sfmt=("e8", "e8"), mod="none") -> np.ndarray:
    """The definition: (A·SA)·(B·SB)ᵀ + modC(C) in float64; sa / sb are scale codes per row and block."""
    def deq(codes, s, f):
        return fp4(codes) * np.repeat(s.view(SCALE_DTYPE[f]).astype(np.float64), 128 // s.shape[1], axis=1)
    c = C.astype(np.float64)
    c = {"none": c, "neg": -c, "abs": np.abs(c), "neg_abs": -np.abs(c)}[mod]
    return deq(A, sa, sfmt[0]) @ deq(B, sb, sfmt[1]).T + c


def to_matrix(d: np.ndarray) -> np.ndarray:
    """D as 32 lanes x 16 values -> the 32x16 matrix."""
    m = np.zeros((32, 16))
    m[D_ROW, D_COL] = np.asarray(d).reshape(32, 16)
    return m


def assert_matches(out, want) -> None:
    np.testing.assert_allclose(to_matrix(out), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def kernel_body(op=SCALE, *, sel=("row0", "row0"), sfmt=("e8", "e8"), mod="none", a_dw=16, b_dw=8, c_n=16,
                divergent=False) -> str:
    st = "i64" if "scale16" in op else "i32"
    types = f"(vector<{a_dw}xi32>, vector<{b_dw}xi32>, vector<{c_n}xf32>, {st}, {st}) -> vector<{c_n}xf32>"
    wmma = (f"{op} %va, %vb, %vc, %vsa, %vsb, modC = {mod}, scaleAType = {sel[0]}, fmtScaleA = {sfmt[0]}, "
            f"scaleBType = {sel[1]}, fmtScaleB = {sfmt[1]} : {types}")
    if divergent:  # only lanes 0-15 take the branch that runs the WMMA; the others keep C
        wmma = f"""scf.if %lo -> (vector<{c_n}xf32>) {{
        %e = {wmma}
        scf.yield %e : vector<{c_n}xf32>
      }} else {{
        scf.yield %vc : vector<{c_n}xf32>
      }}"""
    return f"""
      %c16 = arith.constant 16 : i32
      %ca = arith.constant {a_dw} : i32
      %cb = arith.constant {b_dw} : i32
      %cc = arith.constant {c_n} : i32
      %lo = arith.cmpi slt, %t, %c16 : i32
      %oa = arith.muli %t, %ca : i32
      %ob = arith.muli %t, %cb : i32
      %oc = arith.muli %t, %cc : i32
      %pa = llvm.getelementptr %a[%oa] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %pb = llvm.getelementptr %b[%ob] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %pc = llvm.getelementptr %c[%oc] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      %psa = llvm.getelementptr %sa[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {st}
      %psb = llvm.getelementptr %sb[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, {st}
      %va = llvm.load %pa : !llvm.ptr<1> -> vector<{a_dw}xi32>
      %vb = llvm.load %pb : !llvm.ptr<1> -> vector<{b_dw}xi32>
      %vc = llvm.load %pc : !llvm.ptr<1> -> vector<{c_n}xf32>
      %vsa = llvm.load %psa : !llvm.ptr<1> -> {st}
      %vsb = llvm.load %psb : !llvm.ptr<1> -> {st}
      %d = {wmma}
      %po = llvm.getelementptr %out[%oc] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, f32
      llvm.store %d, %po : vector<{c_n}xf32>, !llvm.ptr<1>"""


def operands(seed: int, blocks: int = 4, sfmt=("e8", "e8")):
    rng = np.random.default_rng(seed)
    A = rng.integers(0, 16, size=(32, 128))
    B = rng.integers(0, 16, size=(16, 128))
    C = rng.standard_normal((32, 16)).astype(np.float32)
    return rng, A, B, C, scale_codes(rng, sfmt[0], (32, blocks)), scale_codes(rng, sfmt[1], (16, blocks))


def launch(op, A, sa, B, sb_words, C, policy="round-robin", **kw) -> np.ndarray:
    args = [pack_a(A), pack_b(B), np.ascontiguousarray(C[D_ROW, D_COL]), lane_words(sa), sb_words]
    return run(kernel_body(op, **kw), n=512, block=32, params=PARAMS, dtype=np.float32, extra_args=args, policy=policy)


@pytest.mark.parametrize("op, policy", [(SCALE, "round-robin"), (SCALE, "lockstep"), (SCALE16, "random(5)")])
def test_matches_the_definition(op, policy):
    blocks = 8 if op == SCALE16 else 4
    rng, A, B, C, sa, sb = operands(0, blocks)
    out = launch(op, A, sa, B, b_scale_words(sb, 0, rng), C, policy=policy)
    assert_matches(out, expected(A, sa, B, sb, C))


@pytest.mark.parametrize("op", [SCALE, SCALE16])
def test_scale_b_row1_takes_b_scales_from_the_upper_lanes(op):
    rng, A, B, C, sa, sb = operands(1, 8 if op == SCALE16 else 4)
    out = launch(op, A, sa, B, b_scale_words(sb, 1, rng), C, sel=("row0", "row1"))
    assert_matches(out, expected(A, sa, B, sb, C))


@pytest.mark.parametrize("mod", ["neg", "abs", "neg_abs"])
def test_c_modifier_applies_to_the_accumulator(mod):
    rng, A, B, C, sa, sb = operands(2)
    out = launch(SCALE, A, sa, B, b_scale_words(sb, 0, rng), C, mod=mod)
    assert_matches(out, expected(A, sa, B, sb, C, mod=mod))


@pytest.mark.parametrize("sfmt", [("e4m3", "e4m3"), ("e8", "e4m3")])
def test_e4m3_scale_format(sfmt):
    rng, A, B, C, sa, sb = operands(3, sfmt=sfmt)
    out = launch(SCALE, A, sa, B, b_scale_words(sb, 0, rng), C, sfmt=sfmt)
    assert_matches(out, expected(A, sa, B, sb, C, sfmt=sfmt))


@pytest.mark.parametrize("op, a_row, a_block, b_row, b_block", [
    (SCALE, 21, 2, 5, 1),     # an upper-half A row (dwords 8-15, scales in lane 21)
    (SCALE16, 30, 5, 9, 6),   # block 5 of 16 K = K 80..95
])
def test_one_block_scale_changes_exactly_its_products(op, a_row, a_block, b_row, b_block):
    """Raising one scale of A row `a_row` (B row `b_row`, scales in the upper lanes) by 2^3
    changes D's row (column) by 7x that block's partial products and nothing else."""
    blocks = 8 if op == SCALE16 else 4
    width = 128 // blocks
    rng, A, B, _, _, _ = operands(4, blocks)
    zero_c = np.zeros((32, 16), np.float32)
    ones_a, ones_b = np.full((32, blocks), 127, np.uint8), np.full((16, blocks), 127, np.uint8)
    bumped_a, bumped_b = ones_a.copy(), ones_b.copy()
    bumped_a[a_row, a_block] = bumped_b[b_row, b_block] = 130

    def d(sa, sb):
        return to_matrix(launch(op, A, sa, B, b_scale_words(sb, 1, rng), zero_c, sel=("row0", "row1")))

    base = d(ones_a, ones_b)
    ka = slice(width * a_block, width * a_block + width)
    kb = slice(width * b_block, width * b_block + width)
    delta_a = d(bumped_a, ones_b) - base
    np.testing.assert_allclose(delta_a[a_row], 7 * fp4(A[a_row, ka]) @ fp4(B[:, ka]).T, rtol=1e-6, atol=1e-6)
    assert not np.delete(delta_a, a_row, axis=0).any()
    delta_b = d(ones_a, bumped_b) - base
    np.testing.assert_allclose(delta_b[:, b_row], 7 * fp4(A[:, kb]) @ fp4(B[b_row, kb]), rtol=1e-6, atol=1e-6)
    assert not np.delete(delta_b, b_row, axis=1).any()


def test_in_a_divergent_branch_only_the_active_lanes_receive_d():
    """The WMMA reads every lane's operand registers (it is one wave-wide product, as in the
    16-row form); lanes that did not take the branch keep their C."""
    rng, A, B, C, sa, sb = operands(5)
    out = launch(SCALE, A, sa, B, b_scale_words(sb, 0, rng), C, divergent=True).reshape(32, 16)
    want = expected(A, sa, B, sb, C)[D_ROW, D_COL]
    np.testing.assert_allclose(out[:16], want[:16], rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(out[16:], C[D_ROW, D_COL][16:])


@pytest.mark.parametrize("kw, needle", [
    ({"sel": ("row1", "row0")}, "scaleAType = row1: which lanes then supply A's scales is not public"),
    ({"a_dw": 8}, "A is vector<8xi32>; the op takes 16 dwords per lane"),
    ({"b_dw": 16}, "B is vector<16xi32>; the op takes 8 dwords per lane"),
    ({"c_n": 8}, "C is vector<8xf32>; the op takes 16 f32 per lane"),
    ({"sfmt": ("e5m3", "e8")}, "fmtScaleA = e5m3"),
], ids=["scaleA-row1", "A-too-short", "B-too-long", "C-too-short", "e5m3-scales"])
def test_unsupported_forms_are_named_errors(kw, needle):
    with pytest.raises(UnsupportedOp) as info:
        run(kernel_body(SCALE, **kw), n=512, block=32, params=PARAMS, dtype=np.float32,
            extra_args=[np.zeros(512, np.int32)] * 2 + [np.zeros(512, np.float32)] + [np.zeros(32, np.int32)] * 2)
    assert needle in str(info.value) and SCALE in str(info.value)


def test_batched_workgroups_on_the_lane_axis():
    """Two workgroups run in lockstep (batch=2) are two independent 32-lane groups."""
    groups = [operands(6 + g) for g in range(2)]
    frags = [np.concatenate(parts) for parts in zip(*[
        (pack_a(A), pack_b(B), C[D_ROW, D_COL], lane_words(sa), b_scale_words(sb, 1, rng))
        for rng, A, B, C, sa, sb in groups])]
    d = R.wmma_f4_32x16(*frags, opsel_b=1)
    for g, (_, A, B, C, sa, sb) in enumerate(groups):
        assert_matches(d[32 * g:32 * g + 32], expected(A, sa, B, sb, C))


# A FlyDSL kernel calling the op through FlyDSL's builder (`fx.rocdl`) as aiter's MoE kernel
# does: A's 32 rows are one operand, B's scales from the upper lanes.
@flyc.kernel
def _f4_mma(A: fx.Tensor, B: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor, C: fx.Tensor, Out: fx.Tensor):
    tid = fx.thread_idx.x
    a = Vec.from_elements([A[tid * 16 + j] for j in range_constexpr(16)], fx.Int32)
    b = Vec.from_elements([B[tid * 8 + j] for j in range_constexpr(8)], fx.Int32)
    c = Vec.from_elements([C[tid * 16 + v] for v in range_constexpr(16)], fx.Float32)
    d = Vec(rocdl.wmma_scale_f32_32x16x128_f4(T.vec(16, T.f32), a, b, c, SA[tid], SB[tid], scaleBType=1))
    for v in range_constexpr(16):
        Out[tid * 16 + v] = d[v]


@flyc.jit
def f4_mma(A: fx.Tensor, B: fx.Tensor, SA: fx.Tensor, SB: fx.Tensor, C: fx.Tensor, Out: fx.Tensor,
           stream: fx.Stream = fx.Stream(None)):
    _f4_mma(A, B, SA, SB, C, Out).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)


def test_flydsl_kernel_with_the_rocdl_builder():
    rng, A, B, C, sa, sb = operands(8)
    out = torch.zeros(512, dtype=torch.float32)
    with emulate("random(2)"):
        f4_mma(torch.from_numpy(pack_a(A).reshape(-1)), torch.from_numpy(pack_b(B).reshape(-1)),
               torch.from_numpy(lane_words(sa)), torch.from_numpy(b_scale_words(sb, 1, rng)),
               torch.from_numpy(np.ascontiguousarray(C[D_ROW, D_COL]).reshape(-1)), out)
    assert_matches(out.numpy(), expected(A, sa, B, sb, C))
