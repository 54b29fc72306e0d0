"""numpy model of the bundled GEMM (`ldssan.kernels.gemm`): the same products, the same
accumulation per WMMA K block, the same epilogue rounding. `wmma_accumulate` is shared with
the MegaMoE reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ldssan.kernels._launch import as_numpy

_WMMA_K = {"fp8": 128, "bf16": 32}  # K depth of one WMMA per input kind (as in gemm.py)
_TORCH_OUT = {torch.bfloat16: "bf16", torch.float32: "f32"}

_NP_IN = {np.dtype(ml_dtypes.float8_e4m3fn): "fp8", np.dtype(ml_dtypes.bfloat16): "bf16"}
_NP_OUT = {"bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32)}


def _as_numpy(x, name: str) -> np.ndarray:
    if not isinstance(x, (torch.Tensor, np.ndarray)):
        raise TypeError(f"gemm_reference: {name} must be a numpy array or torch tensor, got {type(x).__name__}")
    return as_numpy(x)


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
