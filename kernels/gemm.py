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
``fx.rocdl.s_wait_asynccnt(...)``, so a mutation tool can delete or rewrite exactly one
of them (``ldssan.mutate.source.protocol_lines`` finds them):

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

Shared pieces. ``kernels/mega_moe.py``'s persistent grouped GEMM runs this pipeline: the
ring geometry is ``ring_layout`` (``RingLayout``; ``GemmConfig.ring``), the per-tile TDM stage
issue, fragment loads and WMMA are ``RingPipeline`` (whose ``issue_stage`` / ``compute``
are the ``_issue_stage`` / ``_compute`` of the kernel below), and the reference's
accumulation model is ``wmma_accumulate``. Each kernel keeps its own schedule and
synchronisation lines. ``RingPipeline`` also runs bf16 A against FP8 B (bf16 WMMA, B
fragments widened to bf16 exactly in registers), which ``gemm`` itself does not offer.

Target selection: like ``kernels/rmsnorm.py``, importing sets no environment variable and
a launch selects gfx1250 for itself (``kernels/_launch.py``); ``launch_gemm`` checks that
the tensors hold what M, N and K address before anything runs.
"""

from dataclasses import dataclass
from operator import attrgetter

import torch

import flydsl.compiler as flyc
from ldssan.kernels._launch import check_rows, check_tensor, gfx1250_target, launch
from ldssan.kernels.gemm_reference import gemm_reference, wmma_accumulate  # noqa: F401
from ldssan.kernels.ring_pipeline import (  # noqa: F401  (shared with mega_moe)
    _WMMA_K, LDS_BYTES_MAX, LDS_PAD_BYTES, TDM_PER_WAVE, WAVE_SIZE, RingLayout,
    RingPipeline, _align, _concat, _lds_load_b128, _lds_load_f32, _lds_store_b128, _min_i32, ring_layout,
)
import flydsl.expr as fx
from flydsl.expr import const_expr, range_constexpr
from flydsl.expr.rocdl import tdm_ops

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
    "ring_layout",
    "wmma_accumulate",
]

TARGET_ARCH = "gfx1250"

# TDM loads one wave issues per pipeline stage: its slice of A and its slice of B.
# Every tensorcnt wait of the K loop is derived from this count.
# Async scale loads a wave may leave in flight at the epilogue barrier.
ASYNC_OUTSTANDING = 0

_DEFAULT_TILES = {"fp8": (64, 64, 128), "bf16": (64, 64, 64)}

_TORCH_IN = {torch.float8_e4m3fn: "fp8", torch.bfloat16: "bf16"}
_TORCH_OUT = {torch.bfloat16: "bf16", torch.float32: "f32"}
_OUT_BYTES = {"bf16": 2, "f32": 4}


# ---------------------------------------------------------------------------
# Configuration (pure Python, shared by the kernel, the launcher and the tests)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    """Static geometry of one kernel specialisation (all sizes in bytes unless noted). The
    tile, the wave grid and the A/B ring are `ring`'s, read through the names set below."""

    kind: str  # "fp8" | "bf16"
    out: str  # "bf16" | "f32"
    ring: RingLayout  # the A/B ring and wave grid (what ``RingPipeline`` runs)
    out_bytes: int
    c_bytes: int
    scale_off: int
    lds_bytes: int

    @property
    def scale_jobs(self) -> int:
        """Wave-sized (32-float) async load jobs that fill the scale region."""
        return (self.tile_m + self.tile_n) // WAVE_SIZE


# GemmConfig.<name> = ring.<field>: A and B have one kind, so A's element size, row padding
# and pitch are the tile's (tile_k and wmma_k in elements, ksteps/rm/rn the WMMA geometry).
for _name, _field in {
    "tile_m": "tile_m", "tile_n": "tile_n", "tile_k": "tile_k", "waves": "waves", "nb": "nb",
    "block": "block", "m_waves": "m_waves", "n_waves": "n_waves", "wmma_k": "wmma_k",
    "elem_bytes": "a_elem_bytes", "pad_bytes": "a_pad", "row_bytes": "a_row", "a_bytes": "a_bytes",
    "slot_bytes": "slot_bytes", "ring_bytes": "ring_bytes", "ksteps": "ksteps", "rm": "rm", "rn": "rn",
}.items():
    setattr(GemmConfig, _name, property(attrgetter(f"ring.{_field}")))


def default_tiles(kind: str) -> tuple[int, int, int]:
    """Default (tile_m, tile_n, tile_k) for an input kind: small enough to emulate."""
    return _DEFAULT_TILES[kind]


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
    return GemmConfig(kind=kind, out=out, ring=lay, out_bytes=ob, c_bytes=c_bytes, scale_off=scale_off,
                      lds_bytes=lds)


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

    # (mega_moe's grouped GEMM repeats this loop: sync lines stay in each kernel's own file)
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
def _launch_gemm(
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


def launch_gemm(A, B, C, SA, SB, M: int, N: int, K: int, grid_m: int, grid_n: int, kind: str, out: str,
                tile_m: int, tile_n: int, tile_k: int, waves: int, nb: int, stream=None) -> None:
    """The raw launch after checking that A holds M x K, B N x K, C M x N, SA M and SB N
    elements, so a bad size is an error before any tile is stored."""
    for name, t, rows, row in (("A", A, M, (K,)), ("B", B, N, (K,)), ("C", C, M, (N,)), ("SA", SA, M, ()),
                               ("SB", SB, N, ())):
        check_rows("gemm", name, t, rows, row)
    launch("gemm", _launch_gemm, (A, B, C, SA, SB, M, N, K, grid_m, grid_n, kind, out, tile_m, tile_n, tile_k,
                                  waves, nb), stream)


# ---------------------------------------------------------------------------
# Python launcher
# ---------------------------------------------------------------------------


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
    check_tensor("gemm", name, s, torch.float32, (length,), device, ref="a", optional=True)


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
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    with gfx1250_target("gemm"):  # checks the target even when there is nothing to launch
        if m == 0 or n == 0:
            return out
        if scale_a is None:
            scale_a = torch.ones(m, dtype=torch.float32, device=a.device)
        if scale_b is None:
            scale_b = torch.ones(n, dtype=torch.float32, device=a.device)
        launch_gemm(a, b, out, scale_a, scale_b, m, n, k, -(-m // tile_m), -(-n // tile_n), kind, out_kind, tile_m,
                    tile_n, tile_k, waves, nb)
    return out
