"""The bundled RMSNorm on the virtual gfx1250, against the numpy reference, under every
scheduler policy; the output buffer's tail holds a sentinel that must survive."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from ldssan.kernels.rmsnorm import rmsnorm, rmsnorm_reference
from ldssan.runtime.emu import ALL_POLICIES, emulate

SENTINEL = -12345.0
SHAPES = [(1, 510), (3, 4096), (2, 8190), (4, 8192), (2, 32768)]


def _inputs(m: int, n: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    # rows scaled 1e-2 .. 1e2 so a wrong row total is visible in the output
    scale = torch.logspace(-2, 2, m).reshape(m, 1)
    x = (torch.randn(m, n, generator=gen) * scale).to(dtype)
    g = torch.randn(n, generator=gen).to(dtype)
    return x, g


def _reference(x: torch.Tensor, g: torch.Tensor) -> np.ndarray:
    if x.dtype == torch.bfloat16:
        xn = x.float().numpy().astype(ml_dtypes.bfloat16)
        gn = g.float().numpy().astype(ml_dtypes.bfloat16)
    else:
        xn, gn = x.numpy(), g.numpy()
    return rmsnorm_reference(xn, gn, 1e-6).astype(np.float32)


def _run(m, n, dtype, policy, batch=1):
    x, g = _inputs(m, n, dtype)
    buf = torch.full((m + 1, n), SENTINEL, dtype=dtype)
    with emulate(policy, batch=batch):
        y = rmsnorm(x, g, eps=1e-6, out=buf[:m])
    assert y.data_ptr() == buf.data_ptr()
    return buf, _reference(x, g)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("m, n", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize("policy", [str(p) for p in ALL_POLICIES])
def test_rmsnorm_matches_reference(m, n, dtype, policy):
    buf, ref = _run(m, n, dtype, policy)
    got = buf[:m].float().numpy()
    # the reference rounds like the kernel; allow one bf16 ulp for rsqrt's last bit
    tol = 2 ** -7 if dtype == torch.bfloat16 else 1e-6
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 1e-3)
    assert (buf[m] == SENTINEL).all(), "the kernel wrote past the output rows"


@pytest.mark.parametrize("n", [1, 7, 2047, 65536])
def test_rmsnorm_edge_widths(n):
    buf, ref = _run(2, n, torch.float32, "random(11)")
    np.testing.assert_allclose(buf[:2].numpy(), ref, rtol=1e-6)
    assert (buf[2] == SENTINEL).all()


def test_batched_workgroups_give_the_same_bits():
    one, _ = _run(8, 4096, torch.bfloat16, "round-robin", batch=1)
    many, _ = _run(8, 4096, torch.bfloat16, "round-robin", batch=8)
    assert torch.equal(one, many)
