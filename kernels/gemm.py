"""GEMM for gfx1250 (wave32) in FlyDSL: TDM-fed LDS ring, async-loaded scales, WMMA.

    C[m, n] = (sum_k A[m, k] * B[n, k]) * scale_a[m] * scale_b[n]        (C = A·Bᵀ)

A is M×K and B is N×K, both row-major and contiguous. Two input kinds:

* FP8 (``torch.float8_e4m3fn``) on ``V_WMMA_F32_16X16X128_FP8_FP8``; C is bf16;
* BF16 on ``V_WMMA_F32_16X16X32_BF16``; C is bf16 or f32.

``scale_a`` (M,) and ``scale_b`` (N,) are f32 (per row / per column); they are
optional and default to ones (the epilogue multiplies by 1.0, which is exact).
Accumulation is f32; the scales are applied in f32 in the epilogue as
``(acc * scale_a[m]) * scale_b[n]``, then rounded to the output dtype
(round-to-nearest-even).

Geometry. One workgroup per ``tile_m × tile_n`` output tile (grid =
``(ceil(M/tile_m), ceil(N/tile_n), 1)``) with ``waves`` = 4 (2×2 waves) or 8
(2×4 waves, m × n) of 32 lanes. Each wave owns a ``tile_m/2 × tile_n/n_waves``
sub-tile = ``RM × RN`` WMMA blocks of 16×16, kept in f32 registers. The WMMA is
issued with the *B* fragment as its first (M-side) operand and the *A* fragment
as its second, so each accumulator is the transposed block: lane ``l`` holds
output row ``m = l % 16`` and the 8 consecutive columns
``n = (l // 16) * 8 + v``, which the epilogue stores as one contiguous vector.
Fragment loads (``ds_load_b128``): lane ``l`` of a 16-row block reads the 16-byte
chunks at K-byte ``(l // 16) * 16 + 32 * j`` of its row (j < 2 for bf16, j < 4 for
fp8). For bf16 this is exactly the hardware operand layout; for fp8 it is a
K-permutation of it that is the same for A and B, so the dot product is unchanged.

LDS (one dynamic arena, byte offsets):

* **ring**: ``nb`` slots of ``SLOT`` bytes. Slot ``s`` holds the A tile
  ``[tile_m][tile_k]`` then the B tile ``[tile_n][tile_k]``, each row padded by
  ``LDS_PAD_BYTES`` (16 B, so the row pitch is ``tile_k*elem_bytes + 16``; the
  TDM skips the gap after every row itself, via its descriptor pad fields, and
  never writes it). K-tile (*stage*) ``t`` lives in slot ``t % nb``.
* **C staging**: ``[tile_m][tile_n]`` of the output dtype, unpadded, aliasing
  the ring from offset 0 once the K loop is over.
* **scales**: ``tile_m`` f32 of scale_a for the tile's rows, then ``tile_n`` f32 of
  scale_b for its columns, after the ring/C region (never aliased).

Copy engines:

* **TDM** (``rocdl.tensor.load.to.lds``, TENSORcnt) fills the ring. Both the A
  and the B TDM atom are split over all waves (``num_warps = waves``, each wave
  issues one instruction for its row slice), so every wave issues
  ``TDM_PER_WAVE = 2`` TDM loads per stage. Out-of-bounds rows (M/N tail) and
  columns (K tail) are zero-filled by the TDM: the descriptor's tensor extent is
  tile-start-relative (``M - m0``, ``K - t*tile_k``), the tile extent stays full.
* **Async loads** (``rocdl.global.load.async.to.lds.b32``, ASYNCcnt) fill the scale
  region once per tile: ``(tile_m + tile_n) / 32`` wave-jobs of 32 floats, job
  ``j`` issued by wave ``j % waves`` (one b32 per lane, row/column index clamped
  to ``M-1`` / ``N-1`` so nothing is read out of bounds).

LDS protocol. Every synchronisation is one source line holding nothing but
``tdm_ops.tensor_wait(...)``, ``fx.gpu.barrier()`` or
``fx.rocdl.s_wait_asynccnt(...)`` (``sync_sites()`` lists them), so a mutation
tool can delete or rewrite exactly one of them:

1. **prologue**: every wave issues its TDM loads of stages ``0 .. nb-2`` into slots
   ``0 .. nb-2``, then its share of the async scale loads.
2. **steady state**, ``kt = 0 .. n_steady-1`` (``n_steady = max(K_TILES-(nb-1), 0)``,
   ``K_TILES = ceil(K/tile_k)``):

   * ``tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))`` (site ``steady_wait``): this
     wave has issued stages ``0 .. kt+nb-2``; allowing the ``nb-2`` youngest
     stages (``TDM_PER_WAVE`` ops each) to stay in flight retires its share of
     stage ``kt``;
   * ``fx.gpu.barrier()`` (site ``steady_barrier``), a fused READY+REUSE barrier:
     (a) publishes stage ``kt`` (every wave's slice landed) to all waves and
     (b) certifies every wave finished reading slot ``(kt-1) % nb`` (k-tile
     ``kt-1``);
   * the wave issues stage ``kt+nb-1`` into slot ``(kt+nb-1) % nb = (kt-1) % nb``,
     the slot just released;
   * computes k-tile ``kt`` from slot ``kt % nb`` (ds_load_b128 fragments, WMMA).
3. **drain**, ``j = 0 .. nb-2`` (unrolled), ``kt = n_steady + j``: no more
   prefetches, so ``tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2 - j))`` (site
   ``drain_wait``; the last one is ``tensor_wait(0)``), ``fx.gpu.barrier()`` (site
   ``drain_barrier``), compute from slot ``kt % nb``. When ``K_TILES < nb-1`` the
   surplus stages are entirely out of bounds: the TDM zero-fills them and they
   add nothing.
4. **epilogue**:

   * ``fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)`` (= 0; site ``scale_wait``):
     this wave's scale loads landed;
   * ``fx.gpu.barrier()`` (site ``epilogue_barrier``): REUSE of the whole ring (every
     wave is past its last fragment ds_load, and no TDM load is in flight: the
     last drain wait was ``tensor_wait(0)``) and publication of the scales;
   * every wave reads its scales from LDS, scales its accumulators, rounds them to
     the output dtype and ds_stores them into the C staging tile (ring slot 0
     onwards);
   * ``fx.gpu.barrier()`` (site ``c_publish_barrier``) publishes C staging;
   * a TDM **store** (``rocdl.tensor.store.from.lds``, ``num_warps = waves``): each
     wave stores a row slice that other waves wrote; rows/columns past M/N are
     dropped by the TDM;
   * ``tdm_ops.tensor_wait(0)`` (site ``store_wait``): the store has finished
     reading LDS before the wave ends.

TDM descriptors (FlyDSL 0.5.0's ``make_tdm_atom`` lowering; group 0 and group 1 are
``vector.from_elements``, groups 2-4 are zero constants). Group 0: ``[1 (pred), LDS
byte address, global address lo32, (global address hi) | 0x80000000]``. Group 1:
w0 = ``log2(elem_bytes) << 16 | pad_en << 20 | (log2(row_dwords)-1) << 22 |
(pad_dwords-1) << 25`` (FP8 ring 0x07100000, BF16 ring 0x07110000, C store
0x00010000 bf16 / 0x00020000 f32); w1 = ``tensor_dim0[15:0] << 16``; w2 =
``tensor_dim0[31:16] | tensor_dim1[15:0] << 16``; w3 = ``tensor_dim1[31:16] |
tile_dim0 << 16``; w4 = ``tile_dim1``; w5/w6 = the row stride in elements (lo32,
hi16); w7 = 0. dim0 is the contiguous axis (K for A/B, N for C), dim1 the rows;
tile_dim0 = ``tile_k`` (A/B) or ``tile_n`` (C). Wave ``w`` moves rows
``[w*R, (w+1)*R)``, ``R = tile_dim1 = tile_rows / waves``; its global and LDS addresses
include that row offset and the extents are relative to its own start:
``tensor_dim1 = max(0, rows_left - w*R)`` with ``rows_left = M - m0`` (A, C) or
``N - n0`` (B), ``tensor_dim0 = max(0, K - t*tile_k)`` (A/B, stage ``t``) or
``max(0, N - n0)`` (C). The K step is added to the global address
(``imm_offset = t*tile_k*elem_bytes``).

Numerics (``gemm_reference``): per WMMA (a K block of 128 fp8 / 32 bf16 values)
``acc = f32(acc + exact block dot product)``; then ``(acc * sa) * sb`` in f32 and
rounding to the output dtype.

``sync_sites()`` / ``protocol_sites()`` give the line of every synchronisation and
data-movement statement named above, for mutation tools.

Shared pieces. ``kernels/mega_moe.py``'s persistent grouped GEMM runs this pipeline: the
ring geometry is ``ring_layout`` (``RingLayout``; ``GemmConfig.ring``), the per-tile TDM stage
issue, fragment loads and WMMA are ``RingPipeline`` (whose ``issue_stage`` / ``compute``
are the ``_issue_stage`` / ``_compute`` of the kernel below), and the reference's
accumulation model is ``wmma_accumulate``. Each kernel keeps its own schedule and
synchronisation lines. ``RingPipeline`` also runs bf16 A against FP8 B (bf16 WMMA, B
fragments widened to bf16 exactly in registers), which ``gemm`` itself does not offer.

Target selection: like ``kernels/rmsnorm.py`` this module sets
``FLYDSL_GPU_ARCH``/``ARCH`` to gfx1250 (``setdefault``) before importing FlyDSL.
"""

