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
barriers (each barrier one ``fx.gpu.barrier()`` line):

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
``interleave_gate_up``), so each wave's accumulator pairs (2p, 2p+1) hold the gate and the
up columns of the same 16 outputs: ``h = silu(g) * u = (g / (exp2(-g log2 e) + 1)) * u``.
Indices read back from memory (a dispatch row, a rowmap ``dst``, the tile word) are checked
against their range before they address a store, as a buffer store's bounds would: only a
broken protocol produces one out of range, and then the sanitizer reports it instead of the
emulator stopping at a wild store.

Planted bugs (tests/sanitizer/test_mega_moe_bugs.py): ``tile_read_barrier`` deleted (aiter
#6127 class, LDS002); ``tile_word`` inside ring slot 0 (LDS012); ``count_barrier`` deleted
(LDS001); ``rowmap_read`` moved above ``rowmap_wait`` (LDS010).

Numerics (``mega_moe_reference``): scores in f32 as the kernel computes them (softmax: max,
``exp2((l - max) * log2 e)``, a left-to-right sum, division; sigmoid: ``1 / (1 + exp2(-l *
log2 e))``); top-2 on the scores; GEMMs as ``gemm.wmma_accumulate`` (f32 accumulation per
32-deep K block); the epilogues' f32 operations in the kernel's order; bf16 rounding of H and
of the output. On the virtual gfx1250 the kernel matches the reference bit for bit; on
hardware ``exp2`` is approximate (about 1 ulp), so compare at bf16 precision (a near-tie of
two scores may then also pick a different expert).

NaN/Inf router logits propagate as in the reference (not rejected): scores follow IEEE
arithmetic and top-2 ranks NaN below every number (``_beats``), so such a token's weights and
output row are NaN. Sizes, limits, the LDS layout and the argument checks: ``mega_moe_config``.
"""

import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl.expr import const_expr, range_constexpr
from flydsl.expr.rocdl import tdm_ops
from flydsl.expr.typing import Vector as Vec

from ldssan.kernels._launch import check_can_launch, gfx1250_target
from ldssan.kernels.mega_moe_config import (  # noqa: F401  (re-exported: the public sizes)
    BLOCK, DEFAULTS, MAX_EXPERTS, MAX_TOKENS, TILE_MS, WAVE_SIZE, WAVES, MoeGemmConfig, check_problem,
    interleave_gate_up, moe_gemm_config, rows_max,
)
from ldssan.kernels.mega_moe_reference import LOG2E, TOPK, mega_moe_reference, route_reference  # noqa: F401
from ldssan.kernels.ring_pipeline import TDM_PER_WAVE, RingPipeline, _lds_load_f32, _lds_ptr_type, _min_i32

__all__ = ["ASYNC_OUTSTANDING", "MAX_EXPERTS", "MAX_TOKENS", "TILE_MS", "TOPK", "MoeGemmConfig", "launch_combine",
           "launch_route", "launch_grouped_gemm", "mega_moe", "mega_moe_reference", "moe_combine_kernel",
           "moe_gemm_config", "moe_gemm_kernel", "moe_route_kernel", "route_reference", "rows_max"]

ASYNC_OUTSTANDING = 0  # rowmap words a wave may leave in flight at the epilogue barrier


# ---- Device helpers (straight-line code: no dynamic control flow) ----


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


def _beats(p, b):
    """Score ``p`` ranks above ``b``: larger, or a number against a NaN (NaN ranks last)."""
    return (p > b) | ((b != b) & (p == p))


def _top2(score, renorm: bool):
    """(e0, w0, e1, w1): the two highest-ranked scores (``_beats``), the lower index first on
    ties and among NaNs, as the reference's stable descending sort."""
    first = _beats(score[1], score[0])
    b0, i0 = first.select(score[1], score[0]), first.select(fx.Int32(1), fx.Int32(0))
    b1, i1 = first.select(score[0], score[1]), first.select(fx.Int32(0), fx.Int32(1))
    for e in range_constexpr(2, len(score)):
        p = score[e]
        gt0 = _beats(p, b0)
        gt1 = _beats(p, b1)
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


# ---- Kernel 1: routing (protocol A) ----


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


# ---- Kernel 2: the persistent grouped GEMM (protocol B), stages 1 and 2 ----


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

        # gemm_kernel's loop again: its waits and barriers are protocol lines campaigns mutate here
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


# ---- Kernel 3: combine ----


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


# ---- Python launcher ----


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
    p = check_problem(x, router_logits, w1, w2, w1_scale, w2_scale, scoring,
                      dict(persistent=persistent, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, nb=nb), out)
    if out is None:
        out = torch.empty(p.tokens, p.model_dim, dtype=torch.bfloat16, device=x.device)
    with gfx1250_target("mega_moe"):
        check_can_launch("mega_moe")
        buf = _launch_all(p, x, router_logits, w1, w2, out, scoring, bool(renormalize), persistent,
                          (tile_m, tile_n, tile_k, nb))
    return (out, buf) if return_intermediates else out


def _launch_all(p, x, router_logits, w1, w2, out, scoring: str, renorm: bool, persistent: int, geometry) -> dict:
    """The four launches of a checked problem ``p``; returns the device buffers."""
    t_, n_exp, d, inter = p.tokens, p.experts, p.model_dim, p.inter_dim
    tile_m, tile_n, tile_k, nb = geometry
    rows = rows_max(t_, n_exp, tile_m)
    i32 = dict(dtype=torch.int32, device=x.device)
    f32 = dict(dtype=torch.float32, device=x.device)
    bf16 = dict(dtype=torch.bfloat16, device=x.device)
    buf = {
        "xs": torch.zeros(rows, d, **bf16),
        "rowmap1": torch.empty(rows, 2, **i32), "rowmap2": torch.empty(rows, 2, **i32),
        "tile_expert": torch.empty(rows // tile_m, **i32), "meta": torch.zeros(4, **i32),
        "topk_ids": torch.empty(t_, TOPK, **i32), "topk_weights": torch.empty(t_, TOPK, **f32),
        "h": torch.zeros(rows, inter, **bf16),
        "y": torch.empty(t_ * TOPK, d, **f32),
        "counters": torch.zeros(2, **i32),
    }
    launch_route(router_logits, x, buf["xs"], buf["rowmap1"], buf["rowmap2"], buf["tile_expert"], buf["meta"],
                 buf["topk_ids"], buf["topk_weights"], t_, rows, n_exp, d, tile_m, scoring, renorm)
    grid = min(persistent, rows // tile_m * max(2 * inter, d) // tile_n)
    launch_grouped_gemm(buf["xs"], interleave_gate_up(w1), interleave_gate_up(p.w1_scale), buf["rowmap1"],
                        buf["tile_expert"], buf["meta"], buf["counters"][0:1], buf["h"], rows, rows, grid, 1, d,
                        2 * inter, p.b_kind, tile_m, tile_n, tile_k, nb)
    launch_grouped_gemm(buf["h"], w2, p.w2_scale, buf["rowmap2"], buf["tile_expert"], buf["meta"],
                        buf["counters"][1:2], buf["y"], rows, t_ * TOPK, grid, 2, inter, d, p.b_kind, tile_m, tile_n,
                        tile_k, nb)
    launch_combine(buf["y"], out, t_, d)
    return buf
