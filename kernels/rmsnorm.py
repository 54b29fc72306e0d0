"""RMSNorm for gfx1250 (wave32) in FlyDSL, with a numpy reference.

    y[m, :] = x[m, :] * rsqrt(mean(x[m, :]^2) + eps) * gamma        (fp32 math)

Input/output/gamma dtype: bf16 or f32 (output = input dtype). One workgroup of
256 threads (8 waves of 32 lanes) per row; grid = (M, 1, 1).

Data path (per row, all global traffic through AMD buffer resources sized to
the row, so out-of-range lanes read zero and drop their stores):

Rows are addressed as static ``(N):(1)`` views at ``x + row * N`` (the
launcher requires contiguous tensors), so the kernel is specialised on (N, dtype)
only; ``eps`` is a runtime argument.

* pass 1: every thread sums x^2 over its strided 128-bit vectors (8 x bf16 or
  4 x f32; vector v = tid + k*256) into a vector<f32> accumulator, folds it to
  a scalar, and adds the scalar tail elements (N % vector width; threads
  tid < tail count);
* cross-wave reduction through LDS (``_block_sum``, below);
* pass 2: every thread re-reads its x vectors and gamma, writes
  ``(x * rrms) * gamma`` rounded to the output dtype (bf16: round to nearest even).

LDS protocol (``_block_sum`` inside ``rmsnorm_kernel``). Two LDS buffers
(``_ReductionSmem``): ``partial`` (8 x f32, one slot per wave) and ``total``
(1 x f32). Every synchronisation is one source line holding nothing but
``fx.gpu.barrier()``, so a mutation tool can delete or replace exactly that line:

1. each wave butterflies its 32 lane sums with ``shuffle_xor`` (no LDS);
   lane 0 of wave w **publishes** ``partial[w]``
   (the ``fx.memref_store(w_sum, partial, wave)`` line);
2. barrier #1 (``publish_partials``) makes the 8 partials
   visible to wave 0;
3. wave 0, lanes 0..7, **read** ``partial[lane]``, butterfly them, and lane 0
   **publishes** ``total[0]`` (the ``fx.memref_store(wg_sum, total, 0)`` line);
4. barrier #2 (``publish_total``) makes the total visible;
5. every thread **reads** ``total[0]`` (the ``return fx.memref_load(total, 0)``
   line) and computes rrms.

Deleting barrier #1 lets wave 0 read stale/uninitialised partials (cross-wave
RAW); deleting barrier #2 lets waves 1..7 read ``total`` before wave 0 wrote it.
``partial`` and ``total`` are separate buffers, so the protocol has no WAR reuse.

Target selection: importing this module sets no environment variable; a launch
selects gfx1250 for itself when the caller did not (``kernels/_launch.py``,
``gfx1250_target``). ``launch_rmsnorm`` checks that ``M`` rows fit the tensors
before anything runs, so a bad ``M`` leaves the output untouched.
"""

import math

import ml_dtypes
import numpy as np
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import const_expr, range_constexpr

from ldssan.kernels._launch import check_rows, check_tensor, gfx1250_target, launch

__all__ = [
    "BLOCK_THREADS",
    "MAX_N",
    "NUM_WAVES",
    "WAVE_SIZE",
    "launch_rmsnorm",
    "rmsnorm",
    "rmsnorm_kernel",
    "rmsnorm_reference",
    "vector_width",
]

WAVE_SIZE = 32  # gfx1250 is wave32 only
NUM_WAVES = 8
BLOCK_THREADS = WAVE_SIZE * NUM_WAVES  # 256
VEC_BITS = 128  # one buffer_load_b128 per lane
MAX_N = 65536
TARGET_ARCH = "gfx1250"

_TORCH_DTYPES = {torch.bfloat16: "bf16", torch.float32: "f32"}


def vector_width(elem_bits: int) -> int:
    """Elements per 128-bit vector access: 8 for bf16, 4 for f32."""
    return VEC_BITS // elem_bits


def _row_split(n: int, elem_bits: int) -> dict:
    """How a row of ``n`` elements is split between the vector and scalar paths.

    Shared by the kernel (at trace time) and the reference, so both walk the
    row identically.
    """
    vec = vector_width(elem_bits)
    n_vec = n // vec  # whole vectors in the row
    return {
        "vec": vec,
        "n_vec": n_vec,
        "full_trips": n_vec // BLOCK_THREADS,  # trips in which every thread has a vector
        "rem_vec": n_vec % BLOCK_THREADS,  # threads with a vector in the last, partial trip
        "tail_base": n_vec * vec,  # first element handled by the scalar path
        "n_tail": n % vec,  # scalar elements, threads 0 .. n_tail-1
    }


