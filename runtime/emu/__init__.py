"""The virtual gfx1250: runs FlyDSL gfx1250 kernels on the CPU.

    from ldssan.runtime.emu import emulate
    with emulate(policy="random(3)"):
        my_flydsl_launch(x_cpu, out_cpu)      # exactly as on hardware, with CPU tensors
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from ldssan.passes.ir.errors import LdssanError
from .. import arguments
from .errors import EmulationError, UnsupportedOp
from .frontend import EmuConfig, active, current, install_locations
from .launch import AUTO, EmuLaunchError, batch_option
from .limits import Limits
from .runconfig import RunConfig
from .memory import EmuMemoryError
from .threads import UncoveredThreadLaunch
from .sched import ALL_POLICIES, BarrierDivergenceError, BatchDivergence, DeadlockError, Policy, SpinTimeout
from .wave import EmulationTimeout, StepBudgetExceeded

__all__ = [
    "ALL_POLICIES", "BarrierDivergenceError", "BatchDivergence", "DeadlockError", "EmulateRefused",
    "EmulationError", "EmulationTimeout", "EmuLaunchError", "UncoveredThreadLaunch",
    "SpinTimeout", "EmuConfig", "EmuMemoryError", "Policy", "RunConfig",
    "StepBudgetExceeded", "UnsupportedOp", "emulate",
]


class EmulateRefused(LdssanError, RuntimeError):
    """`emulate()` inside a sanitizer that cannot run its launches as asked (the device
    runtime on a real gfx1250; lockstep under the device runtime): refused, never unchecked."""


NATIVE_CHOICES = ("auto", "on", "off")


def emulate(policy: "Policy | str" = "round-robin", *, batch: "int | str" = "auto", resident: int = 1,
            time_limit: "float | str | None" = None, step_budget: "int | str | None" = None,
            native: str | None = None):
    """Launches of FlyDSL kernels inside the block run on the virtual gfx1250.

    `batch` workgroups run together on the lane axis (throughput); "auto": as many as fit the
    lane budget under the lockstep policy, one at a time under per-wave policies. `resident`
    workgroups run at once, interleaved by the scheduler (persistent kernels that wait on
    each other). `time_limit` (CPU seconds per launch) and `step_budget` (loop iterations
    per scheduler run): None or "auto" scale with the launch (`limits.py`). `native`: lockstep
    runs of lane-wise ops compiled to C, "auto" (big launches), "on" or "off" (the same
    results; docs/virtual-gfx1250.md); None: the enclosing sanitizer's, else "auto".

    Under an active sanitizer (`ldssan.enable()`, FLYDSL_LDSSAN=1, or an enclosing
    `ldssan.sanitize()` block) the launches run with this policy AND are checked, their
    results going to that sanitizer's collector. The block covers the calling thread only
    (a launch from another thread while it is open is an `UncoveredThreadLaunch`).
    Arguments are checked here: a bad one is an `arguments.ConfigError` naming it."""
    policy = arguments.policy("emulate", policy, Policy)
    batch = batch_option(arguments.batch("emulate", batch))
    resident = arguments.integer("emulate", "resident", resident, 1)
    arguments.batch_and_resident("emulate", batch, resident)
    limits = Limits(time_limit, step_budget)  # a bad value fails here, before any launch
    if native is not None:
        native = arguments.choice("emulate", "native", native, NATIVE_CHOICES)
    install_locations()  # refusals and faults name the raw builders' own lines, not `def`
    return _emulated(policy, batch, resident, limits, native)


@contextmanager
def _emulated(policy: Policy, batch: int, resident: int, limits: Limits, native: str | None):
    with active(_config_under(current(), policy, batch, resident, limits, native)) as cfg:
        yield cfg


def _config_under(outer: "EmuConfig | None", policy: Policy, batch: int, resident: int,
                  limits: Limits, native: str | None = None) -> EmuConfig:
    """emulate()'s config: plain, or the active sanitizer's with this schedule."""
    if outer is None or not outer.sanitize:
        return EmuConfig(RunConfig(policy=policy, batch=batch, resident=resident, time_limit=limits.time_limit,
                                   step_budget=limits.step_budget, native=native or "auto"))
    executor = outer.run.executor
    if executor == "hardware":
        raise EmulateRefused("ldssan: emulate() inside a sanitizer that runs on a real gfx1250 "
                             "(FLYDSL_LDSSAN_DEVICE=hardware): its launches cannot run on the virtual "
                             "gfx1250 and be checked there; leave emulate() out, or sanitize with "
                             "FLYDSL_LDSSAN_DEVICE=off")
    if executor == "emulated" and policy.lockstep:
        raise EmulateRefused("ldssan: emulate('lockstep') inside a device-runtime sanitizer "
                             "(FLYDSL_LDSSAN_DEVICE=emulated): the device runtime runs waves one at "
                             "a time; pass a per-wave policy (canonical, round-robin, random(SEED), ...)")
    # a fresh launch list: the outer config's records are its own; limits given here win
    run = replace(outer.run, policy=policy, batch=batch, resident=resident, native=native or outer.run.native,
                  time_limit=outer.time_limit if limits.time_limit is None else limits.time_limit,
                  step_budget=outer.step_budget if limits.step_budget is None else limits.step_budget)
    return replace(outer, run=run, launches=[])