import os

# Must run before `import flydsl` (see module docstring, "Target selection").
os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx1250")
os.environ.setdefault("ARCH", "gfx1250")

import functools  # noqa: E402
import math  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import flydsl.compiler as flyc  # noqa: E402
import flydsl.expr as fx  # noqa: E402
from flydsl._mlir import ir  # noqa: E402
from flydsl.expr import const_expr, range_constexpr  # noqa: E402
from flydsl.expr.rocdl import tdm_ops  # noqa: E402
from flydsl.expr.typing import Vector as Vec  # noqa: E402

__all__ = [
    "ASYNC_OUTSTANDING",
    "LDS_BYTES_MAX",
    "LDS_PAD_BYTES",
    "TDM_PER_WAVE",
    "WAVE_SIZE",
    "GemmConfig",
    "RingLayout",
    "RingPipeline",
    "default_tiles",
    "gemm",
    "gemm_config",
    "gemm_kernel",
    "gemm_reference",
    "launch_gemm",
    "protocol_sites",
    "ring_layout",
    "sync_sites",
    "wmma_accumulate",
]

WAVE_SIZE = 32  # gfx1250 is wave32 only
TARGET_ARCH = "gfx1250"
LDS_BYTES_MAX = 327680  # addressable LDS per workgroup on gfx1250
LDS_PAD_BYTES = 16  # TDM row padding of the A/B ring tiles (0 disables it)

# TDM loads one wave issues per pipeline stage: its slice of A and its slice of B.
# Every tensorcnt wait of the K loop is derived from this count.
TDM_PER_WAVE = 2
# Async scale loads a wave may leave in flight at the epilogue barrier.
ASYNC_OUTSTANDING = 0

WMMA_M = WMMA_N = 16
_WMMA_K = {"fp8": 128, "bf16": 32}  # K depth of one WMMA per input kind
_ELEM_BYTES = {"fp8": 1, "bf16": 2}
_WAVE_GRID = {4: (2, 2), 8: (2, 4)}  # waves -> (m_waves, n_waves)
_DEFAULT_TILES = {"fp8": (64, 64, 128), "bf16": (64, 64, 64)}

_TORCH_IN = {torch.float8_e4m3fn: "fp8", torch.bfloat16: "bf16"}
_TORCH_OUT = {torch.bfloat16: "bf16", torch.float32: "f32"}
_OUT_BYTES = {"bf16": 2, "f32": 4}


# ---------------------------------------------------------------------------
# Configuration (pure Python, shared by the kernel, the launcher and the tests)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    """Static geometry of one kernel specialisation (all sizes in bytes unless noted)."""

    kind: str  # "fp8" | "bf16"
    out: str  # "bf16" | "f32"
    tile_m: int
    tile_n: int
    tile_k: int  # elements
    waves: int
    nb: int
    m_waves: int
    n_waves: int
    wmma_k: int  # elements
    elem_bytes: int
    out_bytes: int
    pad_bytes: int  # per LDS row of the A/B tiles
    row_bytes: int  # LDS row pitch of the A/B tiles
    a_bytes: int
    slot_bytes: int
    ring_bytes: int
    c_bytes: int
    scale_off: int
    lds_bytes: int

    @property
    def block(self) -> int:
        return WAVE_SIZE * self.waves

    @property
    def ksteps(self) -> int:
        """WMMA K-steps per k-tile."""
        return self.tile_k // self.wmma_k

    @property
    def rm(self) -> int:
        """16-row WMMA blocks per wave."""
        return self.tile_m // self.m_waves // WMMA_M

    @property
    def rn(self) -> int:
        """16-column WMMA blocks per wave."""
        return self.tile_n // self.n_waves // WMMA_N

    @property
    def scale_jobs(self) -> int:
        """Wave-sized (32-float) async load jobs that fill the scale region."""
        return (self.tile_m + self.tile_n) // WAVE_SIZE

    @property
    def ring(self) -> "RingLayout":
        """The A/B ring and wave grid (what ``RingPipeline`` runs)."""
        return ring_layout(self.kind, self.kind, self.tile_m, self.tile_n, self.tile_k, self.waves, self.nb)


