"""MegaMoE-style fused MoE for gfx1250 (wave32) in FlyDSL, single GPU, with a numpy reference.

    out[t] = sum_k  w[t, k] * W2[e_k] · (silu(W1g[e_k] · x[t]) * (W1u[e_k] · x[t]))

x (T, D) bf16 tokens; router logits (T, E) f32 -> softmax (or sigmoid) scores -> top-2
experts e_0, e_1 per token (ties: the lower expert index wins) with weights w[t, k] (the
scores, optionally renormalised to sum 1). W1 (E, 2I, D) holds each expert's gate rows
``[0, I)`` then up rows ``[I, 2I)``; W2 (E, D, I). Weights are bf16, or FP8 (e4m3) with
per-output-channel f32 scales (``w1_scale`` (E, 2I), ``w2_scale`` (E, D)); activations stay
bf16 (weight-only FP8: FP8 fragments are widened to bf16 in registers, which is exact, and
the WMMA is ``V_WMMA_F32_16X16X32_BF16``). Shapes: E in [2, 8] (4-8 tested), top-k = 2,
T in [1, 64], D a multiple of 256 (256-1024 tested), I a multiple of 64 (256 tested).

"Fused" here is one launcher, ``mega_moe``, that runs four FlyDSL kernels back to back on
the device (nothing goes back to the host in between; every size the later kernels need
travels in device buffers):

1. ``moe_route_kernel`` (one workgroup of 4 waves): scores, top-2, the expert-sorted order
   and the dispatch of token rows into it (LDS protocol A below);
2. ``moe_gemm_kernel`` stage 1, a **persistent grouped GEMM** (a fixed grid of
   ``persistent`` = 4 workgroups pulls work items from a global counter; protocol B):
   H[row] = silu(Xs[row] · W1g[e]) * (Xs[row] · W1u[e]) for every expert-sorted row;
3. ``moe_gemm_kernel`` stage 2, the same kernel: Y[2t + k] = w[t, k] * (H[row] · W2[e]),
   scattered back to (token, k) order by the rowmap;
4. ``moe_combine_kernel``: out[t] = bf16(Y[2t] + Y[2t + 1]).

Expert-sorted order. Expert e owns the row segment ``[base[e], base[e] + pad(count[e]))``,
``pad(c) = ceil(c / tile_m) * tile_m``, segments in expert order, so every ``tile_m`` rows
(an *m-tile*) belong to one expert; the rows of the expert's (token, k) pairs come first (in
the order the FINALIZE atomics hand them out), padding rows after.
``rows_max = align(2T + E*(tile_m-1), tile_m)`` rows are allocated.

Device buffers the route kernel writes (``return_intermediates=True`` returns them): ``xs``
(rows_max, D) bf16, the dispatched tokens (padding rows stay zero); one *rowmap* per stage,
(rows_max, 2) i32 of ``[dst, weight (f32 bits)]``: stage 1 maps a row to itself (weight 1),
stage 2 to ``2t + k`` (weight w[t, k]); padding rows map to -1 (weight 0) and are not
stored; ``tile_expert`` (rows_max / tile_m,) i32 (-1 past the last m-tile); ``meta`` (4,)
i32 ``[m-tiles, rows used, 0, 0]``; ``topk_ids`` (T, 2) i32, ``topk_weights`` (T, 2) f32.

LDS protocol A, the route kernel (one workgroup, 128 threads; token t is handled by lane
t // 4 of wave t % 4, so every wave takes part even for a few tokens). LDS: i32 arrays
``count[E]``, ``cursor[E]``, ``base[E+1]``, ``slot[2T]`` in one arena. Phases separated by
barriers (each barrier one ``fx.gpu.barrier()`` line; lines in ``sync_sites()``):

* INIT: threads e < E zero ``count[e]`` and ``cursor[e]`` -> ``init_barrier``;
* scores and top-2 in registers; COUNT: ``fx.atomic_add(count[e_k], 1)`` (LDS atomics,
  ``count_atomic``) -> ``count_barrier``;
* RESERVE: thread i <= E reads ``count[0..E)`` and stores the padded exclusive prefix
  ``base[i]`` (``base[E]`` = rows used) -> ``reserve_barrier``;
* FINALIZE: a token's thread takes the row ``base[e] + atomic_add(cursor[e], 1)`` for each
  k and writes both rowmap entries, ``topk_*`` and ``slot[2t + k]``; every thread writes the
  -1 entries of the padding rows it owns (rows tid, tid + 128, ...) and ``tile_expert`` ->
  ``finalize_barrier``;
* DISPATCH: wave w copies the token row of pairs p = w, w + 4, ... to row ``slot[p]`` of xs.

LDS protocol B, the persistent grouped GEMM (4 waves: a 1 x 4 grid for ``tile_m`` = 16, the
default and aiter's MegaMoE layout; 2 x 2 for ``tile_m`` = 32). One work item is one
``tile_m x tile_n`` output tile; items are numbered m-tile major, ``n_work = m-tiles *
N / tile_n`` (m-tiles from ``meta``), the expert of an item is ``tile_expert[m-tile]``. LDS
(byte offsets in one dynamic arena; ``MoeGemmConfig``): the ``nb``-slot A/B ring of
``kernels/gemm.py`` (``RingPipeline``: every wave TDM-loads its row slice of A and of B,
``TDM_PER_WAVE`` = 2 ops per wave and stage; fragments, FP8 widening and WMMA), then the
**rowmap** ``[dst, weight] x tile_m``, then the **tile word**, a dedicated 16-byte slot
(never an alias of the ring):

* ``tile_fetch_first``: thread 0 ``atomic_add(counter, 1)`` (global) and stores the old value
  in the tile word -> ``tile_publish_barrier`` -> every wave reads the word
  (``tile_read_first``, ``readfirstlane``);
* loop while ``tile < n_work``:

  * ``tile_read_barrier``: every wave has read the word (and finished the previous tile's
    ring and rowmap reads), so the word, the ring and the rowmap may be rewritten;
  * ``tile_fetch``: thread 0 fetches the *next* index into the word right away (the global
    atomic's latency overlaps the tile);
  * prologue: TDM stages 0 .. nb-2 (``prologue_issue``), then the rowmap copy: async
    ``global_load_async_to_lds_b32`` jobs of 32 words (``rowmap_issue``; job j by wave
    j % 4; ASYNCcnt);
  * the K loop exactly as ``gemm_kernel``'s: steady state ``tensor_wait(TDM_PER_WAVE *
    (nb-2))`` -> barrier -> prefetch stage kt+nb-1 -> compute slot kt % nb; drain with waits
    down to ``tensor_wait(0)``, each followed by its barrier;
  * ``rowmap_wait`` (``s_wait_asynccnt(0)``: this wave's rowmap words landed) ->
    ``epilogue_barrier`` (publishes every wave's rowmap words *and* the next tile index);
  * ``rows = _read_rowmap()`` (``rowmap_read``: each lane's row's (dst, weight)), then
    ``nxt = _read_tile()`` (``tile_read``);
  * epilogue from registers (no LDS): stage 1 scales the gate/up accumulators by their
    channel scales and stores ``bf16(silu(g) * u)`` to row ``dst`` of H; stage 2 stores
    ``(acc * scale) * weight`` (f32) to row ``dst`` of Y; rows with dst < 0 are skipped.

Stage 1's B operand is W1 with gate and up rows interleaved in blocks of 16 (the launcher's
``_interleave_gate_up``), so each wave's accumulator pairs (2p, 2p+1) hold the gate and the
up columns of the same 16 outputs: ``h = silu(g) * u = (g / (exp2(-g log2 e) + 1)) * u``.
Indices read back from memory (a dispatch row, a rowmap ``dst``, the tile word) are checked
against their range before they address a store, as a buffer store's bounds would: only a
broken protocol produces one out of range, and then the sanitizer reports it instead of the
emulator stopping at a wild store.

The bug sites the tests plant (one line each; ``protocol_sites()`` gives the lines):
``tile_read_barrier`` deleted (a lagging wave reads the *next* index: aiter #6127 class,
LDS002); ``tile_word`` placed at offset 0 of the ring, inside A of slot 0 (``tile_word =
lds_addr``: the stage-0 TDM overwrites the index, LDS012); ``count_barrier`` deleted
(RESERVE reads counts that other waves' atomics have not published, LDS001); the
``rowmap_read`` line moved above ``rowmap_wait`` (LDS010).

Numerics (``mega_moe_reference``): scores in f32 as the kernel computes them (softmax: max,
``exp2((l - max) * log2 e)``, a left-to-right sum, division; sigmoid: ``1 / (1 + exp2(-l *
log2 e))``); top-2 on the scores; GEMMs as ``gemm.wmma_accumulate`` (f32 accumulation per
32-deep K block); the epilogues' f32 operations in the kernel's order; bf16 rounding of H and
of the output. On the virtual gfx1250 the kernel matches the reference bit for bit; on
hardware ``exp2`` is approximate (about 1 ulp), so compare at bf16 precision (a near-tie of
two scores may then also pick a different expert).

Target selection: like ``kernels/gemm.py``, ``FLYDSL_GPU_ARCH`` / ``ARCH`` default to gfx1250.
"""

