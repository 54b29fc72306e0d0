"""What every bundled kernel's launcher checks before handing tensors to FlyDSL.

Shared by `rmsnorm`, `gemm` and `mega_moe`: the compile target must be gfx1250 wave32, and
a launch must have somewhere to go (a HIP runtime, or a launch interceptor such as ldssan's
virtual gfx1250) — without one, FlyDSL's engine aborts the whole process.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import torch

TARGET_ARCH = "gfx1250"
WAVE_SIZE = 32  # gfx1250 is wave32 only


def check_target(kernel: str) -> None:
    from flydsl.compiler.backends import get_backend

    target = get_backend().target
    if target.arch.split("-", 1)[0] != TARGET_ARCH or target.warp_size != WAVE_SIZE:
        raise RuntimeError(
            f"{kernel} is written for {TARGET_ARCH} (wave32), but FlyDSL targets {target.arch} "
            f"(wave{target.warp_size}); set FLYDSL_GPU_ARCH={TARGET_ARCH} and ARCH={TARGET_ARCH} "
            f"(or unset them before importing ldssan.kernels.{kernel})"
        )


@functools.lru_cache(maxsize=1)
def device_runtime_loadable() -> bool:
    import ctypes

    from flydsl.compiler import jit_executor

    try:
        for lib in jit_executor._resolve_runtime_libs():
            ctypes.CDLL(lib)
    except OSError:
        return False
    return True


def launch_is_intercepted() -> bool:
    """True if something (e.g. ldssan's virtual gfx1250) replaced FlyDSL's launch path."""
    from flydsl._mlir import execution_engine
    from flydsl.compiler import jit_executor, jit_function

    return (
        jit_executor.ExecutionEngine is not execution_engine.ExecutionEngine
        or getattr(jit_executor._resolve_runtime_libs, "__module__", "") != jit_executor.__name__
        or getattr(jit_executor.CompiledArtifact._get_func_exe, "__module__", "") != jit_executor.__name__
        or getattr(jit_executor.CompiledArtifact._ensure_engine, "__module__", "") != jit_executor.__name__
        or getattr(jit_function._build_call_state, "__module__", "") != jit_function.__name__
        or getattr(jit_function._call_state_from_spec, "__module__", "") != jit_function.__name__
    )


def check_can_launch(kernel: str) -> None:
    """Refuse to launch when FlyDSL would abort the whole process (no HIP, no interceptor)."""
    from flydsl.utils import env

    if env.compile.compile_only or launch_is_intercepted() or device_runtime_loadable():
        return
    raise RuntimeError(
        f"{kernel}: no HIP runtime (libamdhip64) and no launch interceptor is installed; "
        "FlyDSL would abort the process. Run under ldssan's virtual gfx1250 "
        "(e.g. FLYDSL_LDSSAN=1), on a gfx1250 GPU, or with COMPILE_ONLY=1."
    )


def as_numpy(x) -> np.ndarray:
    """A torch tensor (fp8 / bf16 included, as ml_dtypes arrays) or array-like as numpy."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.float8_e4m3fn:
            return x.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn)
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)
