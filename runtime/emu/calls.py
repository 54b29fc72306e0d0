"""Which FlyDSL calls launch under ldssan, and the count of launch requests.

FlyDSL 0.5.0's `flyc.compile(fn, *args)` launches on its first call only when an argument
is live device memory (`jit_function._has_live_device_argument`) and none is a compile
placeholder (`_is_compile_placeholder`); a torch tensor counts only if its device is
"cuda", a DLPack tensor only if its address space is the device's. While the virtual
gfx1250 is active, host memory *is* the device's memory, so `install` widens both
predicates: a compile then launches exactly when it would on hardware with device buffers.

`CALLS` counts what user code asked FlyDSL to launch (the pytest plugin compares it with
the launches that were checked: "called, not checked"), and a compile that still did not
launch although live memory was passed is said (`LaunchNotRun`), never silent.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Callable

from .memory import in_host_memory

_DL_HOST = 0  # FlyDSL's DLTensorAdaptor.address_space: 0 host, 1 device


class LaunchNotRun(UserWarning):
    """`flyc.compile(fn, *args)` under ldssan compiled but did not launch although live
    memory was passed: the kernel is not checked until the compiled function is called."""


class CallLog:
    """The FlyDSL launch requests seen while a config is active: `@flyc.jit` calls,
    `flyc.compile(fn, *args)` calls and calls of a compiled function (each one request,
    whatever it launched), the sanitized host calls, and the notes of compiles that did
    not launch. The pytest plugin takes it around each test."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.checked = 0  # sanitized host calls, whichever collector took their results
        self.notes: list[str] = []

    def count(self) -> None:
        with self._lock:
            self.calls += 1

    def checked_one(self) -> None:
        with self._lock:
            self.checked += 1

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)

    def take(self) -> tuple[int, int, list[str]]:
        """(requests, sanitized host calls, notes) since the last take; resets them."""
        with self._lock:
            out = (self.calls, self.checked, self.notes)
            self.calls, self.checked, self.notes = 0, 0, []
        return out


CALLS = CallLog()


def tracing() -> bool:
    """A launcher called inside another's trace: FlyDSL inlines it, nothing launches."""
    from flydsl._mlir import ir

    return ir.Context.current is not None


def patches(jf, active: Callable[[], bool]) -> list[tuple]:
    """Widen FlyDSL's two launch predicates (module globals it looks up per call; struct
    fields recurse through them, so every argument form is covered) and count calls of
    compiled functions, while `active()` (a config is active and not COMPILE_ONLY): the
    `(target, name, wrap)` patches the front end installs through `runtime.seam`."""

    def live(orig):
        def has_live_device_argument(value):
            return (active() and _host_memory(value)) or orig(value)

        return has_live_device_argument

    def placeholder(orig):
        def is_compile_placeholder(value, **kwargs):
            return False if active() and _host_memory(value) else orig(value, **kwargs)

        return is_compile_placeholder

    def counted(call):
        def __call__(self, *args):
            if active():
                CALLS.count()
            return call(self, *args)

        return __call__

    return [(jf, "_has_live_device_argument", live), (jf, "_is_compile_placeholder", placeholder),
            (jf.CompiledFunction, "__call__", counted)]


def _host_memory(value) -> bool:
    """Memory the virtual gfx1250 reads: a host torch tensor or one on ldssan's virtual GPU
    (plain or `from_torch_tensor`), or a host DLPack tensor with storage (`from_dlpack`).
    Not a meta tensor or a null pointer: FlyDSL's own placeholders stay placeholders."""
    import torch
    from flydsl.compiler.jit_argument import DLTensorJitArg, TorchTensorJitArg

    if isinstance(value, TorchTensorJitArg):
        value = value.torch_tensor
    if isinstance(value, torch.Tensor):
        return in_host_memory(value)
    if isinstance(value, DLTensorJitArg):
        return bool(value.dladaptor.data_ptr) and value.dladaptor.address_space == _DL_HOST
    return False


def compiled(orig, jf, args, kwargs):
    """`flyc.compile(fn, *args)` under an active config: FlyDSL decides whether it launches
    (with the predicates above); a compile that did not launch although live memory was
    passed is said: a `LaunchNotRun` warning at the user's line and a note in `CALLS`."""
    result = orig(jf, args, kwargs, execute=True, return_compiled=True)
    if result is not None and getattr(result, "_call_state", True) is None:
        text = _not_launched_text(jf, args, kwargs)
        if text is not None:
            path, line = _user_line()
            text += f" (at {path}:{line})"
            CALLS.note(text)
            warnings.warn_explicit(LaunchNotRun(text), LaunchNotRun, path, line)
    return result


def _not_launched_text(jf, args, kwargs) -> str | None:
    """Why a compile with live memory did not launch (its placeholder arguments), or None
    when no argument was live memory (a compile-only request, as on hardware)."""
    from flydsl.compiler import jit_function

    bound = jf._sig.bind(*args, **kwargs)
    bound.apply_defaults()
    values = bound.arguments
    if not any(jit_function._has_live_device_argument(v) for v in values.values()):
        return None
    held = [f"'{n}' ({_describe(v)})" for n, v in values.items()
            if jit_function._is_compile_placeholder(v, allow_null_pointers=True)]
    name = getattr(jf.func, "__qualname__", "?")
    return (f"ldssan: flyc.compile({name}, ...) compiled but did not launch: FlyDSL takes argument(s) "
            f"{', '.join(held) or '(none named)'} for compile placeholders, so no kernel ran or was "
            "checked here; a call of the compiled function with device memory launches it")


def _describe(value) -> str:
    t = getattr(value, "torch_tensor", value)
    device = getattr(t, "device", None)
    if device is not None:
        return f"a tensor on device '{device}'"
    pointer = getattr(value, "pointer", None)
    if pointer is not None and getattr(pointer, "value", 0) is None:
        return "a null pointer"
    return type(value).__name__


def _user_line() -> tuple[str, int]:
    """(file, line) of the innermost caller outside FlyDSL and ldssan."""
    import flydsl

    top = sys.modules.get("ldssan")
    skip = (os.path.dirname(flydsl.__file__), os.path.dirname(os.path.dirname(__file__)),
            *((os.path.dirname(top.__file__),) if top is not None and top.__file__ else ()))
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    return ("<unknown>", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)
