"""The bundled RMSNorm, tested the way a GPU kernel suite tests it: a skip guard on
torch.cuda.is_available(), inputs allocated on the device, a launch on a stream, and
assert_close against a CPU reference. Without a GPU it skips; under FLYDSL_LDSSAN=1 it runs
on the virtual gfx1250 and every launch is sanitized (tests/gpu_style/test_suite_runs.py)."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx
from ldssan.kernels.rmsnorm import launch_rmsnorm, rmsnorm

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA/ROCm not available")

EPS = 1e-6


def reference(x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """fp32 RMSNorm on the host, rounded to the input dtype."""
    xf, gf = x.cpu().float(), gamma.cpu().float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * gf).to(x.dtype)


def tolerance(dtype):
    return dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)


@requires_gpu
@pytest.mark.parametrize("m,n,dtype", [(2, 512, torch.float32), (3, 1000, torch.bfloat16)])
def test_rmsnorm_matches_host_reference(m, n, dtype):
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda").to(dtype)
    gamma = torch.randn(n, dtype=dtype).cuda()
    out = torch.empty_like(x)
    stream = torch.cuda.current_stream()

    launch_rmsnorm(x, gamma, out, m, EPS, n, stream=fx.Stream(stream))
    torch.cuda.synchronize()

    torch.testing.assert_close(out.cpu(), reference(x, gamma), **tolerance(dtype))


@requires_gpu
def test_rmsnorm_on_a_side_stream_is_repeatable():
    x = torch.randn(2, 256, device=torch.device("cuda", 0))
    gamma = torch.ones(256, device="cuda:0")
    side = torch.cuda.Stream()
    done = torch.cuda.Event()
    with torch.cuda.stream(side):
        first = rmsnorm(x, gamma).cpu()  # a host snapshot, not an alias of the device output
        done.record(side)
    done.synchronize()

    again = rmsnorm(x, gamma)
    torch.cuda.synchronize()

    torch.testing.assert_close(again.cpu(), first)  # a GPU tensor against a host one needs .cpu() on hardware too
    torch.testing.assert_close(first, reference(x, gamma), **tolerance(torch.float32))