def default_tiles(kind: str) -> tuple[int, int, int]:
    """Default (tile_m, tile_n, tile_k) for an input kind: small enough to emulate."""
    return _DEFAULT_TILES[kind]


def _pad_encodable(row_payload_bytes: int, pad_bytes: int) -> bool:
    # TDM padding: interval (payload row) must be a power-of-two number of dwords
    # (encoded log2(dw)-1 in 3 bits), amount 1..128 dwords.
    if pad_bytes == 0:
        return True
    if row_payload_bytes % 4 or pad_bytes % 4:
        return False
    dw = row_payload_bytes // 4
    return dw >= 2 and dw & (dw - 1) == 0 and int(math.log2(dw)) - 1 <= 7 and pad_bytes // 4 <= 128


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class RingLayout:
    """Geometry of the TDM-fed A/B LDS ring and the WMMA wave grid of one output tile.

    Shared by ``gemm_kernel`` and the grouped GEMM of ``kernels/mega_moe.py`` (which feeds
    bf16 A with FP8 B: ``a_kind`` and ``b_kind`` may differ, the WMMA then runs in bf16 and
    the FP8 fragments are widened to bf16 in registers, exactly). Byte offsets are relative
    to the start of the ring; slot ``s`` starts at ``s * slot_bytes``, holds A
    ``[tile_m][tile_k]`` (row pitch ``a_row``) then B ``[tile_n][tile_k]`` (row pitch
    ``b_row``) at ``b_off``.
    """

    a_kind: str  # "fp8" | "bf16"
    b_kind: str
    mma: str  # the WMMA's input kind: "fp8" only when both operands are FP8
    tile_m: int
    tile_n: int
    tile_k: int  # elements
    waves: int
    nb: int
    m_waves: int
    n_waves: int
    wmma_k: int  # elements
    a_elem_bytes: int
    b_elem_bytes: int
    a_pad: int  # TDM pad bytes after every LDS row
    b_pad: int
    a_row: int  # LDS row pitch (bytes)
    b_row: int
    a_bytes: int
    slot_bytes: int
    ring_bytes: int

    @property
    def block(self) -> int:
        return WAVE_SIZE * self.waves

    @property
    def b_off(self) -> int:
        return self.a_bytes

    @property
    def ksteps(self) -> int:
        """WMMA K-steps per k-tile."""
        return self.tile_k // self.wmma_k

    @property
    def rm(self) -> int:
        """16-row WMMA blocks per wave."""
        return self.tile_m // self.m_waves // WMMA_M

    @property
    def rn(self) -> int:
        """16-column WMMA blocks per wave."""
        return self.tile_n // self.n_waves // WMMA_N


