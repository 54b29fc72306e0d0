"""The virtual gfx1250: runs FlyDSL gfx1250 kernels on the CPU.

    from ldssan.runtime.emu import emulate
    with emulate(policy="random(3)"):
        my_flydsl_launch(x_cpu, out_cpu)      # exactly as on hardware, with CPU tensors
"""

from __future__ import annotations

from contextlib import contextmanager

from .errors import EmulationError, UnsupportedOp
from .frontend import EmuConfig, active
from .launch import AUTO, EmuLaunchError, batch_option
from .limits import Limits
from .memory import EmuMemoryError
from .sched import ALL_POLICIES, BarrierDivergenceError, BatchDivergence, DeadlockError, Policy, SpinTimeout
from .wave import EmulationTimeout, StepBudgetExceeded

__all__ = [
    "ALL_POLICIES", "BarrierDivergenceError", "BatchDivergence", "DeadlockError", "EmulationError",
    "EmulationTimeout", "EmuLaunchError",
    "SpinTimeout", "EmuConfig", "EmuMemoryError", "Policy",
    "StepBudgetExceeded", "UnsupportedOp", "emulate",
]


@contextmanager
def emulate(policy: "Policy | str" = "round-robin", *, batch: "int | str" = "auto", resident: int = 1,
            time_limit: "float | str | None" = None, step_budget: "int | str | None" = None):
    """Launches of FlyDSL kernels inside the block run on the virtual gfx1250.

    `batch` workgroups run together on the lane axis (throughput); "auto": as many as fit the
    lane budget under the lockstep policy, one at a time under per-wave policies. `resident`
    workgroups run at once, interleaved by the scheduler (persistent kernels that wait on
    each other). `time_limit` (CPU seconds per launch) and `step_budget` (loop iterations
    per scheduler run): None or "auto" scale with the launch (`limits.py`)."""
    if isinstance(policy, str):
        policy = Policy.parse(policy)
    batch = batch_option(batch)
    if resident < 1:
        raise ValueError(f"resident must be >= 1, got {resident}")
    if batch > 1 and resident > 1:
        raise ValueError("batch and resident are exclusive: batched workgroups run in lockstep")
    limits = Limits(time_limit, step_budget)  # a bad value fails here, before any launch
    from ldssan.passes import locations

    locations.install()  # refusals and faults name the raw builders' own lines, not `def`
    with active(EmuConfig(policy=policy, batch=batch, resident=resident, time_limit=limits.time_limit,
                          step_budget=limits.step_budget)) as cfg:
        yield cfg