@fx.struct
class _ReductionSmem:
    partial: fx.Array[fx.Float32, NUM_WAVES, 16]  # one slot per wave
    total: fx.Array[fx.Float32, 1, 16]  # the workgroup sum


# ---------------------------------------------------------------------------
# Device helpers without dynamic control flow (so they need no AST rewriting).
# ---------------------------------------------------------------------------


def _row(tensor, row, n):
    """Row ``row`` of a contiguous tensor with ``n`` columns, as a static (n):(1) view.

    The launcher checks contiguity, so the row stride is ``n``; the static
    layout keeps the kernel independent of the (dynamic) torch strides.
    """
    base = fx.get_iter(tensor)
    if not isinstance(row, int):
        base = fx.add_offset(base, fx.Int64(row) * n)
    return fx.make_view(base, fx.make_layout(n, 1))


def _load(atom, tiles, index, width, dtype):
    """Buffer-load tile ``index`` (``width`` elements) of ``tiles`` into registers."""
    regs = fx.make_rmem_tensor(width, dtype)
    fx.copy_atom_call(atom, fx.slice(tiles, (None, index)), regs)
    return fx.memref_load_vec(regs)


def _store(atom, tiles, index, width, dtype, value):
    """Buffer-store the ``width``-element vector ``value`` to tile ``index`` of ``tiles``."""
    regs = fx.make_rmem_tensor(width, dtype)
    fx.memref_store_vec(value, regs)
    fx.copy_atom_call(atom, regs, fx.slice(tiles, (None, index)))


def _wave_sum(value, span):
    """Butterfly sum over lane groups of ``span`` lanes (``span`` a power of two <= 32).

    After the call every lane of a group holds the group's sum; lane l adds the
    value of lane l ^ off for off = span/2, ..., 2, 1.
    """
    for step in range_constexpr(int(math.log2(span))):
        off = span >> (step + 1)
        value = value + value.shuffle_xor(off, WAVE_SIZE)
    return value


# ---------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------


@flyc.kernel(known_block_size=[BLOCK_THREADS, 1, 1])
def rmsnorm_kernel(
    X: fx.Tensor,
    Gamma: fx.Tensor,
    Y: fx.Tensor,
    eps: fx.Float32,
    N: fx.Constexpr[int],
):
    elem = X.dtype
    ebits = elem.width
    split = _row_split(N, ebits)
    vec = split["vec"]
    full_trips = split["full_trips"]
    rem_vec = split["rem_vec"]
    tail_base = split["tail_base"]
    n_tail = split["n_tail"]

    row = fx.block_idx.x
    tid = fx.thread_idx.x
    lane = tid % WAVE_SIZE
    wave = tid // WAVE_SIZE

    smem = fx.SharedAllocator().allocate(_ReductionSmem).peek()
    partial = smem.partial.view(fx.make_layout(NUM_WAVES, 1))
    total = smem.total.view(fx.make_layout(1, 1))

    # Buffer resources over exactly one row (and gamma): AMD out-of-range rules
    # apply at the row end; the row offset itself is 64-bit pointer arithmetic.
    x_row = fx.rocdl.make_buffer_tensor(_row(X, row, N), max_size=False)
    y_row = fx.rocdl.make_buffer_tensor(_row(Y, row, N), max_size=False)
    g_row = fx.rocdl.make_buffer_tensor(_row(Gamma, 0, N), max_size=False)
    x_vecs = fx.logical_divide(x_row, fx.make_layout(vec, 1))
    y_vecs = fx.logical_divide(y_row, fx.make_layout(vec, 1))
    g_vecs = fx.logical_divide(g_row, fx.make_layout(vec, 1))
    x_elems = fx.logical_divide(x_row, fx.make_layout(1, 1))
    y_elems = fx.logical_divide(y_row, fx.make_layout(1, 1))
    g_elems = fx.logical_divide(g_row, fx.make_layout(1, 1))
    vec_atom = fx.make_copy_atom(fx.rocdl.BufferCopy(VEC_BITS), ebits)
    elem_atom = fx.make_copy_atom(fx.rocdl.BufferCopy(ebits), ebits)

    def _block_sum(value):
        # Workgroup-wide sum of `value` through LDS; every thread gets the result.
        w_sum = _wave_sum(value, WAVE_SIZE)
        if lane == 0:
            fx.memref_store(w_sum, partial, wave)
        fx.gpu.barrier()
        if wave == 0:
            p = fx.Float32(0.0)
            if lane < NUM_WAVES:
                p = fx.memref_load(partial, lane)
            wg_sum = _wave_sum(p, NUM_WAVES)
            if lane == 0:
                fx.memref_store(wg_sum, total, 0)
        fx.gpu.barrier()
        return fx.memref_load(total, 0)

    # ---- pass 1: per-thread sum of squares --------------------------------
    sq = fx.full(vec, 0.0, fx.Float32)
    for k in range(full_trips):
        xv = _load(vec_atom, x_vecs, tid + k * BLOCK_THREADS, vec, elem).to(fx.Float32)
        sq = sq + xv * xv
    if const_expr(rem_vec > 0):
        if tid < rem_vec:
            xv = _load(vec_atom, x_vecs, tid + full_trips * BLOCK_THREADS, vec, elem).to(fx.Float32)
            sq = sq + xv * xv
    thread_sum = sq.reduce(fx.ReductionOp.ADD)
    if const_expr(n_tail > 0):
        t_sq = fx.Float32(0.0)
        if tid < n_tail:
            xt = _load(elem_atom, x_elems, tail_base + tid, 1, elem)[0].to(fx.Float32)
            t_sq = xt * xt
        thread_sum = thread_sum + t_sq

    # ---- cross-wave reduction (LDS) ----------------------------------------
    row_sum = _block_sum(thread_sum)
    rrms = fx.rsqrt(row_sum / float(N) + eps, fastmath="fast")

    # ---- pass 2: normalise, scale, store ------------------------------------
    def _normalize_vec(v):
        xv = _load(vec_atom, x_vecs, v, vec, elem).to(fx.Float32)
        gv = _load(vec_atom, g_vecs, v, vec, elem).to(fx.Float32)
        _store(vec_atom, y_vecs, v, vec, elem, ((xv * rrms) * gv).to(elem))

    for k in range(full_trips):
        _normalize_vec(tid + k * BLOCK_THREADS)
    if const_expr(rem_vec > 0):
        if tid < rem_vec:
            _normalize_vec(tid + full_trips * BLOCK_THREADS)
    if const_expr(n_tail > 0):
        if tid < n_tail:
            e = tail_base + tid
            xt = _load(elem_atom, x_elems, e, 1, elem)[0].to(fx.Float32)
            gt = _load(elem_atom, g_elems, e, 1, elem)[0].to(fx.Float32)
            _store(elem_atom, y_elems, e, 1, elem, fx.full(1, (xt * rrms) * gt, elem))


