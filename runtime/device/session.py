"""`FLYDSL_LDSSAN=1` through the device runtime: each host call's records, as the kernel wrote
them into the record buffer, handed over as the same `SessionOutcome` the Python engine's
session (`runtime/session.py`) hands over, so the decoder, the collector, the report and the
pytest plugin are the ones the Python engine uses.

`emulated_config` is `FLYDSL_LDSSAN_DEVICE=emulated`: the linked IR runs on the virtual
gfx1250 (the records path of `emulated()`, for every launch of the process instead of one
block). `hardware.HardwareLaunches` is `FLYDSL_LDSSAN_DEVICE=hardware`; both end in
`outcome()` here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..emu.frontend import EmuConfig
from ..records import Record, Ring
from ..session import SessionOutcome, lds_buffers
from . import layout as L
from .emitter import SHADOW
from .emulated import (_LINK_FAILURES, DEVICE_TIME_LIMIT, _device_pass, _Launches, device_policy, record_buffer,
                       source_digest)
from .settle import settle


def device_records(ring: Ring, grid: tuple | None) -> list[Record]:
    """A read-back buffer's records as the decoder takes them: linear workgroup ids (records
    carry the packed block id), settled as the host engine would have named them (settle.py)."""
    return settle([replace(r, workgroup=L.linear_workgroup(r.workgroup, grid)) for r in ring.records()])


def host_ring(records: list[Record], dropped: int, capacity: int) -> Ring:
    """A host `Ring` of the device's records that keeps the device's dropped count (the
    decoder reports it; a report with drops is not clean)."""
    ring = Ring(max(1, len(records)) if dropped else capacity)
    for r in records:
        ring.push(r)
    ring.written += dropped  # dropped = written - capacity, and capacity = the records kept
    return ring


def kernel_buffers(view) -> tuple:
    """The kernel's own LDS allocations (the linked module's, less the shadow)."""
    return tuple(b for b in lds_buffers(view) if b.name != SHADOW)


def outcome(ring: Ring, grid: tuple | None, *, entry: str, kernels: tuple, launch: int, sites_json: str,
            coverage_json: str, buffers: tuple) -> SessionOutcome:
    """One host call's read-back buffer as the decoder's input."""
    records = device_records(ring, grid)
    return SessionOutcome(entry=entry, kernels=kernels, launch=launch,
                          ring=host_ring(records, ring.dropped, ring.capacity), sites_json=sites_json,
                          coverage_json=coverage_json, buffers=buffers)


class EmulatedCall:
    """The emulator's sanitizer (`emu.interfaces.Sanitizer`) for one host call under FLYDSL_LDSSAN_DEVICE=emulated: no
    engine (the linked kernel checks itself); the host launcher's part (global-scratch
    slots) is `emulated._Launches`'; when the call returns, the buffer is read back."""

    def __init__(self, sites_json: str, entry: str, view, *, capacity: int,
                 on_finish: Callable[[SessionOutcome], None]):
        self.buf = record_buffer()
        self.buf.reset(min(capacity, self.buf.capacity))
        self.launch = self.buf.next_launch()
        self.sites_json, self.entry, self.view, self.on_finish = sites_json, entry, view, on_finish
        self.binder = _Launches(self.buf, view)
        self.grids: set[tuple] = set()
        self.kernels: list[str] = []

    def begin_batch(self, prog, waves, chunk, grid, lds_bytes):
        self.grids.add(tuple(int(g) for g in grid))
        if prog.name not in self.kernels:
            self.kernels.append(prog.name)
        return self.binder.begin_batch(prog, waves, chunk, grid, lds_bytes)

    def end_batch(self) -> int:
        return 0  # no engine here, so no batch of it splits

    def finish(self) -> None:
        # kernels of one call with different grids: a 2-D record is then refused (linear_workgroup)
        grid = next(iter(self.grids)) if len(self.grids) == 1 else None
        self.on_finish(outcome(self.buf.ring(), grid, entry=self.entry, kernels=tuple(self.kernels),
                               launch=self.launch, sites_json=self.sites_json,
                               coverage_json=self.view.attrs.get("ldssan.coverage", "{}"),
                               buffers=kernel_buffers(self.view)))


def emulated_config(policy, *, ring: int, resident: int = 1,
                    on_finish: Callable[[SessionOutcome], None]) -> EmuConfig:
    """The EmuConfig of FLYDSL_LDSSAN_DEVICE=emulated (`emulated.device_policy`)."""
    from ..emu import frontend

    policy = device_policy(policy)
    frontend.register_pass("dev", _device_pass)
    _LINK_FAILURES.clear()
    buf = record_buffer()
    cfg = EmuConfig(policy=policy, resident=resident, sanitize=True,
                    pass_options=f"device={source_digest()},ctx={buf.addr:x}", time_limit=DEVICE_TIME_LIMIT)
    cfg.sanitizer_factory = lambda sites_json, entry, view: EmulatedCall(sites_json, entry, view, capacity=ring,
                                                                         on_finish=on_finish)
    return cfg


def link_failure(exc: BaseException):
    """The device runtime's link refusal behind `exc` (FlyDSL re-raises a pass failure as
    its own error type), or None."""
    from .link import DeviceLinkError

    if _LINK_FAILURES and not isinstance(exc, DeviceLinkError):
        return _LINK_FAILURES.pop()
    return None
