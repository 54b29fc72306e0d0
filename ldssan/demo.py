"""`ldssan demo`, the embedded default: the bundled RMSNorm on the virtual gfx1250, checked
against its numpy reference; then the sanitizer on the clean kernel and on a planted
one-line bug (a barrier replaced by a raw split barrier without fences, the aiter #6344
class), with the report a kernel author would see."""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import torch
from rich.console import Console
from rich.table import Table

SHAPES = [(4, 510), (4, 4096), (4, 8190), (2, 32768)]


def _ref(x, g):
    from ldssan.kernels.rmsnorm import rmsnorm_reference

    if x.dtype == torch.bfloat16:
        return rmsnorm_reference(x.float().numpy().astype(ml_dtypes.bfloat16),
                                 g.float().numpy().astype(ml_dtypes.bfloat16), 1e-6).astype(np.float32)
    return rmsnorm_reference(x.numpy(), g.numpy(), 1e-6)


def check_rmsnorm(console: Console, policy: str) -> bool:
    from ldssan.kernels.rmsnorm import rmsnorm
    from ldssan.runtime.emu import emulate

    table = Table(title=f"RMSNorm on the virtual gfx1250 (policy {policy})")
    for col in ("M x N", "dtype", "max |err|", "vs reference", "launch s"):
        table.add_column(col)
    ok = True
    gen = torch.Generator().manual_seed(0)
    for m, n in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            x = (torch.randn(m, n, generator=gen) * 3).to(dtype)
            g = torch.randn(n, generator=gen).to(dtype)
            with emulate(policy) as cfg:
                y = rmsnorm(x, g, eps=1e-6)
            err = float(np.abs(y.float().numpy() - _ref(x, g)).max())
            tol = 2 ** -7 * float(np.abs(_ref(x, g)).max()) if dtype == torch.bfloat16 else 1e-5
            good = err <= tol
            ok &= good
            table.add_row(f"{m} x {n}", str(dtype).split(".")[-1], f"{err:.3g}",
                          "[green]match[/]" if good else "[red]MISMATCH[/]", f"{cfg.launches[-1].seconds:.3f}")
    console.print(table)
    return ok


def sanitize_rmsnorm(console: Console, policy: str) -> bool:
    from ldssan import hook
    from ldssan.console import counted
    from ldssan.kernels import rmsnorm as rms
    from ldssan.report import render
    from ldssan.variants import Edit, find_calls, load_variant

    x = torch.randn(2, 4096, dtype=torch.bfloat16)
    g = torch.randn(4096, dtype=torch.bfloat16)
    with hook.sanitize(policy) as col:
        rms.rmsnorm(x, g)
    clean = not col.violations
    console.print(f"[bold]ldssan on the clean RMSNorm:[/] {'no violations' if clean else 'VIOLATIONS'} "
                  f"({counted(len(col.results), 'launch')}, {counted(len(col.results[0].sites), 'site')})")
    first_barrier = find_calls(rms, "fx.gpu.barrier", within="_block_sum")[0]
    bug = load_variant(rms, [Edit(first_barrier, "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)")],
                       tag="demo")
    console.print(f"\n[bold]Planted bug:[/] kernels/rmsnorm.py:{first_barrier} `fx.gpu.barrier()` -> "
                  "`fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)` (no fences)")
    t0 = time.perf_counter()
    with hook.sanitize(policy) as col:
        y = bug.rmsnorm(x, g)
    err = float(np.abs(y.float().numpy() - _ref(x, g)).max())
    console.print(f"output check of this launch: max |err| = {err:.3g} "
                  f"({'passes' if err < 0.1 else 'fails'}); sanitizer ({time.perf_counter() - t0:.2f} s):")
    for r in col.results:
        render(r.report, console)
    return clean and bool(col.violations)


def gemm_demo(console: Console, policy: str, sanitize: bool) -> bool:
    """The TDM-fed GEMM: a clean FP8 launch vs its reference (sanitized), then a planted
    one-token bug in its tensorcnt arithmetic."""
    from ldssan import hook
    from ldssan.kernels import gemm as G
    from ldssan.report import render
    from ldssan.runtime.emu import emulate
    from ldssan.variants import Edit, find_calls, load_variant

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(128, 640, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(128, 640, generator=gen).to(torch.float8_e4m3fn)
    ref = G.gemm_reference(a, b, None, None, torch.bfloat16).astype(np.float32)
    if not sanitize:
        with emulate(policy):
            c = G.gemm(a, b, waves=4, nb=3)
        err = float(np.abs(c.float().numpy() - ref).max())
        console.print(f"[bold]GEMM[/] FP8 128x128x640 (TDM ring nb=3, 4 waves): max |err| = {err:.3g}")
        return err == 0.0
    with hook.sanitize(policy) as col:
        c = G.gemm(a, b, waves=4, nb=3)
    err = float(np.abs(c.float().numpy() - ref).max())
    clean = not col.violations
    console.print(f"\n[bold]GEMM[/] FP8 128x128x640 (TDM ring nb=3, 4 waves, WMMA 16x16x128): max |err| = {err:.3g}, "
                  f"ldssan: {'no violations' if clean else 'VIOLATIONS'}")
    line = find_calls(G, "tdm_ops.tensor_wait", within="gemm_kernel")[0]  # the steady-state wait
    bug = load_variant(G, [Edit(line, "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2) + 1)")], tag="demo")
    console.print(f"[bold]Planted bug:[/] kernels/gemm.py:{line} tensor wait count raised by one")
    with hook.sanitize(policy) as col2:
        c = bug.gemm(a, b, waves=4, nb=3)
    err = float(np.nanmax(np.abs(c.float().numpy() - ref)))
    console.print(f"output check of this launch: max |err| = {err:.3g}; sanitizer:")
    for r in col2.results:
        render(r.report, console, max_violations=1)
    return err == 0.0 or clean and bool(col2.violations)


def run_demo(policy: str = "round-robin", sanitize: bool = True) -> int:
    console = Console()
    ok = check_rmsnorm(console, policy)
    if sanitize:
        ok &= sanitize_rmsnorm(console, policy)
    ok &= gemm_demo(console, policy, sanitize)
    console.print("[green]demo: all checks passed[/]" if ok else "[red]demo: a check failed[/]")
    return 0 if ok else 1