import os

# Must run before `import flydsl` (see module docstring, "Target selection").
os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx1250")
os.environ.setdefault("ARCH", "gfx1250")

from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402

import flydsl.compiler as flyc  # noqa: E402
import flydsl.expr as fx  # noqa: E402
from flydsl._mlir import ir  # noqa: E402
from flydsl.expr import const_expr, range_constexpr  # noqa: E402
from flydsl.expr.rocdl import tdm_ops  # noqa: E402
from flydsl.expr.typing import Vector as Vec  # noqa: E402

from ldssan.kernels._launch import check_can_launch, check_target  # noqa: E402
from ldssan.kernels.ring_pipeline import (  # noqa: E402
    LDS_BYTES_MAX,
    TDM_PER_WAVE,
    RingLayout,
    RingPipeline,
    _lds_load_f32,
    _lds_ptr_type,
    _min_i32,
    ring_layout,
)
from ldssan.kernels.mega_moe_reference import LOG2E, TOPK, mega_moe_reference, route_reference  # noqa: E402,F401

__all__ = [
    "ASYNC_OUTSTANDING",
    "MAX_EXPERTS",
    "MAX_TOKENS",
    "TILE_MS",
    "TOPK",
    "MoeGemmConfig",
    "launch_combine",
    "launch_route",
    "launch_grouped_gemm",
    "mega_moe",
    "mega_moe_reference",
    "moe_combine_kernel",
    "moe_gemm_config",
    "moe_gemm_kernel",
    "moe_route_kernel",
    "protocol_sites",
    "route_reference",
    "rows_max",
    "sync_sites",
]

WAVE_SIZE = 32
WAVES = 4  # every kernel: 4 waves (128 threads); the GEMM's grid is 1 x 4 or 2 x 2 (tile_m 16 / 32)
BLOCK = WAVE_SIZE * WAVES
TARGET_ARCH = "gfx1250"
MAX_EXPERTS = 8
MAX_TOKENS = 64  # the route kernel gives each token one thread of its single workgroup
TILE_MS = (16, 32)  # rows of an m-tile (the expert-segment granule); wave grids 1 x 4 and 2 x 2
ASYNC_OUTSTANDING = 0  # rowmap words a wave may leave in flight at the epilogue barrier
DEFAULTS = {"tile_m": 16, "tile_n": 128, "tile_k": 64, "nb": 3, "persistent": 4}

_TORCH_W = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8"}
_SCORING = ("softmax", "sigmoid")


