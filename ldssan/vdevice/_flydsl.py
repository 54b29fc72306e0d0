"""FlyDSL's launch decisions under the virtual device.

FlyDSL decides whether `flyc.compile(jit, *args)` also launches by asking whether an argument
is a live device buffer (`torch_tensor.device.type == "cuda"`). A virtual-GPU tensor lives in
host memory, so without this seam FlyDSL would take it for a compile-only placeholder and
launch one time fewer than on hardware; a test reading that output would read nothing.
"""

from __future__ import annotations

from ._mode import on_device

_NAMES = ("_has_live_device_argument", "_is_compile_placeholder")


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


def install() -> dict:
    """Wrap FlyDSL's two predicates; returns what `uninstall` puts back."""
    from flydsl.compiler import jit_function as jf

    from ldssan.runtime.emu import frontend

    # the emulator's own wrappers (host memory is device memory under a config) go in first:
    # installed after ours, `uninstall` would drop them with ours
    frontend.install()
    saved = {name: getattr(jf, name) for name in _NAMES}
    jf._has_live_device_argument = _live(saved["_has_live_device_argument"])
    jf._is_compile_placeholder = _placeholder(saved["_is_compile_placeholder"])
    return saved


def uninstall(saved: dict) -> None:
    from flydsl.compiler import jit_function as jf

    for name, value in saved.items():
        setattr(jf, name, value)
