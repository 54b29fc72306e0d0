"""How long a launch may run on the virtual gfx1250: its CPU-time limit and its step budget.

The limits travel as data (`EmuConfig.time_limit` / `.step_budget`, a `Limits` in the
`Launcher`): set by FLYDSL_LDSSAN_TIME_LIMIT / FLYDSL_LDSSAN_STEP_BUDGET, pytest's
--ldssan-time-limit / --ldssan-step-budget, or the `time_limit=` / `step_budget=` of
`emulate()` and `sanitize()`. None (or "auto") means a default that grows with the work,
so a correct large launch is not cut off by it (up to an hour of CPU per launch).

- time limit: CPU seconds of emulation for one whole launch (every workgroup of its grid),
  so any grid, however large, ends in a named `EmulationTimeout` rather than running on.
  Auto: `base` seconds per `THREADS_PER_BASE` threads of the launch (threads per workgroup
  x workgroups) or per `BYTES_PER_BASE` bytes of the global memory it can reach, whichever
  is more (a grid-stride kernel does the work of its data with few threads: FlyDSL's RMSNorm
  backward reduces 4096 x 4096 with 6 workgroups), never less than `base`, never more than
  `AUTO_TIME_MAX`.
- step budget: loop iterations of one scheduler run (a batch of workgroups run together,
  whose waves share it). Auto: `base` per `THREADS_PER_BASE` threads of the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: threads whose work one unit of the base limit covers: the fixed limits this replaces held
#: for each scheduler run, i.e. for one workgroup of up to 1024 threads under a per-wave
#: policy; a launch of full-size workgroups keeps that much time per workgroup
THREADS_PER_BASE = 1024
#: the auto time limit stops growing here (an hour of CPU): a launch beyond it cannot finish
#: in a test run anyway, and this bounds a 2**31-workgroup grid; an explicit limit may exceed it
AUTO_TIME_MAX = 3600.0
#: bytes of reachable global memory whose work one unit of the base time limit covers
#: (0.4 MB/s): FlyDSL's RMSNorm backward partial kernel (4096 x 4096 bf16, 6 workgroups of
#: 512 threads, ~100 MB of tensors) took ~40 s of CPU, 2.5 MB/s, when threads allowed it 30 s;
#: a runaway loop over small tensors still ends in the base time
BYTES_PER_BASE = 4 << 20


def time_limit_option(value) -> float | None:
    """A user's time limit (None / "auto" -> None; else positive finite seconds)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, bool):
        raise ValueError(f"time limit must be 'auto' or a number of seconds > 0, got {value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"time limit must be 'auto' or a number of seconds > 0, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"time limit must be 'auto' or a number of seconds > 0, got {value!r}")
    return seconds


def step_budget_option(value) -> int | None:
    """A user's step budget (None / "auto" -> None; else an integer >= 1)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip().replace("_", ""))
        except ValueError:
            raise ValueError(f"step budget must be 'auto' or an integer >= 1, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"step budget must be 'auto' or an integer >= 1, got {value!r}")
    return value


def scaled(base, threads: int):
    """`base` per THREADS_PER_BASE threads of work, at least `base` (same type as `base`)."""
    units = max(1, -(-int(threads) // THREADS_PER_BASE))
    return base * units


@dataclass(frozen=True)
class Limits:
    """A user's limits; None: auto (`scaled` from the module's base values)."""

    time_limit: float | None = None
    step_budget: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "time_limit", time_limit_option(self.time_limit))
        object.__setattr__(self, "step_budget", step_budget_option(self.step_budget))

    def seconds(self, base: float, threads: int, data_bytes: int = 0) -> float:
        """CPU seconds for a launch of `threads` threads in all (workgroups x block) that can
        reach `data_bytes` bytes of global memory."""
        if self.time_limit is not None:
            return self.time_limit
        units = max(scaled(1, threads), -(-int(data_bytes) // BYTES_PER_BASE))
        return min(float(base) * units, max(float(base), AUTO_TIME_MAX))

    def steps(self, base: int, threads: int) -> int:
        """Loop iterations for a scheduler run of `threads` threads in all."""
        return self.step_budget if self.step_budget is not None else scaled(int(base), threads)
