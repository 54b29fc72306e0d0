"""The C compiler, assembler and linker ldssan ships: zig (clang and LLD) from PyPI `ziglang`.

ldssan's C (`runtime/cc.py`: the native runs, the shadow's compiled checks) is compiled with it; `ldssan.isa` assembles
gfx1250 code and links code objects with it. Kept apart from both so either can find it
without importing the other (importing the emulator costs a quarter second).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from functools import cache

from ldssan.passes.ir.caches import register_cache


@register_cache
@cache
def zig_version() -> str:
    """ziglang's version ("" when it is not installed)."""
    try:
        return importlib.metadata.version("ziglang")
    except importlib.metadata.PackageNotFoundError:
        return ""


@register_cache
@cache
def zig_command() -> tuple[str, ...]:
    """The command that runs zig: the binary inside the ziglang package, started directly (a
    `python -m ziglang` child pays the interpreter's start-up, which a sitecustomize that
    imports much turns into seconds per compile or link), else `python -m ziglang`."""
    spec = importlib.util.find_spec("ziglang")
    if spec is not None and spec.origin:
        exe = os.path.join(os.path.dirname(spec.origin), "zig.exe" if os.name == "nt" else "zig")
        if os.access(exe, os.X_OK):
            return (exe,)
    return (sys.executable, "-m", "ziglang")
