"""The virtual gfx1250: runs FlyDSL gfx1250 kernels on the CPU.

    from ldssan.runtime.emu import emulate
    with emulate(policy="random(3)"):
        my_flydsl_launch(x_cpu, out_cpu)      # exactly as on hardware, with CPU tensors
"""

from __future__ import annotations

from contextlib import contextmanager

from .codegen import UnsupportedOp
from .frontend import EmuConfig, active
from .memory import EmuMemoryError
from .sched import ALL_POLICIES, BatchDivergence, DeadlockError, Policy
from .wave import StepBudgetExceeded

__all__ = [
    "ALL_POLICIES", "BatchDivergence", "DeadlockError", "EmuConfig", "EmuMemoryError", "Policy",
    "StepBudgetExceeded", "UnsupportedOp", "emulate",
]


@contextmanager
def emulate(policy: "Policy | str" = "round-robin", *, batch: int = 1):
    """Launches of FlyDSL kernels inside the block run on the virtual gfx1250."""
    if isinstance(policy, str):
        policy = Policy.parse(policy)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    with active(EmuConfig(policy=policy, batch=batch)) as cfg:
        yield cfg
