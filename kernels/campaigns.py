"""Mutation-campaign cases for the bundled kernels (`ldssan mutate ldssan.kernels.<name>`).

The campaign protocol (`ldssan.mutate.target`) asks a kernel module for
`ldssan_cases() -> list[ldssan.mutate.Case]`. The bundled kernels keep theirs here, so the
kernel files stay untouched: `CAMPAIGNS` maps a module name to its case factory (the list
of bundled campaigns, e.g. for `benchmarks/campaign.py`), and each factory is registered
with `ldssan.mutate.target.register_cases` when `ldssan.kernels` is imported — which a
campaign worker does before it asks for cases. The dependency runs one way: kernels use the
campaign API; `ldssan.mutate` never imports `ldssan.kernels`.

Adding a kernel is one decorated function:

    @campaign("ldssan.kernels.mykernel")
    def mykernel_cases():
        ...                                     # fixed inputs, reference computed once
        return [Case("shape", run=lambda m: m.launch(...), check=lambda out: ...)]

`run(module)` must launch through the *given* module (it may be a mutant). Keep the
imports inside the factory: this module is imported by the campaign's parent process,
which never imports FlyDSL. A registered module that does not exist yet is skipped by the
campaign with a message.

Inputs follow docs/bug-patterns.md ("Inputs"): row scales that vary by 10^4 across rows, so a stale
or foreign partial sum changes the output visibly.
"""

from __future__ import annotations

from typing import Callable

from ldssan.mutate.target import Case, register_cases

CAMPAIGNS: dict[str, Callable[[], list[Case]]] = {}


def campaign(module: str):
    """Register the case factory of a bundled kernel module."""

    def register(fn: Callable[[], list[Case]]):
        if module in CAMPAIGNS:
            raise ValueError(f"campaign cases for {module!r} registered twice")
        CAMPAIGNS[module] = fn
        register_cases(module, fn)
        return fn

    return register


def _as_f32(x):
    """A torch tensor or numpy array (any float dtype, ml_dtypes included) as float32 numpy."""
    import numpy as np

    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy()
    return np.asarray(x).astype(np.float32)


def _close(tol_rel: float, tol_abs: float):
    import numpy as np

    def check(out, ref) -> bool:
        return bool(np.allclose(_as_f32(out), ref, rtol=tol_rel, atol=tol_abs, equal_nan=False))

    return check


@campaign("ldssan.kernels.rmsnorm")
def rmsnorm_cases() -> list[Case]:
    """Two shapes: the 128-bit fast path (4x4096 bf16) and the vector + partial-trip +
    scalar-tail path (3x1030 f32); row scales from 1e-2 to 1e2."""
    import ml_dtypes
    import numpy as np
    import torch

    from ldssan.kernels import rmsnorm as rms

    close = _close(2 ** -7, 1e-3)
    cases = []
    for name, m, n, dtype, np_dtype in (("4x4096-bf16", 4, 4096, torch.bfloat16, ml_dtypes.bfloat16),
                                        ("3x1030-f32", 3, 1030, torch.float32, np.float32)):
        gen = torch.Generator().manual_seed(1)
        x = (torch.randn(m, n, generator=gen) * torch.logspace(-2, 2, m).reshape(m, 1)).to(dtype)
        g = torch.randn(n, generator=gen).to(dtype)
        ref = rms.rmsnorm_reference(x.float().numpy().astype(np_dtype), g.float().numpy().astype(np_dtype),
                                    1e-6).astype(np.float32)
        cases.append(Case(name, run=lambda mod, x=x, g=g: mod.rmsnorm(x, g),
                          check=lambda out, ref=ref: close(out, ref)))
    return cases


@campaign("ldssan.kernels.gemm")
def gemm_cases() -> list[Case]:
    """FP8 A8W8 GEMM, a "tiny-row" shape small enough for the CPU (4 waves, 64x64x128
    tiles, nb=3, 65x128x512: a ragged M and K_TILES=4 so prologue, steady state and tail all
    run), with per-row scales from 1e-2 to 1e2 and per-column scales in [0.5, 1.5)."""
    import torch

    from ldssan.kernels import gemm as gm

    close = _close(2 ** -6, 1e-2)
    m, n, k = 65, 128, 512
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(m, k, generator=gen).clamp(-4, 4).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).clamp(-4, 4).to(torch.float8_e4m3fn)
    sa = torch.logspace(-2, 2, m).to(torch.float32)
    sb = (torch.rand(n, generator=gen) + 0.5).to(torch.float32)
    ref = _as_f32(gm.gemm_reference(a, b, scale_a=sa, scale_b=sb))
    return [Case(f"{m}x{n}x{k}-w4-nb3",
                 run=lambda mod: mod.gemm(a, b, scale_a=sa, scale_b=sb, waves=4, nb=3),
                 check=lambda out: close(out, ref))]


@campaign("ldssan.kernels.mega_moe")
def mega_moe_cases() -> list[Case]:
    """Top-2 MoE, 8 tokens over 4 experts (tokens on every wave of the route kernel, about
    one m-tile per expert), model_dim 256, inter_dim 256, bf16 weights, the default pipeline
    (16 x 128 x 64 tiles, nb = 3: both stages run prologue, steady state and drain; 4
    persistent workgroups); token rows scaled from 1e-1 to 1e1 so a row computed from stale
    or foreign data shows (larger scales overflow SiLU's exp2 without adding sensitivity)."""
    import torch

    from ldssan.kernels import mega_moe as mm
    from ldssan.kernels.mega_moe_reference import moe_weights

    close = _close(2 ** -6, 1e-3)
    t, e, d, inter = 8, 4, 256, 256
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(t, d, generator=gen) * torch.logspace(-1, 1, t).reshape(t, 1)).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    w1, w2 = moe_weights(gen, e, d, inter)
    ref = _as_f32(mm.mega_moe_reference(x, logits, w1, w2))
    return [Case(f"T{t}-E{e}-D{d}-bf16", run=lambda mod: mod.mega_moe(x, logits, w1, w2),
                 check=lambda out: close(out, ref))]


BUNDLED: tuple[str, ...] = tuple(CAMPAIGNS)
