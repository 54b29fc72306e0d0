"""What a run of FlyDSL launches under ldssan is, as data.

A `RunConfig` is built once, by whoever opens the run (`ldssan.hook` for the sanitizer,
`emulate()`, the device runtime's blocks), and carried in the front end's context
(`frontend.EmuConfig.run`). Every reader takes its fields; nothing is recovered from text.
FlyDSL's cache key sees the run only through `frontend.sentinel_fragment`, which derives the
pipeline fragment from the fields that change a build and is never read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .launch import AUTO
from .sched import Policy


@dataclass(frozen=True)
class DeviceLink:
    """The device runtime linked into the build (`ldssan.runtime.device`): the build checks
    itself and writes records into the buffer at `ring_addr`."""

    digest: str  # the device runtime's source digest: editing it rebuilds
    ring_addr: int  # baked into the IR; 0 (`layout.RING_UNBOUND`): read from `@__ldssan_ring`
    scratch: bool = False  # every shadow in global scratch, not only where LDS has no room
    # the build runs on a real gfx1250: FlyDSL's whole pipeline runs after the link, and
    # FlyDSL's own call state launches it
    hardware: bool = False
    process: str = ""  # hardware builds of `FLYDSL_LDSSAN_DEVICE=hardware`: this process's id


@dataclass(frozen=True)
class RunConfig:
    """Executor, schedule, limits and checks of the launches of one run."""

    policy: Policy = field(default_factory=Policy)
    batch: int = AUTO  # workgroups on the lane axis; AUTO: by the lane budget under lockstep
    resident: int = 1  # workgroups resident at once (persistent kernels); exclusive with batch
    time_limit: float | None = None  # CPU seconds per launch (None: auto, scaled with the launch: limits.py)
    step_budget: int | None = None  # loop iterations per scheduler run (None: auto, scaled likewise)
    sanitize: bool = False  # builds are instrumented and launches checked
    ring: int | None = None  # the Python engine's ring capacity (records kept per host call)
    device: DeviceLink | None = None  # the device runtime checks, not the Python engine
    # FLYDSL_LDSSAN_ISA: each sanitized build is also built for gfx1250 and ISA-checked, its
    # findings warnings ("warn") or errors ("error"); "off": not (ldssan/isa/sanitized.py)
    isa: str = "off"
    # lockstep runs of lane-wise ops compiled to C (native/): "auto" (launches of 8192
    # threads or more), "on", "off"; the results are the same bits either way
    native: str = "auto"

    @property
    def executor(self) -> str:
        """Who runs and checks the launches: `emulator` (plain emulation, unchecked),
        `python` (the Python engine on the virtual gfx1250), `emulated` (the device runtime
        on the virtual gfx1250) or `hardware` (the device runtime on a gfx1250)."""
        if not self.sanitize:
            return "emulator"
        if self.device is None:
            return "python"
        return "hardware" if self.device.hardware else "emulated"
