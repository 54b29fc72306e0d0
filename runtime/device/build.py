"""Compile-only gfx1250 builds with the device runtime linked in (the code-object check).

Inside `building()`, a FlyDSL build run in COMPILE_ONLY mode gets FlyDSL's whole pipeline
with the ldssan sentinel after `convert-fly-to-rocdl` + `canonicalize`: the instrumentation
pass and the device linker run there, and FlyDSL lowers, assembles and links the result as
it does any kernel (the caller supplies the linker environment and collects the code
object, e.g. with `ldssan.isa.capture.capture_builds`). Not for running: the record
buffer's address is bound only by `emulated()` (on hardware it is to be a module global set
at load time, not done yet), so these builds write records through address 0.
"""

from __future__ import annotations

from contextlib import contextmanager

from .emulated import _device_pass, source_digest

UNBOUND = 0  # the record buffer address of a compile-only build


@contextmanager
def building():
    from ..emu import frontend

    frontend.register_pass("dev", _device_pass)
    cfg = frontend.EmuConfig(sanitize=True, pass_options=f"device={source_digest()},ctx={UNBOUND:x}")
    with frontend.active(cfg):
        yield cfg
