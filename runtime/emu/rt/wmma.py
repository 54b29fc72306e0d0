"""gfx1250 WMMA (wave32, 16x16xK and the 32x16x128 f4 form): D = A·Bᵀ + C with the hardware
lane layouts.

Lane layouts (as FlyDSL's gfx1250 MMA atoms define them; re-derived, not copied):
- A (16xK) and B (16xK, i.e. N x K): lane l holds row l % 16; its value i (of K/2) sits at
  K = (i // 8) * 16 + (l // 16) * 8 + i % 8 for 8/16-bit elements, K = (l // 16) * 2 + i for f32.
- C/D (16x16): lane l, value v: M = (l // 16) * 8 + v, N = l % 16.
Products are exact and accumulate in float64, rounded once to the accumulator type: within
tolerance of the hardware, whose internal accumulation order is undocumented.

Scaled WMMA (`wmma(..., scale_a=, scale_b=)`; V_WMMA_SCALE[16]_F32_16X16X128_F8F6F4,
llvm.amdgcn.wmma.scale[16].f32.16x16x128.f8f6f4): D = (A·SA)·(B·SB)ᵀ + modC(C), 16x16x128,
f32 accumulator. Sources: the ROCDL op definition and FlyDSL's `expr/rocdl` wrapper (formats
0..4 = fp8 e4m3, fp8 e5m2 (bf8), fp6 e2m3, bf6 e3m2, fp4 e2m1; scale formats e8 = E8M0,
e4m3; C modifier none/neg/abs/neg_abs; reuse bits are scheduling hints), the LLVM intrinsic
(A/B are <16|12|8 x i32> for 8/6/4-bit elements), Triton's gfx1250 lowering (scale opsel 0 uses
the scales in lanes 0-15, 1 in lanes 16-31; scaled operands have kWidth 16 bytes) and FlyDSL's
a8w4/a8w8 gfx1250 GEMMs (how they load operands and preshuffle scales; both run on this
emulator within their upstream test tolerances, which a wrong fp4-vs-fp8 K order would break).
- A and B (16 rows x 128, B as N x K): lane l holds row l % 16. The row's elements are packed
  densely, element k at bits [k*w, (k+1)*w) of the row (fp4: even k in the low nibble). The
  row is cut into runs of R elements (fp8: 16 = 16 bytes, fp4: 32 = 16 bytes); the lanes
  16 * g .. 16 * g + 15 hold the runs g, g + 2, g + 4, ..., concatenated: value i of lane l
  is K = (i // R) * 2R + (l // 16) * R + i % R.
  ASSUMPTION for fp6/bf6: R = 16 (12 bytes), i.e. the fp8 K order packed at 6 bits. No public
  source gives the fp6 register layout; this is the one line (`_RUN`) to change if hardware
  disagrees.
- Scales: one byte per block of 32 K (scale: i32, 4 blocks) or 16 K (scale16: i64, 8 blocks),
  byte j (little-endian) for K block j; row/column r's scales come from lane r (opsel row0) or
  lane 16 + r (row1). E8M0 is 2^(e - 127), 0xFF NaN.

The 32x16x128 f4 form (`wmma_f4_32x16`; V_WMMA_SCALE[16]_F32_32X16X128_F4,
llvm.amdgcn.wmma.scale[16].f32.32x16x128.f4): D (32x16) = (A·SA)·(B·SB)ᵀ + modC(C), A 32x128
and B 16x128, both fp4 e2m1 (the op has no format operands). FlyDSL's own atom layouts for
this shape (MmaAtomScale.cpp) are marked provisional, "derived by analogy", and disagree with
the facts below; these come from code written for the instruction and checked against a
reference: aiter's opus WMMA test (test_wmma_scale.cu, "confirmed by probing", exact match
with uniform scales), FlyDSL's fp4 GEMM (gemm_fp8fp4_gfx1250.py, FlyDSL commit fce66db4; its
test matches exactly with random per-block E8M0 scales) and aiter's grouped MoE a4w4 kernel
(mxfp4_preshuffle_gfx1250_tdm.py with its shuffle_weight / shuffle_scale_n32k4 preshuffles,
tested with random per-block weight scales), with the scale-lane rule of LLVM's
amdgpu.scaled_wmma.
- A (16 dwords per lane): dwords 0-7 are rows 0-15, dwords 8-15 rows 16-31; each half is laid
  out as a 16-row fp4 operand above (row lane % 16, runs of 32 elements alternating between
  the lane halves). All three sources. The opus test's comment gives each lane half one
  contiguous K half instead; its check (uniform scales, the same order in A and B) cannot
  tell the two apart, while the two kernels' per-block scales fix the run order.
- B (8 dwords): the 16-row fp4 operand above.
- C/D (16 floats): lane l, value v: M = (v // 8) * 16 + (l // 16) * 8 + v % 8, N = l % 16,
  i.e. values 0-7 and 8-15 are the 16x16 C layout of rows 0-15 and 16-31. All three sources.
- A's scales: row r's from lane r, all 32 lanes ("matrix A gets 128 scales in a full VGPR",
  LLVM amdgpu.scaled_wmma; FlyDSL's and aiter's scale preshuffles); byte j for K block j as
  above. scaleAType must be row0: LLVM's verifier requires a_first_scale_lane = 0 for this
  shape while composable_kernel passes 1, so what row1 selects is not public (refused).
- B's scales: as the 16-row form, lanes 0-15 (row0) or 16-31 (row1) (aiter's MoE kernel
  selects with scaleBType; LLVM: "matrix B gets 64 scales in half a VGPR"; FlyDSL's GEMM test
  skips row1 as ignored by the AM simulator).
- scale16 (i64, 8 blocks of 16 K): byte j for K block j as in the 16x16 form; for 32 rows,
  composable_kernel's gfx1250 scale preshuffle is the identity for block 16 ("the natural
  row-major scale layout already matches") with one lane per row. The opus test runs it with
  uniform scales only.
Cross-check: aiter's grouped MoE a4w4 GEMM itself (a_is_fp4, 32-row tiles so both scaleBType
values occur, random per-block scales on both sides), run on this emulator, equals a float64
reference rounded to bf16 in every element; a fp4 run of 64 instead of 32, A's upper rows
taking lanes 0-15's scales, or B's opsel ignored each break that.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ldssan.passes.ir.caches import register_cache

# Element types by their name in the op name (`rocdl.wmma.f32.16x16x32.bf16`).
WMMA_ELEM = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32,
             "fp8": ml_dtypes.float8_e4m3fn, "bf8": ml_dtypes.float8_e5m2, "iu8": np.int8, "i8": np.int8}


@register_cache
@functools.lru_cache(maxsize=None)
def layout_ab(K: int, elem_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, k) of each (lane, value) of an A or B fragment (the statement of the layout;
    `_matrix` applies it as a reshape)."""
    lane = np.arange(32)[:, None]
    i = np.arange(K // 2)[None, :]
    if elem_bits == 32:
        k = (lane // 16) * 2 + i
    else:
        k = (i // 8) * 16 + (lane // 16) * 8 + i % 8
    rows = np.broadcast_to(lane % 16, k.shape).copy()
    rows.flags.writeable = False
    k.flags.writeable = False
    return rows, k


_LANE = np.arange(32)[:, None]
CD_M = (_LANE // 16) * 8 + np.arange(8)[None, :]
CD_N = np.broadcast_to(_LANE % 16, (32, 8))


@register_cache
@functools.lru_cache(maxsize=None)
def code_table(dtype) -> np.ndarray:
    """float64 value of every code of an 8-bit (or narrower) type: exact, and a table lookup
    is several times faster than ml_dtypes' astype."""
    t = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    t.flags.writeable = False
    return t


def _to_f64(vals: np.ndarray) -> np.ndarray:
    """Exact float64 of `vals` (any layout), C-contiguous."""
    if vals.dtype.itemsize == 1:  # (contiguous codes first: the lookup keeps their layout)
        return code_table(vals.dtype.type)[np.ascontiguousarray(vals.view(np.uint8))]
    if vals.dtype == ml_dtypes.bfloat16:  # bf16 is the top half of an f32: exact by a shift
        return (vals.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return vals.astype(np.float64, order="C")


def _lane_runs(vals: np.ndarray, run: int) -> np.ndarray:
    """(B*32, K/2) per-lane values -> (B, 16, K/2R, 2, R) view in (row, K) order: value i of
    lane l sits at K = (i // R) * 2R + (l // 16) * R + i % R, row l % 16."""
    n = vals.shape[1]
    return vals.reshape(-1, 2, 16, n // run, run).transpose(0, 2, 3, 1, 4)


class _LastOperand:
    """The latest operand matrix, by its fragment: kernels pass one A fragment to several
    WMMAs (one per B tile). A hit needs the same array object with the same bytes (arrays
    are not promised immutable), which costs a compare instead of a conversion."""

    __slots__ = ("frag", "raw", "key", "mat")

    def __init__(self):
        self.frag = self.raw = self.key = self.mat = None

    def get(self, frag, dtype, K: int):
        if frag is self.frag and (dtype, K) == self.key and np.array_equal(_bytes(frag), self.raw):
            return self.mat
        return None

    def put(self, frag, dtype, K: int, mat) -> None:
        # (a copy in the fragment's own memory order: comparing it is one linear pass)
        self.frag, self.raw, self.key, self.mat = frag, _bytes(frag).copy(order="K"), (dtype, K), mat


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _bytes(frag) -> np.ndarray:
    """`frag` as unsigned words of its item size, no copy (compared as bits: -0.0 == 0.0
    and NaN != NaN as floats); other item sizes as contiguous bytes."""
    frag = np.asarray(frag)
    u = _UINT.get(frag.dtype.itemsize)
    return frag.view(u) if u is not None else np.ascontiguousarray(frag).view(np.uint8)


_LAST = _LastOperand()


def _operand(frag, dtype, K: int) -> tuple[np.ndarray, np.ndarray]:
    """`_unique_matrices`, reusing the previous operand's when `frag` is the same fragment."""
    got = _LAST.get(frag, dtype, K)
    if got is None:
        got = _unique_matrices(frag, dtype, K)
        got[0].flags.writeable = False
        _LAST.put(frag, dtype, K, got)
    return got


def _unique_matrices(frag, dtype, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(U, 16, K) float64 matrices of the distinct wave fragments in `frag` and, per wave,
    the index of its matrix (arange when all differ). The waves of a GEMM's lockstep chunk
    load the same A rows and B columns many times over (a chunk covering a 256 x 512 tile
    of D: 16 distinct A and 32 distinct B fragments for 512 waves), so decoding each
    distinct one once saves most of the decode."""
    frag = np.asarray(frag)
    words = _wave_words(frag)
    if words is not None:
        # a hash per wave picks candidates; equal bits decide (a collision: no dedupe)
        h = (words * _hash_weights(words.shape[1:])).sum(axis=(1, 2))
        _h, first, inv = np.unique(h, return_index=True, return_inverse=True)
        if len(first) < len(words) and np.array_equal(words, words[first[inv]]):
            per_wave = frag.reshape(len(words), 32, *frag.shape[1:])
            return _matrix(per_wave[first].reshape(-1, *frag.shape[1:]), dtype, K), inv.reshape(-1)
    mat = _matrix(frag, dtype, K)
    return mat, np.arange(len(mat))


def _wave_words(frag: np.ndarray):
    """Each wave's fragment as 64-bit words (W, a, b), a view without copying for
    lane-major (C order) and value-major (lanes contiguous, as generated code keeps
    vectors) fragments; None for other forms."""
    if frag.ndim != 2 or len(frag) % 32 or frag.dtype.itemsize not in _UINT:
        return None
    isz = frag.dtype.itemsize
    per_wave = frag.reshape(len(frag) // 32, 32, frag.shape[1])
    if frag.flags.c_contiguous and (32 * frag.shape[1] * isz) % 8 == 0:
        return per_wave.reshape(len(per_wave), 1, -1).view(np.uint8).view(np.uint64)
    if frag.strides[0] == isz and (32 * isz) % 8 == 0:  # lanes contiguous: (W, n, 32) -> words
        return per_wave.transpose(0, 2, 1).view(np.uint8).view(np.uint64)
    return None


@register_cache
@functools.lru_cache(maxsize=None)
def _hash_weights(shape: tuple) -> np.ndarray:
    """Fixed odd 64-bit multipliers: the wave hash is sum(word * weight) mod 2**64."""
    w = np.random.default_rng(0x1DB5A).integers(0, 1 << 63, shape, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    w.flags.writeable = False
    return w


def _matrix(frag: np.ndarray, dtype, K: int) -> np.ndarray:
    """Per-lane fragments (L, bytes) -> (B, 16, K) float64 matrices."""
    raw = np.ascontiguousarray(frag)
    vals = raw.view(np.uint8).reshape(raw.shape[0], -1)
    esz = np.dtype(dtype).itemsize
    if vals.shape[1] != K // 2 * esz:
        raise ValueError(f"WMMA fragment has {vals.shape[1] // esz} elements per lane, expected {K // 2}")
    run = 2 if esz == 4 else 8
    if (run * esz) % 8:  # (no such form today)
        return _to_f64(_lane_runs(vals.view(dtype), run)).reshape(-1, 16, K)
    # A run is whole 64-bit words: permuting words is several times cheaper than bytes.
    words = np.ascontiguousarray(_lane_runs(vals.view(np.uint64), run * esz // 8))
    if esz == 1:
        pairs = pair_table(np.dtype(dtype).type).take(words.view(np.uint16), mode="clip")
        return pairs.view(np.float64).reshape(-1, 16, K)
    return _to_f64(words.view(dtype)).reshape(-1, 16, K)


@register_cache
@functools.lru_cache(maxsize=None)
def pair_table(dtype) -> np.ndarray:
    """`code_table` for two codes at once, by their little-endian 16-bit word: complex128
    items are the two float64 values. Half the gathers of 16 bytes each: about twice as
    fast as decoding code by code, for a 1 MiB table."""
    codes = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    t = np.ascontiguousarray(code_table(dtype)[codes]).view(np.complex128).reshape(-1)
    t.flags.writeable = False
    return t


def _accumulate(A: np.ndarray, Bm: np.ndarray, c, c_mod: str = "none") -> np.ndarray:
    """D = A·Bᵀ + modC(C) for (B, 16, K) operands, C and D in the per-lane C/D layout."""
    return _finish(A @ Bm.transpose(0, 2, 1), c, c_mod)


def _finish(D: np.ndarray, c, c_mod: str = "none") -> np.ndarray:
    """D (B, 16, 16) float64 products (a fresh array) + modC(C), rounded once to C's type,
    C and the result in the per-lane C/D layout (lane l, value v <-> M = (l // 16) * 8 + v,
    N = l % 16: a transpose of (2, 16, 8) blocks)."""
    c = np.asarray(c)
    Bn = D.shape[0]
    Cv = c.reshape(Bn, 2, 16, 8).transpose(0, 1, 3, 2)  # (B, 2, 8, 16): [.., M // 8, M % 8, N]
    if c.dtype in _NATIVE_C:  # numpy's cast to float64 inside the add is exact: no C copy
        np.add(D.reshape(Bn, 2, 8, 16), C_MODIFIERS[c_mod](Cv), out=D.reshape(Bn, 2, 8, 16))
    else:
        D += C_MODIFIERS[c_mod](_to_f64(Cv).reshape(Bn, 16, 16))
    return D.reshape(Bn, 2, 8, 16).transpose(0, 1, 3, 2).astype(c.dtype, order="C").reshape(Bn * 32, 8)


def _products(A: tuple, B: tuple, exact: bool) -> np.ndarray:
    """A_w·B_wᵀ (W, 16, 16) of every wave w from deduplicated operands (`_unique_matrices`).

    Each distinct (A, B) pair is multiplied once. When the sums are exact (`exact`: the
    element types' sums round nowhere, in any order; and every operand is finite: which NaN
    comes out could depend on the order) and the waves' pairs are most of all |A| x |B|
    pairs, products of the distinct A rows by the distinct B rows give them all in a few
    large BLAS calls instead of a small one per wave. Otherwise each pair is the batched
    16 x K by K x 16 product of the per-wave form, which rounds the same way."""
    Au, ia = A
    Bu, ib = B
    W, nA, nB, K = len(ia), len(Au), len(Bu), Au.shape[2]
    if exact and nA * nB <= 2 * W and np.isfinite(Au).all() and np.isfinite(Bu).all():
        d = _b_chunk(nB, K)
        full = Au[:, None] @ Bu.reshape(nB // d, d * 16, K).transpose(0, 2, 1)[None]
        return full.reshape(nA, nB // d, 16, d, 16)[ia, ib // d, :, ib % d, :]
    pair, first, inv = np.unique(ia * nB + ib, return_index=True, return_inverse=True)
    if len(pair) == W:  # (an operand with W distinct matrices has ia = arange: no gather)
        return (Au if nA == W else Au[ia]) @ (Bu if nB == W else Bu[ib]).transpose(0, 2, 1)
    return (Au[ia[first]] @ Bu[ib[first]].transpose(0, 2, 1))[inv.reshape(-1)]


# OpenBLAS runs a GEMM of more than 4 * 65536 multiply-adds (M*N*K) on all its threads:
# on a pinned or busy machine several times slower than one thread (the benchmarks pin).
_BLAS_ONE_THREAD_MNK = 4 * 65536


def _b_chunk(nB: int, K: int) -> int:
    """B matrices per BLAS call of the all-pairs product: the most that divide nB and keep a
    16-row A by 16*d-row B call on one thread."""
    return max(d for d in range(1, nB + 1) if nB % d == 0 and (256 * d * K <= _BLAS_ONE_THREAD_MNK or d == 1))


@register_cache
@functools.lru_cache(maxsize=None)
def exact_sum_bits(a_dtype, b_dtype, K: int) -> bool:
    """True when every K-term sum of products of finite a_dtype and b_dtype values is exact
    in float64 (whatever the order: BLAS may sum in any), i.e. the products' span from the
    smallest nonzero one to K times the largest fits in 53 bits (fp8 e4m3: 43 bits at
    K = 128; int8). 1-byte types only."""
    spans = []
    for dt in (a_dtype, b_dtype):
        if np.dtype(dt).itemsize != 1:
            return False
        v = np.abs(code_table(dt))
        v = v[np.isfinite(v) & (v > 0)]
        spans.append((np.log2(v.min()), np.log2(v.max())))
    lo = spans[0][0] + spans[1][0]
    hi = spans[0][1] + spans[1][1] + np.log2(K)
    return bool(np.ceil(hi) - lo <= 53)


# Accumulator types whose values numpy converts to float64 exactly on the fly.
_NATIVE_C = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32))

# The WMMA C-operand modifiers (ROCDL WMMACModifier), applied to C before the sum.
C_MODIFIERS = {"none": lambda x: x, "neg": np.negative, "abs": np.abs, "neg_abs": lambda x: -np.abs(x)}

# Scaled operand formats: (bits, decoder) by their name in the op's fmtA / fmtB attribute.
SCALED_FORMATS = {"fp8_e4m3": (8, ml_dtypes.float8_e4m3fn), "fp8_e5m2": (8, ml_dtypes.float8_e5m2),
                  "fp6_e2m3": (6, ml_dtypes.float6_e2m3fn), "fp6_e3m2": (6, ml_dtypes.float6_e3m2fn),
                  "fp4_e2m1": (4, ml_dtypes.float4_e2m1fn)}
SCALE_FORMATS = {"e8": ml_dtypes.float8_e8m0fnu, "e4m3": ml_dtypes.float8_e4m3fn}
_RUN = {8: 16, 6: 16, 4: 32}  # elements per lane-half run (see the module docstring)
SCALED_K = 128


@register_cache
@functools.lru_cache(maxsize=None)
def scaled_layout(bits: int) -> np.ndarray:
    """K of each (lane, value) of a scaled A or B fragment (the row is lane % 16)."""
    R = _RUN[bits]
    i = np.arange(SCALED_K // 2)[None, :]
    k = (i // R) * 2 * R + (_LANE // 16) * R + i % R
    k.flags.writeable = False
    return k


def _codes(raw: np.ndarray, bits: int) -> np.ndarray:
    """One code per element of each lane's little-endian bit stream (L, bytes) -> (L, 64)."""
    if bits == 8:
        return raw
    stream = np.unpackbits(raw, axis=1, bitorder="little").reshape(len(raw), SCALED_K // 2, bits)
    return (stream << np.arange(bits, dtype=np.uint8)).sum(axis=2, dtype=np.uint8)


def _scaled_matrix(frag, fmt: str, scale, opsel: int, scale_fmt: str) -> np.ndarray:
    """Per-lane packed fragments (L, 2*bits dwords) and scales -> (B, 16, 128) float64."""
    bits, dtype = SCALED_FORMATS[fmt]
    raw = np.ascontiguousarray(frag).view(np.uint8).reshape(len(frag), -1)
    if raw.shape[1] * 8 != bits * SCALED_K // 2:
        raise ValueError(f"scaled WMMA {fmt} fragment has {raw.shape[1]} bytes per lane, "
                         f"expected {bits * SCALED_K // 16}")
    codes = _lane_runs(_codes(raw, bits), _RUN[bits])
    mat = code_table(dtype)[np.ascontiguousarray(codes)].reshape(-1, 16, SCALED_K)
    B = mat.shape[0]
    sbytes = np.ascontiguousarray(scale).view(np.uint8).reshape(B, 32, -1)[:, opsel * 16:opsel * 16 + 16]
    factors = code_table(SCALE_FORMATS[scale_fmt])[sbytes]  # (B, 16 rows, blocks)
    blocks = factors.shape[2]
    return (mat.reshape(B, 16, blocks, SCALED_K // blocks) * factors[..., None]).reshape(B, 16, SCALED_K)


def wmma(a, b, c, a_dtype, b_dtype, K: int, *, scale_a=None, scale_b=None, opsel=(0, 0),
         scale_fmt=("e8", "e8"), c_mod: str = "none"):
    """D = A·Bᵀ + C; with `scale_a`/`scale_b` the scaled form, where `a_dtype`/`b_dtype` are
    SCALED_FORMATS names and K is 128 (one run-time name for both: generated code calls it as
    `R.wmma`)."""
    if scale_a is None:
        A, Bm = _operand(a, a_dtype, K), _unique_matrices(b, b_dtype, K)
        return _finish(_products(A, Bm, exact_sum_bits(a_dtype, b_dtype, K)), c)
    A = _scaled_matrix(a, a_dtype, scale_a, opsel[0], scale_fmt[0])
    Bm = _scaled_matrix(b, b_dtype, scale_b, opsel[1], scale_fmt[1])
    return _accumulate(A, Bm, c, c_mod)


def wmma_f4_32x16(a, b, c, scale_a, scale_b, *, opsel_b: int = 0, scale_fmt=("e8", "e8"),
                  c_mod: str = "none"):
    """The 32x16x128 f4 scaled WMMA (module docstring): two 16-row products sharing B. Rows
    16h..16h+15 of A are dwords 8h..8h+7 with their scales in lanes 16h..16h+15, i.e. the
    16-row operand with scale opsel h; their D is C/D values 8h..8h+7."""
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(len(a), -1)
    c = np.asarray(c)
    if raw.shape[1] != 64 or c.shape[1:] != (16,):
        raise ValueError(f"32x16x128 f4 WMMA takes 64 A bytes and 16 C values per lane, got "
                         f"{raw.shape[1]} and {c.shape[1:]}")
    Bm = _scaled_matrix(b, "fp4_e2m1", scale_b, opsel_b, scale_fmt[1])
    halves = [_accumulate(_scaled_matrix(raw[:, 32 * h:32 * h + 32], "fp4_e2m1", scale_a, h, scale_fmt[0]),
                          Bm, c[:, 8 * h:8 * h + 8], c_mod) for h in (0, 1)]
    return np.concatenate(halves, axis=1)
