"""torch's GPU device, provided by the virtual gfx1250: GPU test suites run on a host with no GPU.

    from ldssan import vdevice
    vdevice.install()          # what FLYDSL_LDSSAN=1 / --ldssan / hook.enable() do on a GPU-less host
    torch.cuda.is_available()  # True; get_device_properties(0).gcnArchName == "gfx1250"
    x = torch.randn(64, 128, device="cuda")   # host memory; FlyDSL launches run on the emulator
    vdevice.uninstall()        # torch.cuda and the torch function mode stack as they were

Built on torch's own extension points: a `TorchFunctionMode` (`_mode.py`) maps the GPU device
onto host memory for factory functions (`device="cuda"`, `"cuda:0"`, `torch.device("cuda")`,
`device=0`, `torch.set_default_device("cuda")`), `Tensor.cuda()`, `.to("cuda")`, `.cpu()`,
and results computed from GPU tensors (`empty_like`, views, arithmetic), and answers
`x.device` (`cuda:0`), `x.is_cuda`, `x.get_device()` for them; the `torch.cuda` query,
stream, event and seed functions are replaced while installed (`_cuda.py`); a custom autograd
Function's backward runs with the mode (`_autograd.py`); the profiler sees the emulated kernels
(`_timing.py`). `uninstall()` restores all of it.

A GPU tensor is a GPU tensor to the test's code (`device == torch.device("cuda", 0)`, dicts
keyed by device, `torch.empty(..., device=x.device)`, `.to(x.device)`, `*_like`, modules moved
with `.cuda()`), and a host tensor whose `data_ptr()` the virtual gfx1250 reads. `.cpu()` is a
plain CPU tensor. As on hardware, mixing a host tensor of 1+ dims into a GPU op raises torch's
"Expected all tensors to be on the same device", and `torch.testing.assert_close(gpu, cpu)`
fails on the device attribute (compare `gpu.cpu()`).

Supported: one device (`cuda` / `cuda:0`); `is_available`, `device_count`, `current_device`,
`set_device(0)`, `get_device_name/properties/capability` (gcnArchName `gfx1250`, warp 32,
320 KiB LDS, a small virtual CU count), `synchronize`, `current_stream`, `default_stream`,
`Stream`, `ExternalStream`, `stream(...)`, `Event` (complete when recorded; `elapsed_time`
is the host wall time between the records), `torch.profiler` with CUDA activity (each
emulated kernel is a CUDA event whose duration is the emulator's wall time: `_timing`),
`manual_seed[_all]` (the device shares the host generator), rng state, and allocator
statistics (reported as 0 / empty: not tracked).

Not supported, and what happens:
- what a GPU tensor does in host memory stays possible: `.numpy()`, DLPack exports (they
  describe host memory), reading it from another thread (which sees a CPU tensor).
- CUDA/HIP graphs (`torch.cuda.graph`, `CUDAGraph`, `make_graphed_callables`),
  `torch.cuda._sleep`, IPC events, and any device index other than 0: `VirtualDeviceError`
  naming the call and its source line.
- HIP/CUDA C++ extensions, Triton, `torch.version.hip` (stays None), autocast on "cuda",
  and work in threads other than the one that installed the device: not provided.
"""

from __future__ import annotations

import threading

import torch

from ldssan.runtime import seam

from . import _autograd, _flydsl, _timing
from ._errors import VirtualDeviceError
from ._mode import DeviceMapMode, on_device

__all__ = ["VirtualDeviceError", "install", "uninstall", "active", "real_gpu_present", "wanted", "on_device"]

_lock = threading.Lock()
_mode: DeviceMapMode | None = None


def real_gpu_present() -> bool:
    """True if torch sees a GPU of its own (then the virtual one is not installed by default)."""
    return bool(seam.original(torch.cuda, "is_available")())


def wanted(choice: str) -> bool:
    """Whether FLYDSL_LDSSAN_DEVICE=`choice` installs the virtual device on this host:
    'virtual' always, 'off' never, 'auto' when torch has no GPU."""
    if choice not in ("auto", "virtual", "off"):
        raise ValueError(f"ldssan: device {choice!r}: expected auto, virtual or off")
    return choice == "virtual" or (choice == "auto" and not real_gpu_present())


def active() -> bool:
    """True while the virtual device stands in for torch's GPU."""
    return _mode is not None


def _remove(mode: DeviceMapMode) -> None:
    stack = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    for m in reversed(stack):
        if m is not mode:
            torch._C._push_on_torch_function_stack(m)


def _patches(mode: DeviceMapMode) -> list:
    """Every torch and FlyDSL attribute the virtual device replaces (`runtime.seam`, group
    `vdevice`)."""
    from ._cuda import API

    return [*((torch.cuda, name, _constant(value)) for name, value in API.items()),
            *_flydsl.patches(),  # flyc.compile launches with virtual-GPU tensors, as on hardware
            *_timing.patches(),  # torch.profiler's CUDA activity sees the emulated kernels
            *_autograd.patches(mode)]  # custom backward passes see GPU tensors too


def _constant(value):
    return lambda _torchs: value


def install() -> None:
    """Provide torch's GPU device from the virtual gfx1250 (idempotent)."""
    global _mode

    with _lock:
        if _mode is not None:
            return
        mode = DeviceMapMode()
        seam.install("vdevice", _patches(mode))
        _timing.start()
        # on top of any mode already pushed; torch.set_default_device's DeviceContext stays at
        # the bottom, where torch expects it (its device is looked up by the mode)
        torch._C._push_on_torch_function_stack(mode)
        _mode = mode


def uninstall() -> None:
    """Restore torch exactly: every attribute the seam replaced, and the mode stack."""
    global _mode
    with _lock:
        if _mode is None:
            return
        seam.uninstall("vdevice")
        _timing.reset()
        _remove(_mode)
        _mode = None
