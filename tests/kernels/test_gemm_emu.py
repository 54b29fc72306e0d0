"""The bundled GEMM on the virtual gfx1250, sanitized: every listed shape matches the numpy
reference with no violations, for FP8 and BF16, 4 and 8 waves, nb 2..4, under every scheduler
policy; a sentinel past C must survive."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ldssan import hook
from ldssan.kernels import gemm as G
from ldssan.runtime.emu import ALL_POLICIES

SHAPES = [(64, 128, 512), (256, 256, 256), (128, 256, 640), (1, 256, 512), (17, 256, 512),
          (65, 256, 512), (129, 256, 512), (64, 64, 2880), (33, 70, 512), (3, 129, 200)]
# (waves, nb, policy) cycled over the shapes so every combination appears
CONFIGS = list(itertools.product((4, 8), (2, 3, 4)))
POLICIES = [str(p) for p in ALL_POLICIES]
SENTINEL = -777.0


def _inputs(kind: str, m: int, n: int, k: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    dt = torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16
    a = torch.randn(m, k, generator=gen).to(dt)
    b = torch.randn(n, k, generator=gen).to(dt)
    sa = torch.rand(m, generator=gen) + 0.5
    sb = torch.rand(n, generator=gen) + 0.5
    return a, b, sa, sb


def run_checked(kind, shape, waves, nb, policy, out_dtype=torch.bfloat16):
    m, n, k = shape
    a, b, sa, sb = _inputs(kind, m, n, k)
    buf = torch.full((m * n + 64,), SENTINEL, dtype=out_dtype)
    out = buf[: m * n].view(m, n)
    with hook.sanitize(policy) as col:
        c = G.gemm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype, waves=waves, nb=nb, out=out)
    assert c.data_ptr() == buf.data_ptr()
    ref = G.gemm_reference(a, b, sa, sb, out_dtype).astype(np.float32)
    np.testing.assert_allclose(c.float().numpy(), ref, rtol=1e-6, atol=1e-6)
    assert (buf[m * n:] == SENTINEL).all(), "the kernel wrote past C"
    assert len(col.results) == 1
    report = col.results[0].report
    assert report.clean and not report.dropped, report.violations


@pytest.mark.parametrize("kind", ["fp8", "bf16"])
@pytest.mark.parametrize("i, shape", list(enumerate(SHAPES)), ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_gemm_shapes_match_reference_with_no_violations(kind, i, shape):
    waves, nb = CONFIGS[(i + (kind == "bf16") * 3) % len(CONFIGS)]
    run_checked(kind, shape, waves, nb, POLICIES[i % len(POLICIES)])


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind, waves, nb", [("fp8", 8, 3), ("bf16", 4, 4)])
def test_gemm_clean_under_every_policy(kind, waves, nb, policy):
    run_checked(kind, (65, 128, 640), waves, nb, policy)


def test_bf16_gemm_with_f32_output():
    run_checked("bf16", (17, 128, 320), 8, 2, "random(9)", out_dtype=torch.float32)


def test_tile_k_below_the_wmma_depth_is_rejected():
    a, b, _sa, _sb = _inputs("fp8", 16, 16, 256)
    with pytest.raises(ValueError, match="WMMA depth"):
        G.gemm(a, b, tile_k=64)
