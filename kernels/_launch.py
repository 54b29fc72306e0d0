"""What every bundled kernel's launcher checks before handing tensors to FlyDSL.

Shared by `rmsnorm`, `gemm` and `mega_moe`: the compile target must be gfx1250 wave32, and
a launch must have somewhere to go (a HIP runtime, or a launch interceptor such as ldssan's
virtual gfx1250) — without one, FlyDSL's engine aborts the whole process. Every tensor a
launch addresses is checked against the extent the launch will touch *before* the launch,
so a bad size is an error with the outputs untouched, never a fault part-way through.

Target selection: FlyDSL picks gfx1250 only when `FLYDSL_GPU_ARCH` (and `ARCH`) say so on
a GPU-less host. Importing a bundled kernel sets nothing; `gfx1250_target` sets the
variables the caller left unset for the duration of one launch and removes them afterwards
(ldssan's virtual gfx1250 sets them itself while it is active).
"""

from __future__ import annotations

import contextlib
import functools
import os

import ml_dtypes
import numpy as np
import torch

TARGET_ARCH = "gfx1250"
WAVE_SIZE = 32  # gfx1250 is wave32 only
ARCH_VARS = ("FLYDSL_GPU_ARCH", "ARCH")


def check_target(kernel: str) -> None:
    from flydsl.compiler.backends import get_backend

    target = get_backend().target
    if target.arch.split("-", 1)[0] != TARGET_ARCH or target.warp_size != WAVE_SIZE:
        raise RuntimeError(
            f"{kernel} is written for {TARGET_ARCH} (wave32), but FlyDSL targets {target.arch} "
            f"(wave{target.warp_size}); set FLYDSL_GPU_ARCH={TARGET_ARCH} and ARCH={TARGET_ARCH} "
            f"(or leave them unset: the launcher then selects {TARGET_ARCH} for its launch)"
        )


@contextlib.contextmanager
def gfx1250_target(kernel: str):
    """Compile and launch inside this block for gfx1250: the target variables the caller left
    unset are set for the block only (then removed), and the resulting target is checked."""
    missing = [v for v in ARCH_VARS if v not in os.environ]
    os.environ.update({v: TARGET_ARCH for v in missing})
    try:
        check_target(kernel)
        yield
    finally:
        for v in missing:
            os.environ.pop(v, None)


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


def launch(kernel: str, jit_fn, args: tuple, stream=None) -> None:
    """Run a bundled kernel's FlyDSL launcher (bounds already checked) for gfx1250, refusing
    when nothing could take the launch."""
    with gfx1250_target(kernel):
        check_can_launch(kernel)
        if stream is None:
            jit_fn(*args)
        else:
            jit_fn(*args, stream=stream)


def check_tensor(kernel: str, name: str, t, dtype, shape, device=None, *, ref: str = "x",
                 optional: bool = False) -> None:
    """`t` is a contiguous torch tensor of exactly `shape` (and `dtype` / `device` when given:
    `device` is that of the argument `ref`); `optional` = the caller also accepts None."""
    if not isinstance(t, torch.Tensor):
        alt = " or None" if optional else ""
        raise TypeError(f"{kernel}: {name} must be a torch.Tensor{alt}, got {type(t).__name__}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{kernel}: {name} dtype must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{kernel}: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{kernel}: {name} must be contiguous, got strides {t.stride()}")
    if device is not None and t.device != device:
        raise ValueError(f"{kernel}: {name} is on {t.device} but {ref} is on {device}")


def check_rows(kernel: str, name: str, t, rows: int, row_shape: tuple[int, ...] = ()) -> None:
    """A raw launch addresses `rows` rows of `row_shape` in `t`: `t` must hold them (more rows
    are fine: the launch covers a prefix), contiguously, with exactly that row shape."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{kernel}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError(f"{kernel}: the row count for {name} must be an int >= 0, got {rows!r}")
    if t.dim() != 1 + len(row_shape) or tuple(t.shape[1:]) != tuple(row_shape) or t.shape[0] < rows:
        raise ValueError(f"{kernel}: the launch addresses {name} as {(rows, *row_shape)}, "
                         f"but it has shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{kernel}: {name} must be contiguous, got strides {t.stride()}")