def rows_max(tokens: int, experts: int, tile_m: int = DEFAULTS["tile_m"]) -> int:
    """Rows of the expert-sorted buffers: every pair plus the worst-case padding."""
    return -(-(TOPK * tokens + experts * (tile_m - 1)) // tile_m) * tile_m


# ---------------------------------------------------------------------------
# Configuration of the grouped GEMM (pure Python)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MoeGemmConfig:
    """One specialisation of ``moe_gemm_kernel`` (sizes in bytes unless noted)."""

    stage: int  # 1: gate/up + SiLU*mul, 2: down projection + routing weight
    K: int  # elements
    N: int  # B rows per expert (stage 1: 2I, gate/up interleaved; stage 2: D)
    ring: RingLayout
    k_tiles: int
    n_steady: int  # steady-state iterations: max(k_tiles - (nb - 1), 0)
    rowmap_off: int
    rowmap_jobs: int  # async wave-jobs of 32 words that fill the rowmap (tile_m x [dst, weight])
    tile_word_off: int
    lds_bytes: int

    @property
    def tile_m(self) -> int:
        return self.ring.tile_m


def moe_gemm_config(stage: int, K: int, N: int, b_kind: str, tile_m: int, tile_n: int, tile_k: int,
                    nb: int) -> MoeGemmConfig:
    """Validate a grouped-GEMM specialisation and derive its LDS layout (ValueError with the reason)."""
    if stage not in (1, 2):
        raise ValueError(f"mega_moe: stage must be 1 or 2, got {stage!r}")
    if tile_m not in TILE_MS:
        raise ValueError(f"mega_moe: tile_m must be one of {TILE_MS}, got {tile_m!r}")
    lay = ring_layout("bf16", b_kind, tile_m, tile_n, tile_k, WAVES, nb, m_waves=tile_m // 16, who="mega_moe")
    if stage == 1 and (tile_n // lay.n_waves) % 32:
        raise ValueError(f"mega_moe: stage 1 needs tile_n / {lay.n_waves} (one wave's columns) to be a multiple "
                         f"of 32 (gate/up block pairs), got tile_n={tile_n}")
    if K % tile_k or N % tile_n:
        raise ValueError(f"mega_moe: K={K} and N={N} must be multiples of tile_k={tile_k} and tile_n={tile_n}")
    k_tiles = K // tile_k
    rowmap_off = -(-lay.ring_bytes // 128) * 128
    tile_word_off = rowmap_off + tile_m * 8
    lds = tile_word_off + 16
    if lds > LDS_BYTES_MAX:
        raise ValueError(f"mega_moe: the tile needs {lds} B of LDS, above the gfx1250 limit of {LDS_BYTES_MAX} B")
    return MoeGemmConfig(stage=stage, K=K, N=N, ring=lay, k_tiles=k_tiles, n_steady=max(k_tiles - (nb - 1), 0),
                         rowmap_off=rowmap_off, rowmap_jobs=tile_m * 2 // WAVE_SIZE, tile_word_off=tile_word_off,
                         lds_bytes=lds)


# ---------------------------------------------------------------------------
# Device helpers (straight-line code: no dynamic control flow)
# ---------------------------------------------------------------------------


def _uniform(x):
    """A value every lane holds alike, as a wave-uniform (scalar) Int32."""
    return fx.Int32(fx.rocdl.readfirstlane(fx.Int32.ir_type, x))


def _gptr(tensor, elem_off, elem_bytes: int, ty, count: int = 1):
    """Global pointer to ``count`` x ``ty`` (a 4-byte type) at element ``elem_off`` of ``tensor``."""
    base = fx.Int64(fx.ptrtoint(fx.get_iter(tensor)))
    ptr_t = fx.PointerType.get(elem_ty=ty.ir_type, address_space=fx.AddressSpace.Global,
                               alignment=min(16, 4 * count))
    return fx.inttoptr(ptr_t, base + fx.Int64(elem_off) * elem_bytes)


def _gload(tensor, elem_off, elem_bytes: int, ty, count: int):
    """Global load of a ``count``-vector of ``ty`` at element ``elem_off`` of ``tensor``."""
    return fx.ptr_load(_gptr(tensor, elem_off, elem_bytes, ty, count), ir.VectorType.get([count], ty.ir_type))


def _gstore(tensor, elem_off, elem_bytes: int, words):
    """Global store of 4 x i32 ``words`` (16 bytes) at element ``elem_off`` of ``tensor``."""
    fx.ptr_store(words, _gptr(tensor, elem_off, elem_bytes, fx.Int32, 4))


def _at(tensor, index):
    """Pointer to element ``index`` of a global tensor."""
    return fx.add_offset(fx.get_iter(tensor), index)


def _lds_i32(addr):
    return fx.inttoptr(_lds_ptr_type(fx.Int32, 4), addr)


def _exp2(x):
    """2**x with the hardware's ``v_exp_f32`` (``rocdl.exp2``; a scalar Float32 or an f32 vector)."""
    if isinstance(x, Vec):  # the intrinsic is scalar
        return Vec.from_elements([_exp2(x[i]) for i in range_constexpr(x.numel)], fx.Float32)
    return fx.Float32(fx.rocdl.exp2(fx.Float32.ir_type, fx.Float32(x).ir_value()))


def _scores(Logits, tok, E: int, scoring: str):
    """f32 scores of token ``tok``'s E logits (see the module docstring, "Numerics")."""
    logit = [fx.ptr_load(_at(Logits, tok * E + e)) for e in range_constexpr(E)]
    if const_expr(scoring == "sigmoid"):
        return [1.0 / (1.0 + _exp2(v * (-LOG2E))) for v in logit]
    m = logit[0]
    for v in logit[1:]:
        m = (v > m).select(v, m)
    ex = [_exp2((v - m) * LOG2E) for v in logit]
    s = ex[0]
    for v in ex[1:]:
        s = s + v
    return [v / s for v in ex]


def _top2(score, renorm: bool):
    """(e0, w0, e1, w1): the two largest scores, first index on ties (strict '>').

    Scores are >= 0 (softmax or sigmoid), so -1 is below every one of them."""
    b0 = fx.Float32(-1.0)
    b1 = fx.Float32(-1.0)
    i0 = fx.Int32(0)
    i1 = fx.Int32(0)
    for e, p in enumerate(score):
        gt0 = p > b0
        gt1 = p > b1
        nb1 = gt0.select(b0, gt1.select(p, b1))
        ni1 = gt0.select(i0, gt1.select(fx.Int32(e), i1))
        b0 = gt0.select(p, b0)
        i0 = gt0.select(fx.Int32(e), i0)
        b1, i1 = nb1, ni1
    if const_expr(renorm):
        s = b0 + b1
        return i0, b0 / s, i1, b1 / s
    return i0, b0, i1, b1


def _rowmap_entry(RMAP, row, dst, weight):
    """Global rowmap entry ``row``: (dst i32, weight f32) in two consecutive words."""
    fx.ptr_store(dst, _gptr(RMAP, row * 2, 4, fx.Int32))
    fx.ptr_store(weight, _gptr(RMAP, row * 2 + 1, 4, fx.Float32))


# ---------------------------------------------------------------------------
# Kernel 1: routing (protocol A)
# ---------------------------------------------------------------------------


# The route kernel's LDS (byte offsets of i32 arrays in one arena)
_COUNT_OFF = 0  # count[MAX_EXPERTS]: (token, k) pairs per expert (COUNT)
_CURSOR_OFF = 64  # cursor[MAX_EXPERTS]: next free row of each segment (FINALIZE)
_BASE_OFF = 128  # base[MAX_EXPERTS + 1]: segment starts, base[E] = rows used (RESERVE)
_SLOT_OFF = 192  # slot[2 * MAX_TOKENS]: the sorted row of pair 2t + k (FINALIZE -> DISPATCH)
ROUTE_LDS_BYTES = _SLOT_OFF + TOPK * MAX_TOKENS * 4


def _below(v, n):
    """0 <= v < n (an index read from memory, checked before it addresses a store)."""
    return fx.Int32((v < 0).select(n, v)) < n


@flyc.kernel(known_block_size=[BLOCK, 1, 1])
def moe_route_kernel(
    Logits: fx.Tensor,
    X: fx.Tensor,
    XS: fx.Tensor,
    RMAP1: fx.Tensor,
    RMAP2: fx.Tensor,
    TILE_E: fx.Tensor,
    META: fx.Tensor,
    TOPK_IDS: fx.Tensor,
    TOPK_W: fx.Tensor,
    T: fx.Int32,
    R: fx.Int32,
    E: fx.Constexpr[int],
    D: fx.Constexpr[int],
    tile_m: fx.Constexpr[int],
    scoring: fx.Constexpr[str],
    renorm: fx.Constexpr[bool],
):
    tid = fx.Int32(fx.thread_idx.x)
    wave = _uniform(tid // WAVE_SIZE)
    lane = tid % WAVE_SIZE
    arena = fx.SharedAllocator(static=False)
    arena.allocate(ROUTE_LDS_BYTES)
    lds_addr = fx.Int32(fx.ptrtoint(arena.base_ptr))
    count = lds_addr + _COUNT_OFF
    cursor = lds_addr + _CURSOR_OFF
    base = lds_addr + _BASE_OFF
    slot = lds_addr + _SLOT_OFF

    def _word(array, i):
        return _lds_i32(array + i * 4)

    def _segment_start(i):
        # RESERVE: padded exclusive prefix of count[0 .. E) at expert i (i = E: rows used)
        s = fx.Int32(0)
        for j in range_constexpr(E):
            c = fx.ptr_load(_word(count, j))
            s = s + (fx.Int32(j) < i).select((c + (tile_m - 1)) // tile_m * tile_m, 0)
        return s

    def _segment_of(r):
        # the expert whose segment holds row r (E when r is past the used rows)
        e = fx.Int32(0)
        for j in range_constexpr(E):
            e = e + (fx.ptr_load(_word(base, j + 1)) <= r).select(1, 0)
        return e

    def _place(t, k, e, w):
        # FINALIZE: the next row of expert e's segment goes to pair (t, k)
        row = fx.ptr_load(_word(base, e)) + fx.atomic_add(_word(cursor, e), fx.Int32(1), syncscope="workgroup")
        p = t * TOPK + k
        _rowmap_entry(RMAP1, row, row, fx.Float32(1.0))
        _rowmap_entry(RMAP2, row, p, w)
        fx.ptr_store(e, _at(TOPK_IDS, p))
        fx.ptr_store(w, _at(TOPK_W, p))
        fx.ptr_store(row, _word(slot, p))

    def _mark_padding(r):
        # rows no pair takes: the end of a segment, or past the used rows
        ec = _min_i32(_segment_of(r), E - 1)
        if r - fx.ptr_load(_word(base, ec)) >= fx.ptr_load(_word(count, ec)):
            _rowmap_entry(RMAP1, r, fx.Int32(-1), fx.Float32(0.0))
            _rowmap_entry(RMAP2, r, fx.Int32(-1), fx.Float32(0.0))

    def _tile_expert(i):
        r = i * tile_m
        fx.ptr_store((r < fx.ptr_load(_word(base, E))).select(_segment_of(r), -1), _at(TILE_E, i))

    def _copy_row(p):
        # DISPATCH: token row p // 2 of X to the sorted row of pair p (512 bytes per wave access)
        row = fx.ptr_load(_word(slot, p))
        t = p // TOPK
        if _below(row, R):
            for c in range_constexpr(D * 2 // (WAVE_SIZE * 16)):
                col = (c * WAVE_SIZE + lane) * 8  # 8 bf16 per lane
                _gstore(XS, row * D + col, 2, _gload(X, t * D + col, 2, fx.Int32, 4))

    # ---- INIT ----
    if tid < E:
        fx.ptr_store(fx.Int32(0), _word(count, tid))
        fx.ptr_store(fx.Int32(0), _word(cursor, tid))
    fx.gpu.barrier()

    # ---- scores and top-2 (registers), COUNT ----
    tok = lane * WAVES + wave  # token t is on wave t % 4: every wave counts, even for few tokens
    e0, w0, e1, w1 = _top2(_scores(Logits, _min_i32(tok, T - 1), E, scoring), renorm)
    if tok < T:
        fx.atomic_add(_word(count, e0), fx.Int32(1), syncscope="workgroup")
        fx.atomic_add(_word(count, e1), fx.Int32(1), syncscope="workgroup")
    fx.gpu.barrier()

    # ---- RESERVE ----
    if tid <= E:
        fx.ptr_store(_segment_start(tid), _word(base, tid))
    fx.gpu.barrier()

    # ---- FINALIZE ----
    if tok < T:
        _place(tok, 0, e0, w0)
        _place(tok, 1, e1, w1)
    for i in range_constexpr(-(-rows_max(MAX_TOKENS, E, tile_m) // BLOCK)):
        if tid + i * BLOCK < R:
            _mark_padding(tid + i * BLOCK)
    if tid < R // tile_m:
        _tile_expert(tid)
    if tid == 0:
        fx.ptr_store(fx.ptr_load(_word(base, E)) // tile_m, _at(META, 0))
        fx.ptr_store(fx.ptr_load(_word(base, E)), _at(META, 1))
    fx.gpu.barrier()

    # ---- DISPATCH ----
    for p in range(wave, TOPK * T, WAVES):
        _copy_row(p)


@flyc.jit
def launch_route(
    Logits: fx.Tensor,
    X: fx.Tensor,
    XS: fx.Tensor,
    RMAP1: fx.Tensor,
    RMAP2: fx.Tensor,
    TILE_E: fx.Tensor,
    META: fx.Tensor,
    TOPK_IDS: fx.Tensor,
    TOPK_W: fx.Tensor,
    T: fx.Int32,
    R: fx.Int32,
    E: fx.Constexpr[int],
    D: fx.Constexpr[int],
    tile_m: fx.Constexpr[int],
    scoring: fx.Constexpr[str],
    renorm: fx.Constexpr[bool],
    stream: fx.Stream = fx.Stream(None),
):
    """Host-side launch of the route kernel: one workgroup of 128 threads."""
    moe_route_kernel(Logits, X, XS, RMAP1, RMAP2, TILE_E, META, TOPK_IDS, TOPK_W, T, R, E, D, tile_m, scoring,
                     renorm).launch(grid=(1, 1, 1), block=(BLOCK, 1, 1), stream=stream)


# ---------------------------------------------------------------------------
# Kernel 2: the persistent grouped GEMM (protocol B), stages 1 and 2
# ---------------------------------------------------------------------------


@flyc.kernel(known_block_size=[BLOCK, 1, 1])
def moe_gemm_kernel(
    A: fx.Tensor,
    B: fx.Tensor,
    BS: fx.Tensor,
    RMAP: fx.Tensor,
    TILE_E: fx.Tensor,
    META: fx.Tensor,
    COUNTER: fx.Tensor,
    C: fx.Tensor,
    R: fx.Int32,
    c_rows: fx.Int32,
    stage: fx.Constexpr[int],
    K: fx.Constexpr[int],
    N: fx.Constexpr[int],
    b_kind: fx.Constexpr[str],
    tile_m: fx.Constexpr[int],
    tile_n: fx.Constexpr[int],
    tile_k: fx.Constexpr[int],
    nb: fx.Constexpr[int],
):
    cfg = moe_gemm_config(stage, K, N, b_kind, tile_m, tile_n, tile_k, nb)
    lay = cfg.ring
    WTM = tile_m // lay.m_waves
    WTN = tile_n // lay.n_waves
    n_tiles_n = N // tile_n
    tid = fx.Int32(fx.thread_idx.x)
    wave = _uniform(tid // WAVE_SIZE)
    lane = tid % WAVE_SIZE

    arena = fx.SharedAllocator(static=False)
    arena.allocate(cfg.lds_bytes)
    lds = arena.base_ptr
    lds_addr = fx.Int32(fx.ptrtoint(lds))
    rowmap = lds_addr + cfg.rowmap_off
    tile_word = lds_addr + cfg.tile_word_off
    n_work = _uniform(fx.ptr_load(_at(META, 0))) * n_tiles_n

    def _fetch_tile():
        # thread 0: the next work item from the global counter, into the tile word
        fx.ptr_store(fx.atomic_add(_at(COUNTER, 0), fx.Int32(1)), _lds_i32(tile_word))

    def _read_tile():
        # the broadcast index; a negative one ends the loop like n_work does
        v = _uniform(fx.ptr_load(_lds_i32(tile_word)))
        return fx.Int32((v < 0).select(n_work, v))

    def _rowmap_job(j, m0):
        # async copy of 32 rowmap words (rows m0 .., [dst, weight] each) into the LDS rowmap
        w = j * WAVE_SIZE + lane
        src = _at(RMAP, m0 * 2 + w)
        dst = fx.add_offset(lds, cfg.rowmap_off + w * 4)
        fx.rocdl.global_load_async_to_lds_b32(src.llvm_ptr, dst.llvm_ptr, 0)

    def _read_rowmap():
        # (dst, weight) of this lane's row in each of its 16-row blocks
        rows = []
        for wm in range_constexpr(lay.rm):
            r = (wave // lay.n_waves) * WTM + wm * 16 + lane % 16
            rows.append((fx.ptr_load(_lds_i32(rowmap + r * 8)), _lds_load_f32(rowmap + r * 8 + 4)))
        return rows

    def _store_tile(acc, e, n0, rows):
        # epilogue from registers: lane holds row lane % 16, columns (lane // 16) * 8 + [0, 8)
        half = lane // 16
        col0 = (wave % lay.n_waves) * WTN + half * 8
        for wm in range_constexpr(lay.rm):
            dst, w = rows[wm]
            if _below(dst, c_rows):
                if const_expr(stage == 1):
                    for q in range_constexpr(lay.rn // 2):
                        col = col0 + q * 32  # gate block; its up block is 16 rows further
                        sg = _gload(BS, e * N + n0 + col, 4, fx.Float32, 8)
                        su = _gload(BS, e * N + n0 + col + 16, 4, fx.Float32, 8)
                        g = acc[wm * lay.rn + 2 * q].load() * sg
                        u = acc[wm * lay.rn + 2 * q + 1].load() * su
                        h = ((g / (_exp2(g * (-LOG2E)) + 1.0)) * u).to(fx.BFloat16)
                        hcol = (n0 + col - half * 8) // 2 + half * 8
                        _gstore(C, dst * (N // 2) + hcol, 2, h.bitcast(fx.Int32))
                else:
                    for wn in range_constexpr(lay.rn):
                        col = col0 + wn * 16
                        sc = _gload(BS, e * N + n0 + col, 4, fx.Float32, 8)
                        y = ((acc[wm * lay.rn + wn].load() * sc) * w).bitcast(fx.Int32)
                        _gstore(C, dst * N + n0 + col, 4, y.shuffle(y, [0, 1, 2, 3]))
                        _gstore(C, dst * N + n0 + col + 4, 4, y.shuffle(y, [4, 5, 6, 7]))

    # ---- the first work item ----
    if tid == 0:
        _fetch_tile()
    fx.gpu.barrier()
    tile = _read_tile()

    # ---- the persistent loop ----
    while tile < n_work:
        fx.gpu.barrier()
        if tid == 0:
            _fetch_tile()
        m0 = tile // n_tiles_n * tile_m
        n0 = tile % n_tiles_n * tile_n
        e = _uniform(fx.ptr_load(_at(TILE_E, tile // n_tiles_n)))
        a_tile = fx.add_offset(fx.get_iter(A), fx.Int64(m0) * K)
        b_tile = fx.add_offset(fx.get_iter(B), (fx.Int64(e) * N + fx.Int64(n0)) * K)
        pipe = RingPipeline(lay, lds, lds_addr, a_tile, R - m0, b_tile, N - n0, K, wave, lane)
        _issue_stage = pipe.issue_stage
        _compute = pipe.compute
        n_steady = cfg.n_steady

        # prologue: ring stages 0 .. nb-2, then this tile's rowmap
        for s in range_constexpr(nb - 1):
            _issue_stage(s)
        for j in range_constexpr(cfg.rowmap_jobs):
            if wave == j % WAVES:
                _rowmap_job(j, m0)

        # steady state
        for kt in range(n_steady):
            tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))
            fx.gpu.barrier()
            _issue_stage(kt + nb - 1)
            _compute(kt % nb)

        # drain
        for j in range_constexpr(nb - 1):
            tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2 - j))
            fx.gpu.barrier()
            _compute((n_steady + j) % nb)

        # epilogue
        fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)
        fx.gpu.barrier()
        rows = _read_rowmap()
        nxt = _read_tile()
        _store_tile(pipe.acc, e, n0, rows)
        tile = nxt


@flyc.jit
def launch_grouped_gemm(
    A: fx.Tensor,
    B: fx.Tensor,
    BS: fx.Tensor,
    RMAP: fx.Tensor,
    TILE_E: fx.Tensor,
    META: fx.Tensor,
    COUNTER: fx.Tensor,
    C: fx.Tensor,
    R: fx.Int32,
    c_rows: fx.Int32,
    grid: fx.Int32,
    stage: fx.Constexpr[int],
    K: fx.Constexpr[int],
    N: fx.Constexpr[int],
    b_kind: fx.Constexpr[str],
    tile_m: fx.Constexpr[int],
    tile_n: fx.Constexpr[int],
    tile_k: fx.Constexpr[int],
    nb: fx.Constexpr[int],
    stream: fx.Stream = fx.Stream(None),
):
    """``grid`` persistent workgroups of the grouped GEMM: stage 1 (gate/up, SiLU*mul) or
    stage 2 (down projection, routing weight, scatter to (token, k) rows)."""
    moe_gemm_kernel(A, B, BS, RMAP, TILE_E, META, COUNTER, C, R, c_rows, stage, K, N, b_kind, tile_m, tile_n,
                    tile_k, nb).launch(grid=(grid, 1, 1), block=(BLOCK, 1, 1), stream=stream)


# ---------------------------------------------------------------------------
# Kernel 3: combine
# ---------------------------------------------------------------------------


@flyc.kernel(known_block_size=[BLOCK, 1, 1])
def moe_combine_kernel(Y: fx.Tensor, OUT: fx.Tensor, D: fx.Constexpr[int]):
    t = fx.Int32(fx.block_idx.x)
    tid = fx.Int32(fx.thread_idx.x)
    for c in range_constexpr(-(-D // (BLOCK * 8))):
        col = (c * BLOCK + tid) * 8
        if col < D:
            y0 = _gload(Y, (t * TOPK) * D + col, 4, fx.Float32, 8)
            y1 = _gload(Y, (t * TOPK + 1) * D + col, 4, fx.Float32, 8)
            _gstore(OUT, t * D + col, 2, (y0 + y1).to(fx.BFloat16).bitcast(fx.Int32))


@flyc.jit
def launch_combine(Y: fx.Tensor, OUT: fx.Tensor, T: fx.Int32, D: fx.Constexpr[int],
                   stream: fx.Stream = fx.Stream(None)):
    """One workgroup per token."""
    moe_combine_kernel(Y, OUT, D).launch(grid=(T, 1, 1), block=(BLOCK, 1, 1), stream=stream)


# ---------------------------------------------------------------------------
# Python launcher
# ---------------------------------------------------------------------------


def _tensor(name, t, dtype, shape, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mega_moe: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"mega_moe: {name} dtype must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"mega_moe: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"mega_moe: {name} must be contiguous, got strides {t.stride()}")
    if device is not None and t.device != device:
        raise ValueError(f"mega_moe: {name} is on {t.device} but x is on {device}")


def _interleave_gate_up(w: torch.Tensor) -> torch.Tensor:
    """(E, 2I, ...) gate rows then up rows -> blocks of 16 gate rows and 16 up rows alternating."""
    e, n2 = w.shape[:2]
    rest = tuple(w.shape[2:])
    return w.reshape(e, 2, n2 // 32, 16, *rest).transpose(1, 2).reshape(e, n2, *rest).contiguous()


def mega_moe(
    x: torch.Tensor,
    router_logits: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    *,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    scoring: str = "softmax",
    renormalize: bool = False,
    persistent: int = DEFAULTS["persistent"],
    tile_m: int = DEFAULTS["tile_m"],
    tile_n: int = DEFAULTS["tile_n"],
    tile_k: int = DEFAULTS["tile_k"],
    nb: int = DEFAULTS["nb"],
    out: torch.Tensor | None = None,
    return_intermediates: bool = False,
):
    """Top-2 MoE of ``x`` (T, D) bf16; returns ``out`` (T, D) bf16 (see the module docstring).

    ``router_logits`` (T, E) f32; ``w1`` (E, 2I, D) gate rows then up rows and ``w2`` (E, D, I),
    both bf16 or both ``torch.float8_e4m3fn``; ``w1_scale`` (E, 2I) / ``w2_scale`` (E, D) f32
    per-output-channel scales (default ones). ``scoring`` is "softmax" or "sigmoid";
    ``renormalize`` divides the two weights by their sum. The grouped GEMM runs ``persistent``
    workgroups that pull work items; ``tile_m`` (16: 1 x 4 waves, or 32: 2 x 2 waves; also the
    expert-segment granule), ``tile_n`` (64 or 128), ``tile_k`` (a multiple of 32) and ``nb``
    (ring stages, 2-4) configure it. Runs four FlyDSL launches (route, stage 1, stage 2,
    combine) on CPU tensors under a launch interceptor (ldssan's virtual gfx1250) or on a GPU.
    With ``return_intermediates`` it returns ``(out, buffers)``, the dict of device buffers
    (``topk_ids``, ``topk_weights``, ``xs``, ``h``, ``y``, ``rowmap1`` / ``rowmap2`` (rows, 2)
    i32 [dst, weight bits], ``tile_expert``, ``meta``, ``counters``).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("mega_moe: x must be a 2-D (T, D) torch.Tensor")
    _tensor("x", x, torch.bfloat16, x.shape, None)
    t_, d = x.shape
    dev = x.device
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError("mega_moe: router_logits must be a 2-D (T, E) torch.Tensor")
    n_exp = router_logits.shape[1]
    _tensor("router_logits", router_logits, torch.float32, (t_, n_exp), dev)
    if not TOPK <= n_exp <= MAX_EXPERTS:
        raise ValueError(f"mega_moe: the number of experts must be in [{TOPK}, {MAX_EXPERTS}], got {n_exp}")
    if not 1 <= t_ <= MAX_TOKENS:
        raise ValueError(f"mega_moe: tokens (x.shape[0]) must be in [1, {MAX_TOKENS}], got {t_}")
    if d % 256:
        raise ValueError(f"mega_moe: model_dim (x.shape[1]) must be a multiple of 256, got {d}")
    if not isinstance(w1, torch.Tensor) or w1.dim() != 3:
        raise ValueError("mega_moe: w1 must be a 3-D (E, 2I, D) torch.Tensor")
    if w1.dtype not in _TORCH_W:
        raise TypeError(f"mega_moe: w1 dtype must be torch.bfloat16 or torch.float8_e4m3fn, got {w1.dtype}")
    b_kind = _TORCH_W[w1.dtype]
    inter = w1.shape[1] // 2
    if inter <= 0 or inter % 64:
        raise ValueError(f"mega_moe: inter_dim (w1.shape[1] / 2) must be a positive multiple of 64, got {inter}")
    _tensor("w1", w1, None, (n_exp, 2 * inter, d), dev)
    _tensor("w2", w2, w1.dtype, (n_exp, d, inter), dev)
    if scoring not in _SCORING:
        raise ValueError(f"mega_moe: scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    for name, v in (("persistent", persistent), ("tile_m", tile_m), ("tile_n", tile_n), ("tile_k", tile_k),
                    ("nb", nb)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"mega_moe: {name} must be a positive int, got {v!r}")
    # both specialisations are validated before anything is launched
    moe_gemm_config(1, d, 2 * inter, b_kind, tile_m, tile_n, tile_k, nb)
    moe_gemm_config(2, inter, d, b_kind, tile_m, tile_n, tile_k, nb)
    ones = None
    if w1_scale is None or w2_scale is None:
        ones = torch.ones(n_exp, max(2 * inter, d), dtype=torch.float32, device=dev)
    s1 = ones[:, : 2 * inter].contiguous() if w1_scale is None else w1_scale
    s2 = ones[:, :d].contiguous() if w2_scale is None else w2_scale
    _tensor("w1_scale", s1, torch.float32, (n_exp, 2 * inter), dev)
    _tensor("w2_scale", s2, torch.float32, (n_exp, d), dev)
    if out is not None:
        _tensor("out", out, torch.bfloat16, (t_, d), dev)
    check_target("mega_moe")
    if out is None:
        out = torch.empty(t_, d, dtype=torch.bfloat16, device=dev)
    check_can_launch("mega_moe")

    rows = rows_max(t_, n_exp, tile_m)
    i32 = dict(dtype=torch.int32, device=dev)
    f32 = dict(dtype=torch.float32, device=dev)
    buf = {
        "xs": torch.zeros(rows, d, dtype=torch.bfloat16, device=dev),
        "rowmap1": torch.empty(rows, 2, **i32), "rowmap2": torch.empty(rows, 2, **i32),
        "tile_expert": torch.empty(rows // tile_m, **i32), "meta": torch.zeros(4, **i32),
        "topk_ids": torch.empty(t_, TOPK, **i32), "topk_weights": torch.empty(t_, TOPK, **f32),
        "h": torch.zeros(rows, inter, dtype=torch.bfloat16, device=dev),
        "y": torch.empty(t_ * TOPK, d, **f32),
        "counters": torch.zeros(2, **i32),
    }
    launch_route(router_logits, x, buf["xs"], buf["rowmap1"], buf["rowmap2"], buf["tile_expert"], buf["meta"],
                 buf["topk_ids"], buf["topk_weights"], t_, rows, n_exp, d, tile_m, scoring, bool(renormalize))
    grid = min(persistent, rows // tile_m * max(2 * inter, d) // tile_n)
    launch_grouped_gemm(buf["xs"], _interleave_gate_up(w1), _interleave_gate_up(s1), buf["rowmap1"],
                        buf["tile_expert"], buf["meta"], buf["counters"][0:1], buf["h"], rows, rows, grid, 1, d,
                        2 * inter, b_kind, tile_m, tile_n, tile_k, nb)
    launch_grouped_gemm(buf["h"], w2, s2, buf["rowmap2"], buf["tile_expert"], buf["meta"], buf["counters"][1:2],
                        buf["y"], rows, t_ * TOPK, grid, 2, inter, d, b_kind, tile_m, tile_n, tile_k, nb)
    launch_combine(buf["y"], out, t_, d)
    if return_intermediates:
        return out, buf
    return out


# ---------------------------------------------------------------------------
# Mutation support
# ---------------------------------------------------------------------------

_SYNC_PREFIXES = {
    "wait": "tdm_ops.tensor_wait(",
    "barrier": "fx.gpu.barrier()",
    "async_wait": "fx.rocdl.s_wait_asynccnt(",
}
_SYNC_ORDER = (
    ("init_barrier", "barrier"),
    ("count_barrier", "barrier"),
    ("reserve_barrier", "barrier"),
    ("finalize_barrier", "barrier"),
    ("tile_publish_barrier", "barrier"),
    ("tile_read_barrier", "barrier"),
    ("steady_wait", "wait"),
    ("steady_barrier", "barrier"),
    ("drain_wait", "wait"),
    ("drain_barrier", "barrier"),
    ("rowmap_wait", "async_wait"),
    ("epilogue_barrier", "barrier"),
)
# role: (exact stripped text, which occurrence in the file)
_DATA_SITES = {
    "count_atomic": ("fx.atomic_add(_word(count, e0), fx.Int32(1), syncscope=\"workgroup\")", 0),
    "reserve_store": ("fx.ptr_store(_segment_start(tid), _word(base, tid))", 0),
    "reserve_count_read": ("c = fx.ptr_load(_word(count, j))", 0),
    "finalize_place": ("_place(tok, 0, e0, w0)", 0),
    "dispatch_slot_read": ("row = fx.ptr_load(_word(slot, p))", 0),
    "tile_word": ("tile_word = lds_addr + cfg.tile_word_off", 0),
    "tile_store": ("fx.ptr_store(fx.atomic_add(_at(COUNTER, 0), fx.Int32(1)), _lds_i32(tile_word))", 0),
    "tile_load": ("v = _uniform(fx.ptr_load(_lds_i32(tile_word)))", 0),
    "tile_fetch_first": ("_fetch_tile()", 0),
    "tile_read_first": ("tile = _read_tile()", 0),
    "tile_fetch": ("_fetch_tile()", 1),
    "prologue_issue": ("_issue_stage(s)", 0),
    "rowmap_issue": ("_rowmap_job(j, m0)", 0),
    "rowmap_copy": ("fx.rocdl.global_load_async_to_lds_b32(src.llvm_ptr, dst.llvm_ptr, 0)", 0),
    "prefetch_issue": ("_issue_stage(kt + nb - 1)", 0),
    "steady_compute": ("_compute(kt % nb)", 0),
    "drain_compute": ("_compute((n_steady + j) % nb)", 0),
    "rowmap_read": ("rows = _read_rowmap()", 0),
    "tile_read": ("nxt = _read_tile()", 0),
}


def _source_lines() -> list[str]:
    with open(__file__, encoding="utf-8") as f:
        return f.read().splitlines()


def _device_lines() -> list[tuple[int, str]]:
    lines = _source_lines()
    start = next(i for i, t in enumerate(lines) if t.startswith("def moe_route_kernel("))
    end = next(i for i, t in enumerate(lines) if t.startswith("def launch_grouped_gemm("))
    return [(i + 1, lines[i].strip()) for i in range(start, end)]


def sync_sites() -> dict[str, int]:
    """Source lines (in this file) of the kernels' synchronisations, by role, in program order.

    Each line holds exactly one statement: ``fx.gpu.barrier()``, ``tdm_ops.tensor_wait(...)``
    or ``fx.rocdl.s_wait_asynccnt(...)``. Route kernel: ``init_barrier``, ``count_barrier``,
    ``reserve_barrier``, ``finalize_barrier``; grouped GEMM: ``tile_publish_barrier``,
    ``tile_read_barrier``, ``steady_wait``, ``steady_barrier``, ``drain_wait``,
    ``drain_barrier``, ``rowmap_wait``, ``epilogue_barrier``.
    """
    found = [(line, kind) for line, text in _device_lines() for kind, prefix in _SYNC_PREFIXES.items()
             if text.startswith(prefix)]
    if tuple(k for _, k in found) != tuple(k for _, k in _SYNC_ORDER):
        raise RuntimeError(f"unexpected synchronisation lines in {__file__}: {found}")
    return {name: line for (name, _), (line, _) in zip(_SYNC_ORDER, found)}


def protocol_sites() -> dict[str, int]:
    """``sync_sites()`` plus the LDS data-movement lines a mutation or a planted bug edits.

    Route: ``count_atomic`` (COUNT, k = 0), ``reserve_store`` / ``reserve_count_read``
    (RESERVE), ``finalize_place``, ``dispatch_slot_read``. Grouped GEMM: ``tile_word`` (the
    word's LDS address), ``tile_store`` / ``tile_load`` (the ds store and load of the word,
    inside ``_fetch_tile`` / ``_read_tile``), ``tile_fetch_first`` / ``tile_read_first``
    (before the loop), ``tile_fetch`` (the prefetch of the next index at the top of the
    loop), ``prologue_issue``, ``rowmap_issue`` / ``rowmap_copy``, ``prefetch_issue``,
    ``steady_compute``, ``drain_compute``, ``rowmap_read``, ``tile_read`` (in the epilogue).
    """
    sites = dict(sync_sites())
    lines = _device_lines()
    for name, (text, nth) in _DATA_SITES.items():
        hits = [line for line, t in lines if t == text]
        if len(hits) <= nth:
            raise RuntimeError(f"expected line {text!r} (occurrence {nth}) in {__file__}, found {hits}")
        sites[name] = hits[nth]
    return sites
