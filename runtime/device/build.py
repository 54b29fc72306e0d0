"""Compile-only gfx1250 builds with the device runtime linked in (the code-object check).

Inside `building()`, a FlyDSL build run in COMPILE_ONLY mode gets FlyDSL's whole pipeline
with the ldssan sentinel after `convert-fly-to-rocdl` + `canonicalize`: the instrumentation
pass and the device linker run there, and FlyDSL lowers, assembles and links the result as
it does any kernel (the caller supplies the linker environment and collects the code
object, e.g. with `ldssan.isa.capture.capture_builds`). These builds bake no record
buffer address: the hooks read it from the u64 module global `@__ldssan_ring`, which a
host binds after loading the code object (`hardware.bind_module_global`); until then it
is 0 and the code object must not run.

Cache keys: the sentinel carries the run's `DeviceLink` (the digest of this package, the ring
address; `frontend.sentinel_fragment`), so a
device build never shares a FlyDSL cache entry with a plain build (no sentinel), a
sanitized host run (no `device=`), or a device build bound to another buffer.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field

from .emulated import _LINK_FAILURES, _device_pass, source_digest
from .layout import RING_UNBOUND

UNBOUND = RING_UNBOUND  # a compile-only build: the ring address comes from @__ldssan_ring


@dataclass(frozen=True)
class Linked:
    """What the device pass produced for one build: the site table (to decode its records)
    and the shadow layout of each gpu.module (`layout.ShadowLayout.to_dict`)."""

    sites_json: str
    layouts: dict


@dataclass
class Session:
    """One `building()` / `on_device()` block: the link of every build it compiled, in order."""

    config: object
    linked: list[Linked] = field(default_factory=list)
    # refuse a shadow in global scratch: its slots are bound per launch by a host launcher,
    # which FlyDSL's own launch path (hardware.on_device) does not have yet
    lds_only: bool = False


_ACTIVE: list[Session] = []  # innermost last


def _recording_pass(op, pass_=None) -> None:
    _device_pass(op, pass_, calls=False)  # for LLVM: every hook inlined
    if _ACTIVE:
        attrs = op.attributes
        linked = Linked(attrs["ldssan.sites"].value, json.loads(attrs["ldssan.device"].value))
        _ACTIVE[-1].linked.append(linked)
        scratch = sorted(name for name, lay in linked.layouts.items() if lay.get("where") != "lds")
        if _ACTIVE[-1].lds_only and scratch:
            from .link import DeviceLinkError

            err = DeviceLinkError(f"ldssan device runtime: {', '.join(scratch)}: the shadow is in global scratch, "
                                  "whose per-launch slots a gfx1250 launch cannot bind yet (hardware.py)")
            _LINK_FAILURES.append(err)
            raise err


@contextmanager
def device_session(ring_addr: int, *, hardware: bool = False, lds_only: bool = False):
    """FlyDSL builds inside the block are instrumented and linked with the record buffer at
    `ring_addr` (`hardware`: and go through FlyDSL's whole pipeline, to run on a gfx1250).
    A link refusal reaches the caller as `DeviceLinkError` (FlyDSL wraps a pass failure in
    its own error type)."""
    from ..emu import frontend
    from ..emu.runconfig import DeviceLink, RunConfig
    from .link import DeviceLinkError

    run = RunConfig(sanitize=True, device=DeviceLink(source_digest(), ring_addr, hardware=hardware))
    session = Session(frontend.EmuConfig(run, sentinel_pass=_recording_pass), lds_only=lds_only)
    _LINK_FAILURES.clear()
    _ACTIVE.append(session)
    try:
        with frontend.active(session.config):
            yield session
    except Exception as exc:
        if _LINK_FAILURES and not isinstance(exc, DeviceLinkError):
            raise _LINK_FAILURES.pop() from exc
        raise
    finally:
        _ACTIVE.remove(session)


@contextmanager
def building():
    """Compile-only device builds (address 0: not runnable). Yields the `Session`."""
    with device_session(UNBOUND) as session:
        yield session
