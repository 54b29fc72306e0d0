"""Zero-argument launchers of the bundled kernels (small shapes), for `ldssan build --device
tests/hardware/bundled.py::FUNC` and the hardware suite. Inputs are made on `device` (the
CPU for compile-only builds and the virtual gfx1250, "cuda" on a HIP gfx1250)."""

from __future__ import annotations

import torch

from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels import rmsnorm as R
from ldssan.kernels.mega_moe_reference import moe_inputs


def _to(device, tensors):
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in tensors]


def launch_rmsnorm(module=R, device="cpu"):
    gen = torch.Generator().manual_seed(11)
    x, g = torch.randn(2, 512, generator=gen), torch.randn(512, generator=gen)
    return module.rmsnorm(*_to(device, [x, g]))


def launch_gemm(module=G, device="cpu"):
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(64, 256, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(64, 256, generator=gen).to(torch.float8_e4m3fn)
    return module.gemm(*_to(device, [a, b]), waves=4, nb=3)


def launch_mega_moe(module=M, device="cpu"):
    return module.mega_moe(*_to(device, moe_inputs(torch.Generator().manual_seed(5))))


def launch_nothing():
    """Launches no kernel (for the CLI's error path)."""


def launch_rmsnorm_1x1024(module=R, device="cpu"):
    """Another RMSNorm specialization (a build no other launcher here shares)."""
    gen = torch.Generator().manual_seed(12)
    x, g = torch.randn(1, 1024, generator=gen), torch.randn(1024, generator=gen)
    return module.rmsnorm(*_to(device, [x, g]))
