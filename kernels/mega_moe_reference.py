"""numpy model of the bundled MegaMoE (`ldssan.kernels.mega_moe`): routing with the same
scores, top-2 tie rule and order, the two grouped GEMMs with the GEMM's per-WMMA
accumulation (`wmma_accumulate`), SiLU-mul, routing weights and the combine."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ldssan.kernels._launch import as_numpy as _np
from ldssan.kernels.gemm_reference import wmma_accumulate

LOG2E = 1.4426950408889634
TOPK = 2

def _np_exp2(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp2 of a large argument is +inf, as on the GPU
        return np.exp2(np.asarray(x, np.float32)).astype(np.float32)


def route_reference(router_logits, scoring: str = "softmax", renormalize: bool = False):
    """(topk_ids (T, 2) int32, topk_weights (T, 2) f32) as the route kernel computes them."""
    f32 = np.float32
    logit = _np(router_logits).astype(f32)
    if scoring == "sigmoid":
        score = (f32(1.0) / (f32(1.0) + _np_exp2(logit * f32(-LOG2E)))).astype(f32)
    else:
        m = logit.max(axis=1, keepdims=True)
        ex = _np_exp2((logit - m).astype(f32) * f32(LOG2E))
        s = ex[:, :1].copy()
        for j in range(1, ex.shape[1]):
            s = (s + ex[:, j : j + 1]).astype(f32)
        score = (ex / s).astype(f32)
    # stable descending order: among equal scores the lower expert index comes first
    order = np.argsort(-score, axis=1, kind="stable")[:, :TOPK]
    ids = order.astype(np.int32)
    w = np.take_along_axis(score, order, axis=1).astype(f32)
    if renormalize:
        s = (w[:, 0] + w[:, 1]).astype(f32)
        w = (w / s[:, None]).astype(f32)
    return ids, w


def mega_moe_reference(x, router_logits, w1, w2, w1_scale=None, w2_scale=None, scoring: str = "softmax",
                       renormalize: bool = False) -> np.ndarray:
    """numpy model of ``mega_moe``: the same routing, products, accumulation and roundings.

    Returns the (T, D) output as an ml_dtypes bfloat16 array. Each (token, k) row goes
    through the GEMMs alone (rows do not interact), so the row order the route kernel's
    atomics produce does not matter.
    """
    f32 = np.float32
    xs = _np(x)
    w1n, w2n = _np(w1), _np(w2)
    n_exp, n2, d = w1n.shape
    inter = n2 // 2
    s1 = np.ones((n_exp, n2), f32) if w1_scale is None else _np(w1_scale).astype(f32)
    s2 = np.ones((n_exp, d), f32) if w2_scale is None else _np(w2_scale).astype(f32)
    ids, wts = route_reference(router_logits, scoring, renormalize)
    t_ = xs.shape[0]
    y = np.zeros((t_, TOPK, d), f32)
    for e in range(n_exp):
        pairs = np.argwhere(ids == e)
        if pairs.size == 0:
            continue
        a = xs[pairs[:, 0]]
        acc = wmma_accumulate(a, w1n[e].astype(ml_dtypes.bfloat16), 32)
        g = (acc[:, :inter] * s1[e, :inter]).astype(f32)
        u = (acc[:, inter:] * s1[e, inter:]).astype(f32)
        t = _np_exp2((g * f32(-LOG2E)).astype(f32))
        h = (((g / (t + f32(1.0))).astype(f32)) * u).astype(f32).astype(ml_dtypes.bfloat16)
        acc2 = wmma_accumulate(h, w2n[e].astype(ml_dtypes.bfloat16), 32)
        yk = ((acc2 * s2[e]).astype(f32) * wts[pairs[:, 0], pairs[:, 1]][:, None]).astype(f32)
        y[pairs[:, 0], pairs[:, 1]] = yk
    return (y[:, 0] + y[:, 1]).astype(f32).astype(ml_dtypes.bfloat16)


def moe_weights(gen, e: int, d: int, inter: int):
    """Example bf16 expert weights drawn from torch generator `gen`: w1 (E, 2*inter, D) and
    w2 (E, D, inter), each scaled by 1/sqrt(its fan-in) so activations stay near unit size."""
    import torch

    w1 = (torch.randn(e, 2 * inter, d, generator=gen) / d ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(e, d, inter, generator=gen) / inter ** 0.5).to(torch.bfloat16)
    return w1, w2


def moe_inputs(gen, t: int = 8, e: int = 4, d: int = 512, inter: int = 256):
    """Example `mega_moe` arguments (x bf16 (T, D), router logits f32 (T, E), w1, w2) drawn
    from `gen` in that order."""
    import torch

    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    return (x, logits, *moe_weights(gen, e, d, inter))