@flyc.jit
def _launch_rmsnorm(
    X: fx.Tensor,
    Gamma: fx.Tensor,
    Y: fx.Tensor,
    M: fx.Int32,
    eps: fx.Float32,
    N: fx.Constexpr[int],
    stream: fx.Stream = fx.Stream(None),
):
    """Host-side launch: one workgroup of 256 threads per row."""
    rmsnorm_kernel(X, Gamma, Y, eps, N).launch(
        grid=(M, 1, 1),
        block=(BLOCK_THREADS, 1, 1),
        stream=stream,
    )


def launch_rmsnorm(X, Gamma, Y, M: int, eps: float, N: int, stream=None) -> None:
    """The raw launch (grid = (M, 1, 1)) after checking that X and Y hold M rows of N and
    Gamma holds N, so a bad size is an error before any row is written."""
    for name, t, rows, row in (("X", X, M, (N,)), ("Y", Y, M, (N,)), ("Gamma", Gamma, N, ())):
        check_rows("rmsnorm", name, t, rows, row)
    launch("rmsnorm", _launch_rmsnorm, (X, Gamma, Y, M, eps, N), stream)


# ---------------------------------------------------------------------------
# Python launcher
# ---------------------------------------------------------------------------


def _validate(x: torch.Tensor, gamma: torch.Tensor, eps: float, out: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rmsnorm: x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(gamma, torch.Tensor):
        raise TypeError(f"rmsnorm: gamma must be a torch.Tensor, got {type(gamma).__name__}")
    if x.dtype not in _TORCH_DTYPES:
        raise TypeError(f"rmsnorm: x dtype must be torch.bfloat16 or torch.float32, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"rmsnorm: x must be 2-D (M, N), got shape {tuple(x.shape)}")
    m, n = x.shape
    if not 1 <= n <= MAX_N:
        raise ValueError(f"rmsnorm: N (x.shape[1]) must be in [1, {MAX_N}], got {n}")
    if m >= 2**31:
        raise ValueError(f"rmsnorm: M (x.shape[0]) must be < 2**31, got {m}")
    if not x.is_contiguous():
        raise ValueError(f"rmsnorm: x must be contiguous, got strides {x.stride()}")
    check_tensor("rmsnorm", "gamma", gamma, x.dtype, (n,), x.device)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"rmsnorm: eps must be a finite float >= 0, got {eps!r}")
    if out is not None:
        check_tensor("rmsnorm", "out", out, x.dtype, (m, n), x.device, optional=True)


def rmsnorm(
    x: torch.Tensor,
    gamma: torch.Tensor,
    eps: float = 1e-6,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """RMSNorm of each row of ``x`` (M, N) scaled by ``gamma`` (N,); returns ``out``.

    Launches ``rmsnorm_kernel`` through FlyDSL exactly as on hardware
    (grid=(M,1,1), block=(256,1,1)). Tensors may be CPU tensors (run under a
    launch interceptor such as ldssan's virtual gfx1250) or GPU tensors. The
    kernel is specialised per (N, dtype); eps is a runtime argument. If the
    environment sets COMPILE_ONLY=1, FlyDSL only compiles and ``out`` is
    returned unwritten.
    """
    _validate(x, gamma, eps, out)
    m, n = x.shape
    if out is None:
        out = torch.empty_like(x)
    with gfx1250_target("rmsnorm"):  # checks the target even when there is nothing to launch
        if m:
            launch_rmsnorm(x, gamma, out, m, float(eps), n)
    return out


# ---------------------------------------------------------------------------
# numpy reference
# ---------------------------------------------------------------------------


def _np_dtype_name(dtype: np.dtype) -> str:
    if dtype == np.dtype(ml_dtypes.bfloat16):
        return "bf16"
    if dtype == np.dtype(np.float32):
        return "f32"
    raise TypeError(f"rmsnorm_reference: dtype must be ml_dtypes.bfloat16 or float32, got {dtype}")


def _butterfly(values: np.ndarray, span: int) -> np.ndarray:
    """numpy twin of ``_wave_sum`` over the last axis (lanes), in f32."""
    lanes = np.arange(values.shape[-1])
    off = span // 2
    while off >= 1:
        values = values + values[..., lanes ^ off]
        off //= 2
    return values


def rmsnorm_reference(x: np.ndarray, gamma: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm of each row of ``x`` (M, N), accumulated in f32 in the kernel's order.

    Mirrors the kernel step by step: per-thread vector accumulators over the
    strided 128-bit vectors, a sequential fold of the vector lanes, the scalar
    tail, the 32-lane butterfly per wave, the 8-partial butterfly of wave 0,
    ``sum / N + eps``, ``1 / sqrt`` (the GPU uses the hardware reciprocal square
    root, within 1 ulp of this), then ``(x * rrms) * gamma`` rounded to the
    input dtype (bf16 round-to-nearest-even via ml_dtypes).
    """
    x = np.asarray(x)
    gamma = np.asarray(gamma)
    name = _np_dtype_name(x.dtype)
    if gamma.dtype != x.dtype:
        raise TypeError(f"rmsnorm_reference: gamma dtype {gamma.dtype} must match x dtype {x.dtype}")
    if x.ndim != 2 or gamma.shape != (x.shape[1],):
        raise ValueError(f"rmsnorm_reference: need x (M, N) and gamma (N,), got {x.shape} and {gamma.shape}")
    m, n = x.shape
    split = _row_split(n, 16 if name == "bf16" else 32)
    vec, n_vec = split["vec"], split["n_vec"]

    xf = x.astype(np.float32)
    gf = gamma.astype(np.float32)
    f32 = np.float32

    # pass 1: thread t owns vectors t, t+256, ...; zero padding adds +0.0 (exact).
    trips = split["full_trips"] + (1 if split["rem_vec"] else 0)
    padded = np.zeros((m, trips * BLOCK_THREADS * vec), dtype=np.float32)
    padded[:, : n_vec * vec] = xf[:, : n_vec * vec]
    padded = padded.reshape(m, trips, BLOCK_THREADS, vec)
    sq = np.zeros((m, BLOCK_THREADS, vec), dtype=np.float32)
    for k in range(trips):
        sq = sq + padded[:, k] * padded[:, k]
    thread_sum = np.zeros((m, BLOCK_THREADS), dtype=np.float32)
    for j in range(vec):  # sequential fold, like an ordered vector.reduction
        thread_sum = thread_sum + sq[:, :, j]
    tail = np.zeros((m, BLOCK_THREADS), dtype=np.float32)
    tail[:, : split["n_tail"]] = xf[:, split["tail_base"] :]
    thread_sum = thread_sum + tail * tail

    # cross-wave reduction
    waves = _butterfly(thread_sum.reshape(m, NUM_WAVES, WAVE_SIZE), WAVE_SIZE)
    wave0 = np.zeros((m, WAVE_SIZE), dtype=np.float32)
    wave0[:, :NUM_WAVES] = waves[:, :, 0]
    row_sum = _butterfly(wave0, NUM_WAVES)[:, 0]

    mean = row_sum / f32(n) + f32(eps)
    rrms = (f32(1.0) / np.sqrt(mean)).astype(np.float32)
    y = (xf * rrms[:, None]) * gf[None, :]
    return y.astype(x.dtype)
