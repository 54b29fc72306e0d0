"""FlyDSL's launch decisions under the virtual device.

FlyDSL decides whether `flyc.compile(jit, *args)` also launches by asking whether an argument
is a live device buffer (`torch_tensor.device.type == "cuda"`). A virtual-GPU tensor lives in
host memory, so without this seam FlyDSL would take it for a compile-only placeholder and
launch one time fewer than on hardware; a test reading that output would read nothing.
"""

from __future__ import annotations

from ._mode import on_device


def _tensor_of(value):
    from flydsl.compiler.jit_function import TorchTensorJitArg

    if isinstance(value, TorchTensorJitArg):
        return value.torch_tensor
    return value


def _live(orig):
    def has_live_device_argument(value):
        return on_device(_tensor_of(value)) or orig(value)

    return has_live_device_argument


def _placeholder(orig):
    def is_compile_placeholder(value, **kw):
        return False if on_device(_tensor_of(value)) else orig(value, **kw)

    return is_compile_placeholder


def patches() -> list:
    """Wrap FlyDSL's two predicates (over the emulator's own wrappers, which make host memory
    device memory under a config: `runtime.seam` orders them)."""
    from flydsl.compiler import jit_function as jf

    return [(jf, "_has_live_device_argument", _live), (jf, "_is_compile_placeholder", _placeholder)]