def ring_layout(a_kind: str, b_kind: str, tile_m: int, tile_n: int, tile_k: int, waves: int, nb: int,
                *, m_waves: int | None = None, who: str = "gemm") -> RingLayout:
    """Validate a ring/WMMA specialisation and derive its geometry; ValueError names ``who``.

    The wave grid is ``m_waves x waves/m_waves`` (default: 2 x 2 for 4 waves, 2 x 4 for 8).
    The caller checks the LDS total (it adds its own regions after ``ring_bytes``)."""
    for name, kind in (("input", a_kind), ("weight", b_kind)):
        if kind not in _WMMA_K:
            raise ValueError(f"{who}: {name} kind must be 'fp8' or 'bf16', got {kind!r}")
    if a_kind == "fp8" and b_kind != "fp8":
        raise ValueError(f"{who}: FP8 A needs FP8 B (the mixed pipeline is bf16 A x FP8 B)")
    mma = "fp8" if a_kind == b_kind == "fp8" else "bf16"
    if waves not in _WAVE_GRID:
        raise ValueError(f"{who}: waves must be 4 or 8, got {waves!r}")
    if nb not in (2, 3, 4):
        raise ValueError(f"{who}: nb (LDS ring stages) must be 2, 3 or 4, got {nb!r}")
    for name, v in (("tile_m", tile_m), ("tile_n", tile_n), ("tile_k", tile_k)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{who}: {name} must be a positive int, got {v!r}")
    wk = _WMMA_K[mma]
    if tile_k < wk:
        raise ValueError(
            f"{who}: tile_k={tile_k} is below the {mma} WMMA depth {wk} (16x16x{wk}); "
            f"tile_k must be a positive multiple of {wk}"
        )
    if tile_k % wk:
        raise ValueError(f"{who}: tile_k={tile_k} must be a multiple of the {mma} WMMA depth {wk}")
    mw, nw = _WAVE_GRID[waves]
    if m_waves is not None:
        if m_waves not in (1, 2, 4) or waves % m_waves:
            raise ValueError(f"{who}: m_waves must divide waves ({waves}), got {m_waves!r}")
        mw, nw = m_waves, waves // m_waves
    if tile_m % (WMMA_M * mw):
        raise ValueError(f"{who}: tile_m={tile_m} must be a multiple of {WMMA_M * mw} ({mw} waves along M x 16)")
    if tile_n % (WMMA_N * nw):
        raise ValueError(f"{who}: tile_n={tile_n} must be a multiple of {WMMA_N * nw} ({nw} waves along N x 16)")
    if tile_m > 65535 or tile_n > 65535 or tile_k > 65535:
        raise ValueError(f"{who}: tile extents must fit the 16-bit TDM tile fields")
    aeb, beb = _ELEM_BYTES[a_kind], _ELEM_BYTES[b_kind]
    a_pad = LDS_PAD_BYTES if _pad_encodable(tile_k * aeb, LDS_PAD_BYTES) else 0
    b_pad = LDS_PAD_BYTES if _pad_encodable(tile_k * beb, LDS_PAD_BYTES) else 0
    a_row, b_row = tile_k * aeb + a_pad, tile_k * beb + b_pad
    a_bytes = tile_m * a_row
    slot = _align(a_bytes + tile_n * b_row, 128)
    return RingLayout(
        a_kind=a_kind, b_kind=b_kind, mma=mma, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, waves=waves,
        nb=nb, m_waves=mw, n_waves=nw, wmma_k=wk, a_elem_bytes=aeb, b_elem_bytes=beb, a_pad=a_pad,
        b_pad=b_pad, a_row=a_row, b_row=b_row, a_bytes=a_bytes, slot_bytes=slot, ring_bytes=nb * slot,
    )


def gemm_config(kind: str, out: str, tile_m: int, tile_n: int, tile_k: int, waves: int, nb: int) -> GemmConfig:
    """Validate a specialisation and derive its geometry; raises ValueError with the reason."""
    if kind not in _WMMA_K:
        raise ValueError(f"gemm: input kind must be 'fp8' or 'bf16', got {kind!r}")
    if out not in _OUT_BYTES:
        raise ValueError(f"gemm: output kind must be 'bf16' or 'f32', got {out!r}")
    if kind == "fp8" and out != "bf16":
        raise ValueError("gemm: the FP8 kernel writes bf16 C (out_dtype=torch.bfloat16)")
    lay = ring_layout(kind, kind, tile_m, tile_n, tile_k, waves, nb)
    ob = _OUT_BYTES[out]
    c_bytes = tile_m * tile_n * ob
    scale_off = _align(max(lay.ring_bytes, c_bytes), 128)
    lds = scale_off + (tile_m + tile_n) * 4
    if lds > LDS_BYTES_MAX:
        raise ValueError(
            f"gemm: the tile needs {lds} B of LDS (ring {nb} x {lay.slot_bytes} B + scales), above the gfx1250 "
            f"limit of {LDS_BYTES_MAX} B; use smaller tiles or fewer stages"
        )
    return GemmConfig(
        kind=kind, out=out, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, waves=waves, nb=nb,
        m_waves=lay.m_waves, n_waves=lay.n_waves, wmma_k=lay.wmma_k, elem_bytes=lay.a_elem_bytes, out_bytes=ob,
        pad_bytes=lay.a_pad, row_bytes=lay.a_row, a_bytes=lay.a_bytes, slot_bytes=lay.slot_bytes,
        ring_bytes=lay.ring_bytes, c_bytes=c_bytes, scale_off=scale_off, lds_bytes=lds,
    )


# ---------------------------------------------------------------------------
# Device helpers (straight-line code: no dynamic control flow)
# ---------------------------------------------------------------------------

def _lds_ptr_type(elem, align):
    return fx.PointerType.get(elem_ty=elem.ir_type, address_space=fx.AddressSpace.Shared, alignment=align)


def _lds_load_b128(addr):
    """ds_load_b128 of 4 x i32 at LDS byte address ``addr`` (i32, 16-byte aligned)."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Int32, 16), addr)
    return fx.ptr_load(ptr, ir.VectorType.get([4], fx.Int32.ir_type))


def _lds_store_b128(addr, value):
    """ds_store_b128 of a 4 x i32 vector at LDS byte address ``addr``."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Int32, 16), addr)
    fx.ptr_store(value, ptr)


def _lds_load_f32(addr):
    """ds_load_b32 of one f32 at LDS byte address ``addr``."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Float32, 4), addr)
    return fx.ptr_load(ptr)


def _concat(chunks):
    """Concatenate equal-length vectors (a power-of-two count) into one vector."""
    while len(chunks) > 1:
        n = chunks[0].numel
        chunks = [Vec(chunks[i]).shuffle(chunks[i + 1], list(range(2 * n))) for i in range(0, len(chunks), 2)]
    return Vec(chunks[0])


def _min_i32(a, b):
    return fx.Int32((a < b).select(a, b))


def _lds_load_b64(addr):
    """ds_load_b64 of 2 x i32 at LDS byte address ``addr`` (i32, 8-byte aligned)."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Int32, 8), addr)
    return fx.ptr_load(ptr, ir.VectorType.get([2], fx.Int32.ir_type))


_FX_IN = {"fp8": fx.Float8E4M3FN, "bf16": fx.BFloat16}


def _fp8_to_bf16(words):
    """The 16 e4m3 bytes of ``words`` (4 x i32) as 16 bf16, exactly, in integer arithmetic.

    Normal values keep their mantissa and move the exponent bias from 7 to 127 (``em << 4``
    plus ``120 << 7``); subnormals ``m * 2^-9`` (m = 1..7) are converted through f32, whose
    top half is then their exact bf16. (NaN bytes decode to 480.) Plain ``arith.extf`` from
    f8E4M3FN does not lower on this FlyDSL pipeline; gfx1250's ``v_cvt_scale_pk8_bf16_fp8``
    would do it in two instructions.
    """
    x = Vec(words).bitcast(fx.Int8).to(fx.Int32)
    em = x & 0x7F
    sign = (x & 0x80) << 8
    normal = (em << 4) + (120 << 7)
    sub = (em.to(fx.Float32) * (2.0 ** -9)).bitcast(fx.Int32) >> 16
    bits = (em < 8).select(sub, normal) | sign
    return bits.to(fx.Int16).bitcast(fx.BFloat16)


class RingPipeline:
    """The K pipeline pieces of one ``tile_m x tile_n`` output tile (trace-time helper).

    ``issue_stage(stage)`` issues this wave's TDM loads of k-tile ``stage`` (its row slice of
    A and of B: ``TDM_PER_WAVE`` ops) into ring slot ``stage % nb``; ``compute(slot)`` loads
    this wave's fragments of the k-tile held in ``slot`` (``ds_load``) and runs the WMMAs
    into ``acc`` (``rm * rn`` f32 accumulators of 8 values, zeroed at construction). Both are
    straight-line code: the prologue / steady / drain schedule and its synchronisations stay
    in the kernel that uses them (``gemm_kernel`` below, the grouped GEMM of
    ``kernels/mega_moe.py``), one statement per line.

    ``a_tile`` / ``b_tile`` are global iterators at row 0, column 0 of the tile (row stride
    ``K`` elements); ``a_rows`` / ``b_rows`` the rows left from there (the TDM zero-fills past
    them, and past ``K``). ``lds`` is the arena base pointer and ``lds_addr`` its i32 address;
    the ring starts at ``ring_off`` bytes. ``wave`` must be wave-uniform (``readfirstlane``).
    With ``lay.mma == "bf16"`` and FP8 B, B fragments are ``2 x ds_load_b64`` widened to bf16
    (exact: every e4m3 value is a bf16 value).
    """

    def __init__(self, lay: RingLayout, lds, lds_addr, a_tile, a_rows, b_tile, b_rows, K, wave, lane,
                 ring_off: int = 0):
        self.lay = lay
        tile_m, tile_n, tile_k, waves = lay.tile_m, lay.tile_n, lay.tile_k, lay.waves
        self.K = K
        self.ring_off = ring_off
        k64 = fx.Int64(K)
        a_t, b_t = _FX_IN[lay.a_kind], _FX_IN[lay.b_kind]
        self.gA = fx.Tensor(fx.make_view(a_tile, fx.make_layout((tile_m, tile_k), (tile_k, 1))))
        self.gB = fx.Tensor(fx.make_view(b_tile, fx.make_layout((tile_n, tile_k), (tile_k, 1))))
        # Split over all waves (each wave issues its row slice); rows padded in LDS.
        aeb, beb = lay.a_elem_bytes, lay.b_elem_bytes
        pad_a = {"pad_interval": tile_k, "pad_amount": lay.a_pad // aeb} if const_expr(lay.a_pad) else {}
        pad_b = {"pad_interval": tile_k, "pad_amount": lay.b_pad // beb} if const_expr(lay.b_pad) else {}
        self.atomA = fx.rocdl.make_tdm_atom(self.gA, [a_rows, K], strides=[k64, None], num_warps=waves, **pad_a)
        self.atomB = fx.rocdl.make_tdm_atom(self.gB, [b_rows, K], strides=[k64, None], num_warps=waves, **pad_b)
        self.lds_a = fx.recast_iter(a_t, lds)  # the arena as A / B elements (keeps its alignment)
        self.lds_b = self.lds_a if const_expr(lay.a_kind == lay.b_kind) else fx.recast_iter(b_t, lds)

        # fragments: lane l of a 16-row block reads 8-element (bf16 WMMA) or 16-byte (fp8
        # WMMA) chunks at K offset (l // 16) * chunk + 2 * chunk * j of its row
        lane16 = lane % 16
        half = lane // 16
        wave_m = wave // lay.n_waves
        wave_n = wave % lay.n_waves
        self.wave_m, self.wave_n, self.lane16, self.half = wave_m, wave_n, lane16, half
        WTM = tile_m // lay.m_waves
        WTN = tile_n // lay.n_waves
        self.chunk_a = 16 if const_expr(lay.mma == "fp8") else 8 * aeb
        self.chunk_b = 16 if const_expr(lay.mma == "fp8") else 8 * beb
        self.a_lane = [lds_addr + ring_off + (wave_m * WTM + wm * 16 + lane16) * lay.a_row + half * self.chunk_a
                       for wm in range_constexpr(lay.rm)]
        self.b_lane = [lds_addr + ring_off + lay.b_off + (wave_n * WTN + wn * 16 + lane16) * lay.b_row
                       + half * self.chunk_b for wn in range_constexpr(lay.rn)]
        self.wmma = fx.make_mma_atom(fx.rocdl.WMMA(WMMA_M, WMMA_N, lay.wmma_k, _FX_IN[lay.mma], fx.Float32))
        self.acc = [fx.make_rmem_tensor(8, fx.Float32) for _ in range_constexpr(lay.rm * lay.rn)]
        for t in self.acc:
            t.store(Vec.filled(8, 0.0, fx.Float32))

    def _ring_view(self, lds_t, eb, row, byte_off, rows):
        ptr = fx.add_offset(lds_t, byte_off // eb)
        return fx.Tensor(fx.make_view(ptr, fx.make_layout((rows, self.lay.tile_k), (row // eb, 1))))

    def issue_stage(self, stage):
        """This wave's TDM_PER_WAVE loads of k-tile ``stage`` into slot ``stage % nb``."""
        lay = self.lay
        slot_off = (stage % lay.nb) * lay.slot_bytes
        if const_expr(self.ring_off):
            slot_off = slot_off + self.ring_off
        k_left = self.K - stage * lay.tile_k  # tile-relative K extent: the TDM zero-fills past it
        a_dst = self._ring_view(self.lds_a, lay.a_elem_bytes, lay.a_row, slot_off, lay.tile_m)
        b_dst = self._ring_view(self.lds_b, lay.b_elem_bytes, lay.b_row, slot_off + lay.b_off, lay.tile_n)
        a_k = fx.Int64(stage) * (lay.tile_k * lay.a_elem_bytes)
        b_k = a_k if const_expr(lay.a_elem_bytes == lay.b_elem_bytes) else fx.Int64(stage) * (
            lay.tile_k * lay.b_elem_bytes)
        fx.copy(fx.atom_set_value(self.atomA, "extent_1", k_left), self.gA, a_dst, imm_offset=a_k)
        fx.copy(fx.atom_set_value(self.atomB, "extent_1", k_left), self.gB, b_dst, imm_offset=b_k)

    def _frag(self, addr, kind, chunk):
        lay = self.lay
        if const_expr(lay.mma == "fp8"):
            r = fx.make_rmem_tensor(16, fx.Int32)  # 64 B: 16 x i32
            r.store(_concat([_lds_load_b128(addr + 2 * chunk * j) for j in range_constexpr(4)]))
            return r
        if const_expr(kind == "bf16"):
            v = _concat([_lds_load_b128(addr + 2 * chunk * j) for j in range_constexpr(2)]).bitcast(fx.BFloat16)
        else:  # FP8 operand of a bf16 WMMA: 16 bytes, widened exactly
            v = _fp8_to_bf16(_concat([_lds_load_b64(addr + 2 * chunk * j) for j in range_constexpr(2)]))
        r = fx.make_rmem_tensor(16, fx.BFloat16)  # 32 B: 16 x bf16
        r.store(v)
        return r

    def compute(self, slot):
        """Fragments of the k-tile in ``slot`` and the WMMAs into ``acc``."""
        lay = self.lay
        base = slot * lay.slot_bytes
        for ks in range_constexpr(lay.ksteps):
            off_a = base + ks * (lay.wmma_k * lay.a_elem_bytes)
            off_b = base + ks * (lay.wmma_k * lay.b_elem_bytes)
            fa = [self._frag(self.a_lane[wm] + off_a, lay.a_kind, self.chunk_a) for wm in range_constexpr(lay.rm)]
            fb = [self._frag(self.b_lane[wn] + off_b, lay.b_kind, self.chunk_b) for wn in range_constexpr(lay.rn)]
            for wm in range_constexpr(lay.rm):
                for wn in range_constexpr(lay.rn):
                    c = self.acc[wm * lay.rn + wn]
                    fx.gemm(self.wmma, c, fb[wn], fa[wm], c)


# ---------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------


@flyc.kernel
def gemm_kernel(
    A: fx.Tensor,
    B: fx.Tensor,
    C: fx.Tensor,
    SA: fx.Tensor,
    SB: fx.Tensor,
    M: fx.Int32,
    N: fx.Int32,
    K: fx.Int32,
    kind: fx.Constexpr[str],
    out: fx.Constexpr[str],
    tile_m: fx.Constexpr[int],
    tile_n: fx.Constexpr[int],
    tile_k: fx.Constexpr[int],
    waves: fx.Constexpr[int],
    nb: fx.Constexpr[int],
):
    cfg = gemm_config(kind, out, tile_m, tile_n, tile_k, waves, nb)
    out_t = C.element_type
    ob = cfg.out_bytes
    RM, RN = cfg.rm, cfg.rn
    WTM = tile_m // cfg.m_waves
    WTN = tile_n // cfg.n_waves

    tid = fx.Int32(fx.thread_idx.x)
    bid_m, bid_n, _ = fx.block_idx
    wave = fx.Int32(fx.rocdl.readfirstlane(fx.Int32.ir_type, tid // WAVE_SIZE))
    lane = tid % WAVE_SIZE
    lane16 = lane % 16
    half = lane // 16
    wave_m = wave // cfg.n_waves
    wave_n = wave % cfg.n_waves
    m0 = fx.Int32(bid_m) * tile_m
    n0 = fx.Int32(bid_n) * tile_n
    k64 = fx.Int64(K)

    arena = fx.SharedAllocator(static=False)
    arena.allocate(cfg.lds_bytes)
    lds = arena.base_ptr
    lds_addr = fx.Int32(fx.ptrtoint(lds))

    # ---- the ring pipeline: TDM atoms at (m0, k=0) / (n0, k=0), fragments, WMMA ----
    a_tile = fx.add_offset(fx.get_iter(A), fx.Int64(m0) * k64)
    b_tile = fx.add_offset(fx.get_iter(B), fx.Int64(n0) * k64)
    pipe = RingPipeline(cfg.ring, lds, lds_addr, a_tile, M - m0, b_tile, N - n0, K, wave, lane)
    _issue_stage = pipe.issue_stage
    _compute = pipe.compute
    acc = pipe.acc

    # ---- async scale loads: job j (32 floats) is issued by wave j % waves ----
    def _scale_job(j):
        e = j * WAVE_SIZE + lane  # index into [scale_a tile | scale_b tile]
        if const_expr(j * WAVE_SIZE < tile_m):
            row = _min_i32(m0 + e, M - 1)
            src = fx.add_offset(fx.get_iter(SA), row)
        else:
            col = _min_i32(n0 + (e - tile_m), N - 1)
            src = fx.add_offset(fx.get_iter(SB), col)
        dst = fx.add_offset(lds, cfg.scale_off + e * 4)
        fx.rocdl.global_load_async_to_lds_b32(src.llvm_ptr, dst.llvm_ptr, 0)

    k_tiles = (K + (tile_k - 1)) // tile_k
    n_steady = fx.Int32((k_tiles > nb - 1).select(k_tiles - (nb - 1), 0))

    # ---- 1. prologue ----
    for s in range_constexpr(nb - 1):
        _issue_stage(s)
    for j in range_constexpr(cfg.scale_jobs):
        if wave == j % waves:
            _scale_job(j)

    # ---- 2. steady state ----
    for kt in range(n_steady):
        tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))
        fx.gpu.barrier()
        _issue_stage(kt + nb - 1)
        _compute(kt % nb)

    # ---- 3. drain ----
    for j in range_constexpr(nb - 1):
        tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2 - j))
        fx.gpu.barrier()
        _compute((n_steady + j) % nb)

    # ---- 4. epilogue ----
    fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)
    fx.gpu.barrier()
    for wm in range_constexpr(RM):
        row = wave_m * WTM + wm * 16 + lane16
        sa = _lds_load_f32(lds_addr + cfg.scale_off + row * 4)
        for wn in range_constexpr(RN):
            col = wave_n * WTN + wn * 16 + half * 8
            sb_addr = lds_addr + cfg.scale_off + (tile_m + col) * 4
            sb = _concat([_lds_load_b128(sb_addr), _lds_load_b128(sb_addr + 16)]).bitcast(fx.Float32)
            y = ((acc[wm * RN + wn].load() * sa) * sb).to(out_t)
            y32 = y.bitcast(fx.Int32)
            c_addr = lds_addr + (row * tile_n + col) * ob
            for h in range_constexpr(ob * 8 // 16):
                _lds_store_b128(c_addr + 16 * h, y32.shuffle(y32, [4 * h, 4 * h + 1, 4 * h + 2, 4 * h + 3]))
    fx.gpu.barrier()
    gC = fx.Tensor(
        fx.make_view(
            fx.add_offset(fx.get_iter(C), fx.Int64(m0) * fx.Int64(N) + fx.Int64(n0)),
            fx.make_layout((tile_m, tile_n), (tile_n, 1)),
        )
    )
    atomC = fx.rocdl.make_tdm_atom(gC, [M - m0, N - n0], strides=[fx.Int64(N), None], num_warps=waves)
    c_lds = fx.Tensor(fx.make_view(fx.recast_iter(out_t, lds), fx.make_layout((tile_m, tile_n), (tile_n, 1))))
    fx.copy(atomC, c_lds, gC)
    tdm_ops.tensor_wait(0)


@flyc.jit
def launch_gemm(
    A: fx.Tensor,
    B: fx.Tensor,
    C: fx.Tensor,
    SA: fx.Tensor,
    SB: fx.Tensor,
    M: fx.Int32,
    N: fx.Int32,
    K: fx.Int32,
    grid_m: fx.Int32,
    grid_n: fx.Int32,
    kind: fx.Constexpr[str],
    out: fx.Constexpr[str],
    tile_m: fx.Constexpr[int],
    tile_n: fx.Constexpr[int],
    tile_k: fx.Constexpr[int],
    waves: fx.Constexpr[int],
    nb: fx.Constexpr[int],
    stream: fx.Stream = fx.Stream(None),
):
    """Host-side launch: one workgroup of 32*waves threads per (tile_m x tile_n) C tile."""
    gemm_kernel(A, B, C, SA, SB, M, N, K, kind, out, tile_m, tile_n, tile_k, waves, nb).launch(
        grid=(grid_m, grid_n, 1),
        block=(WAVE_SIZE * waves, 1, 1),
        stream=stream,
    )


# ---------------------------------------------------------------------------
# Python launcher
# ---------------------------------------------------------------------------


def _check_target() -> None:
    from flydsl.compiler.backends import get_backend

    target = get_backend().target
    if target.arch.split("-", 1)[0] != TARGET_ARCH or target.warp_size != WAVE_SIZE:
        raise RuntimeError(
            f"gemm is written for {TARGET_ARCH} (wave32), but FlyDSL targets {target.arch} "
            f"(wave{target.warp_size}); set FLYDSL_GPU_ARCH={TARGET_ARCH} and ARCH={TARGET_ARCH} "
            "(or unset them before importing kernels.gemm)"
        )


@functools.lru_cache(maxsize=1)
def _device_runtime_loadable() -> bool:
    import ctypes

    from flydsl.compiler import jit_executor

    try:
        for lib in jit_executor._resolve_runtime_libs():
            ctypes.CDLL(lib)
    except OSError:
        return False
    return True


def _launch_is_intercepted() -> bool:
    """True if something (e.g. ldssan's virtual gfx1250) replaced FlyDSL's launch path."""
    from flydsl._mlir import execution_engine
    from flydsl.compiler import jit_executor, jit_function

    return (
        jit_executor.ExecutionEngine is not execution_engine.ExecutionEngine
        or getattr(jit_executor._resolve_runtime_libs, "__module__", "") != jit_executor.__name__
        or getattr(jit_executor.CompiledArtifact._get_func_exe, "__module__", "") != jit_executor.__name__
        or getattr(jit_executor.CompiledArtifact._ensure_engine, "__module__", "") != jit_executor.__name__
        or getattr(jit_function._build_call_state, "__module__", "") != jit_function.__name__
        or getattr(jit_function._call_state_from_spec, "__module__", "") != jit_function.__name__
    )


def _check_can_launch() -> None:
    """Refuse to launch when FlyDSL would abort the whole process (no HIP, no interceptor)."""
    from flydsl.utils import env

    if env.compile.compile_only or _launch_is_intercepted() or _device_runtime_loadable():
        return
    raise RuntimeError(
        "gemm: no HIP runtime (libamdhip64) and no launch interceptor is installed; "
        "FlyDSL would abort the process. Run under ldssan's virtual gfx1250 "
        "(e.g. FLYDSL_LDSSAN=1), on a gfx1250 GPU, or with COMPILE_ONLY=1."
    )


def _int_arg(name: str, v) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"gemm: {name} must be an int, got {type(v).__name__}")
    return v


def _check_matrix(name: str, t, device=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"gemm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"gemm: {name} must be 2-D, got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"gemm: {name} must be contiguous (row-major), got strides {t.stride()}")
    if device is not None and t.device != device:
        raise ValueError(f"gemm: {name} is on {t.device} but a is on {device}")


def _check_scale(name: str, s, length: int, device) -> None:
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"gemm: {name} must be a torch.Tensor or None, got {type(s).__name__}")
    if s.dtype != torch.float32:
        raise TypeError(f"gemm: {name} dtype must be torch.float32, got {s.dtype}")
    if s.dim() != 1 or s.shape[0] != length:
        raise ValueError(f"gemm: {name} must have shape ({length},), got {tuple(s.shape)}")
    if not s.is_contiguous():
        raise ValueError(f"gemm: {name} must be contiguous, got strides {s.stride()}")
    if s.device != device:
        raise ValueError(f"gemm: {name} is on {s.device} but a is on {device}")


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    waves: int = 4,
    nb: int = 3,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """C = (A·Bᵀ) * scale_a[:, None] * scale_b[None, :] on gfx1250; returns ``out`` (M, N).

    ``a`` (M, K) and ``b`` (N, K) are contiguous ``torch.float8_e4m3fn`` (C is bf16)
    or ``torch.bfloat16`` (C is bf16 or f32, ``out_dtype``). ``scale_a`` (M,) and
    ``scale_b`` (N,) are optional f32 tensors (default: ones). ``waves`` is 4 or 8,
    ``nb`` the LDS ring depth (2, 3 or 4); tiles default to ``default_tiles(kind)``
    (64x64x128 for FP8, 64x64x64 for BF16). Launches ``gemm_kernel`` through FlyDSL
    exactly as on hardware (grid = (ceil(M/tile_m), ceil(N/tile_n), 1), block =
    32*waves threads). Tensors may be CPU tensors (run under a launch interceptor
    such as ldssan's virtual gfx1250) or GPU tensors. With COMPILE_ONLY=1 FlyDSL
    only compiles and ``out`` is returned unwritten.
    """
    _check_matrix("a", a)
    _check_matrix("b", b, a.device)
    if a.dtype not in _TORCH_IN:
        raise TypeError(f"gemm: a dtype must be torch.float8_e4m3fn or torch.bfloat16, got {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"gemm: b dtype {b.dtype} must match a dtype {a.dtype}")
    kind = _TORCH_IN[a.dtype]
    if out_dtype not in _TORCH_OUT:
        raise TypeError(f"gemm: out_dtype must be torch.bfloat16 or torch.float32, got {out_dtype!r}")
    out_kind = _TORCH_OUT[out_dtype]
    m, k = a.shape
    n, kb = b.shape
    if kb != k:
        raise ValueError(f"gemm: a is {m}x{k} and b is {n}x{kb}; both need the same K (C = a @ b.T)")
    if k == 0:
        raise ValueError("gemm: K (a.shape[1]) must be >= 1")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if v >= 2**31 - 2**16:
            raise ValueError(f"gemm: {name}={v} is too large (must fit a 32-bit TDM extent)")
    waves = _int_arg("waves", waves)
    nb = _int_arg("nb", nb)
    dm, dn, dk = default_tiles(kind)
    tile_m = dm if tile_m is None else _int_arg("tile_m", tile_m)
    tile_n = dn if tile_n is None else _int_arg("tile_n", tile_n)
    tile_k = dk if tile_k is None else _int_arg("tile_k", tile_k)
    gemm_config(kind, out_kind, tile_m, tile_n, tile_k, waves, nb)  # raises ValueError with the reason
    if scale_a is not None:
        _check_scale("scale_a", scale_a, m, a.device)
    if scale_b is not None:
        _check_scale("scale_b", scale_b, n, a.device)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"gemm: out must be a torch.Tensor or None, got {type(out).__name__}")
        if out.dtype != out_dtype:
            raise TypeError(f"gemm: out dtype {out.dtype} must be out_dtype {out_dtype}")
        if tuple(out.shape) != (m, n):
            raise ValueError(f"gemm: out must have shape {(m, n)}, got {tuple(out.shape)}")
        if not out.is_contiguous():
            raise ValueError(f"gemm: out must be contiguous, got strides {out.stride()}")
        if out.device != a.device:
            raise ValueError(f"gemm: out is on {out.device} but a is on {a.device}")
    _check_target()
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if scale_a is None:
        scale_a = torch.ones(m, dtype=torch.float32, device=a.device)
    if scale_b is None:
        scale_b = torch.ones(n, dtype=torch.float32, device=a.device)
    _check_can_launch()
    grid_m = -(-m // tile_m)
    grid_n = -(-n // tile_n)
    launch_gemm(a, b, out, scale_a, scale_b, m, n, k, grid_m, grid_n, kind, out_kind, tile_m, tile_n, tile_k, waves, nb)
    return out


# ---------------------------------------------------------------------------
# numpy reference
# ---------------------------------------------------------------------------

_NP_IN = {np.dtype(ml_dtypes.float8_e4m3fn): "fp8", np.dtype(ml_dtypes.bfloat16): "bf16"}
_NP_OUT = {"bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32)}


def _as_numpy(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.float8_e4m3fn:
            return x.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    if isinstance(x, np.ndarray):
        return x
    raise TypeError(f"gemm_reference: {name} must be a numpy array or torch tensor, got {type(x).__name__}")


def _out_kind(out_dtype) -> str:
    if out_dtype in _TORCH_OUT:
        return _TORCH_OUT[out_dtype]
    if isinstance(out_dtype, str) and out_dtype in _NP_OUT:
        return out_dtype
    try:
        dt = np.dtype(out_dtype)
    except TypeError:
        dt = None
    for name, npdt in _NP_OUT.items():
        if dt == npdt:
            return name
    raise TypeError(f"gemm_reference: out_dtype must be bfloat16 or float32, got {out_dtype!r}")


def wmma_accumulate(a: np.ndarray, b: np.ndarray, depth: int) -> np.ndarray:
    """f32 accumulators of ``a @ b.T`` as the WMMA chain builds them (shared with mega_moe).

    ``a`` (M, K) and ``b`` (N, K) hold exactly representable values (fp8 / bf16, any float
    dtype); per K block of ``depth`` (the WMMA depth), ``acc = f32(acc + exact block dot
    product)`` (products of fp8/bf16 values are exact in float64, the block sum is float64).
    """
    a64 = np.asarray(a).astype(np.float64)
    b64 = np.asarray(b).astype(np.float64)
    acc = np.zeros((a64.shape[0], b64.shape[0]), dtype=np.float32)
    for k0 in range(0, a64.shape[1], depth):
        block = a64[:, k0 : k0 + depth] @ b64[:, k0 : k0 + depth].T
        acc = (acc.astype(np.float64) + block).astype(np.float32)
    return acc


def gemm_reference(a, b, scale_a=None, scale_b=None, out_dtype=torch.bfloat16) -> np.ndarray:
    """numpy model of ``gemm``: the same products, accumulation and rounding steps.

    ``a`` (M, K) and ``b`` (N, K) are ml_dtypes ``float8_e4m3fn`` / ``bfloat16``
    numpy arrays (or the matching torch tensors); ``scale_a`` (M,) / ``scale_b``
    (N,) are f32 or None (ones); ``out_dtype`` is bf16 or f32 (torch or numpy
    dtype, or "bf16"/"f32"). Returns an ml_dtypes bf16 or float32 array.

    Model: the f32 accumulator is updated once per WMMA, i.e. per K block of the
    WMMA depth (128 for fp8, 32 for bf16; K-tiles are multiples of it and
    zero-padded past K, so the blocks are ``[j*depth, (j+1)*depth)``), as
    ``acc = f32(acc + exact block dot product)`` (products of fp8/bf16 values are
    exact in float64; the per-block sum is float64). Then ``(acc * sa) * sb`` in
    f32 and rounding to the output dtype (bf16: round-to-nearest-even).
    """
    a = _as_numpy(a, "a")
    b = _as_numpy(b, "b")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"gemm_reference: need a (M, K) and b (N, K), got {a.shape} and {b.shape}")
    if a.dtype != b.dtype or a.dtype not in _NP_IN:
        raise TypeError(f"gemm_reference: a/b must both be float8_e4m3fn or bfloat16, got {a.dtype}, {b.dtype}")
    kind = _NP_IN[a.dtype]
    out_kind = _out_kind(out_dtype)
    if kind == "fp8" and out_kind != "bf16":
        raise ValueError("gemm_reference: the FP8 kernel writes bf16 C")
    m = a.shape[0]
    n = b.shape[0]
    f32 = np.float32
    sa = np.ones(m, f32) if scale_a is None else _as_numpy(scale_a, "scale_a").astype(f32).reshape(m)
    sb = np.ones(n, f32) if scale_b is None else _as_numpy(scale_b, "scale_b").astype(f32).reshape(n)
    acc = wmma_accumulate(a, b, _WMMA_K[kind])
    y = (acc * sa[:, None]) * sb[None, :]
    return y.astype(_NP_OUT[out_kind])


# ---------------------------------------------------------------------------
# Mutation support
# ---------------------------------------------------------------------------

_SYNC_PREFIXES = {
    "wait": "tdm_ops.tensor_wait(",
    "barrier": "fx.gpu.barrier()",
    "async_wait": "fx.rocdl.s_wait_asynccnt(",
}
_SYNC_ORDER = (
    ("steady_wait", "wait"),
    ("steady_barrier", "barrier"),
    ("drain_wait", "wait"),
    ("drain_barrier", "barrier"),
    ("scale_wait", "async_wait"),
    ("epilogue_barrier", "barrier"),
    ("c_publish_barrier", "barrier"),
    ("store_wait", "wait"),
)
_ISSUE_SITES = {
    "prologue_issue": "_issue_stage(s)",
    "scale_issue": "_scale_job(j)",
    "prefetch_issue": "_issue_stage(kt + nb - 1)",
    "steady_compute": "_compute(kt % nb)",
    "drain_compute": "_compute((n_steady + j) % nb)",
    "tdm_store": "fx.copy(atomC, c_lds, gC)",
}


def _kernel_lines() -> list[tuple[int, str]]:
    with open(__file__, encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, t in enumerate(lines) if t.startswith("def gemm_kernel("))
    end = next(i for i, t in enumerate(lines) if i > start and t.startswith("@flyc.jit"))
    return [(i + 1, lines[i].strip()) for i in range(start, end)]


def sync_sites() -> dict[str, int]:
    """Source line numbers (in this file) of the kernel's synchronisations, by role.

    Each line holds exactly one statement: ``tdm_ops.tensor_wait(...)``,
    ``fx.gpu.barrier()`` or ``fx.rocdl.s_wait_asynccnt(...)``. Roles (program order):
    ``steady_wait``, ``steady_barrier``, ``drain_wait``, ``drain_barrier``,
    ``scale_wait``, ``epilogue_barrier``, ``c_publish_barrier``, ``store_wait``.
    """
    found = [
        (line, kind)
        for line, text in _kernel_lines()
        for kind, prefix in _SYNC_PREFIXES.items()
        if text.startswith(prefix)
    ]
    kinds = tuple(k for _, k in found)
    if kinds != tuple(k for _, k in _SYNC_ORDER):
        raise RuntimeError(f"unexpected synchronisation lines in {__file__}: {found}")
    return {name: line for (name, _), (line, _) in zip(_SYNC_ORDER, found)}


def protocol_sites() -> dict[str, int]:
    """``sync_sites()`` plus the data-movement lines a mutation may edit.

    ``prologue_issue`` (TDM stages 0..nb-2), ``scale_issue`` (async scale jobs),
    ``prefetch_issue`` (stage kt+nb-1 in the steady loop), ``steady_compute`` /
    ``drain_compute`` (the slot read), ``tdm_store`` (the C TDM store).
    """
    sites = dict(sync_sites())
    lines = _kernel_lines()
    for name, text in _ISSUE_SITES.items():
        hits = [line for line, t in lines if t == text]
        if len(hits) != 1:
            raise RuntimeError(f"expected one line {text!r} in {__file__}, found {hits}")
        sites[name] = hits[0]
    return sites
