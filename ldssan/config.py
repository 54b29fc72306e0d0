"""ldssan's options: `FLYDSL_LDSSAN_*` environment variables, typed, each with a description.

Read on every access, so a test can monkeypatch the environment. A bad value raises an
error naming the variable and the raw value. `help_text()` lists every option. `validate()`
reads them all at once: the pytest plugin and `hook.enable()` call it before anything runs,
so a bad value is a usage error up front, never a failure in the middle of a run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

# defined below the layers, so emulate()'s argument errors are ConfigErrors too
from ldssan.runtime.arguments import ConfigError

PREFIX = "FLYDSL_LDSSAN"


@dataclass(frozen=True)
class Option:
    env: str
    default: Any
    description: str
    parse: Callable[[str], Any]
    choices: tuple = ()

    def get(self) -> Any:
        raw = os.environ.get(self.env)
        if raw is None or raw == "":
            return self.default
        try:
            value = self.parse(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"ldssan: {self.env}={raw!r}: {exc}") from None
        if self.choices and value not in self.choices:
            raise ConfigError(f"ldssan: {self.env}={raw!r}: expected one of {', '.join(self.choices)}")
        return value


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 0/1, true/false, yes/no or on/off")


def _int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    accepted = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"

    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise ValueError(f"expected {accepted}") from None
        if v < lo or (hi is not None and v > hi):
            raise ValueError(f"expected {accepted}")
        return v

    return parse


_positive = _int_range(1)


def batch_max() -> int:
    """The largest batch: the lane budget's workgroups of one wave (runtime/emu/plan.py).
    A larger batch only costs memory (every lockstep value is an array over the batch's
    lanes; throughput stops growing well below this), so a larger number is a typo."""
    from ldssan.runtime.emu.plan import LANE_BUDGET
    from ldssan.runtime.emu.wave import WAVE

    return LANE_BUDGET // WAVE


def _batch(raw: str) -> "int | str":
    low = raw.strip().lower()
    if low == "auto":
        return low
    try:
        return _int_range(1, batch_max())(low)
    except ValueError:
        raise ValueError(f"expected auto or an integer from 1 to {batch_max()}") from None

# Each sanitized launch may fill a ring of 32-byte records; this budget bounds its memory.
RING_BUDGET_BYTES = 64 << 20
RING_MAX = RING_BUDGET_BYTES // 32


def _isa_mode(raw: str) -> str:
    low = raw.strip().lower()
    if low in ("warn", "error", "off"):
        return low
    try:
        return "warn" if _bool(low) else "off"  # FLYDSL_LDSSAN_ISA=1 means warn
    except ValueError:
        raise ValueError("expected warn, error, off (or 1/0)") from None


# FLYDSL_LDSSAN_DEVICE: auto, off and virtual are the Python engine's (and choose torch's GPU
# device, ldssan.vdevice); emulated and hardware run the device runtime (ldssan.runtime.device).
DEVICE_CHOICES = ("auto", "off", "virtual", "emulated", "hardware")


def _time_limit(raw: str) -> "float | str":
    from ldssan.runtime.emu.limits import time_limit_option

    seconds = time_limit_option(raw.strip())
    return "auto" if seconds is None else seconds


def _step_budget(raw: str) -> "int | str":
    from ldssan.runtime.emu.limits import step_budget_option

    steps = step_budget_option(raw.strip())
    return "auto" if steps is None else steps


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _bytes(raw: str) -> int:
    """A byte count: 0, 1048576, 512M, 2G (binary units; K, M, G, with or without iB)."""
    low = raw.strip().lower().removesuffix("ib").removesuffix("b")
    unit = low[-1:] if low[-1:] in _UNITS else ""
    try:
        value = int(low[: len(low) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise ValueError("expected a byte count >= 0 (e.g. 0, 268435456, 512M, 2G)") from None
    if value < 0:
        raise ValueError("expected a byte count >= 0 (e.g. 0, 268435456, 512M, 2G)")
    return value


def _policy(raw: str) -> str:
    from ldssan.runtime.emu.sched import Policy

    return str(Policy.parse(raw))


def _kernels(raw: str):
    from ldssan.scope import parse

    return parse(raw, f"{PREFIX}_KERNELS")


OPTIONS = {
    "enable": Option(PREFIX, False, "instrument and check every FlyDSL kernel launched", _bool),
    "mode": Option(f"{PREFIX}_MODE", "fail", "fail: a test with violations fails; warn: only report",
                   str.lower, ("fail", "warn")),
    "report": Option(f"{PREFIX}_REPORT", "", "write violations to this path (.sarif -> SARIF, else JSON)", str),
    "policy": Option(f"{PREFIX}_POLICY", "lockstep",
                     "virtual gfx1250 scheduler: lockstep (a workgroup's waves as one lane array; kernels it "
                     "cannot run go per wave), round-robin, reverse, canonical, random(SEED), optionally "
                     "+early/+random",
                     _policy),
    "ring": Option(f"{PREFIX}_RING", 4096, f"violation records kept per launch, 1..{RING_MAX} "
                   f"({RING_BUDGET_BYTES >> 20} MiB; overflow is counted)", _int_range(1, RING_MAX)),
    "batch": Option(f"{PREFIX}_BATCH", "auto", "workgroups run together on the lane axis: auto (as many as "
                    "fit the lane budget under lockstep; one under per-wave policies) or a number", _batch),
    "time_limit": Option(f"{PREFIX}_TIME_LIMIT", "auto",
                         "CPU seconds of emulation one launch may take before it stops with EmulationTimeout: "
                         "auto (10 s per 1024 threads of the launch, threads x workgroups, up to an hour) "
                         "or a number of seconds", _time_limit),
    "step_budget": Option(f"{PREFIX}_STEP_BUDGET", "auto",
                          "loop iterations one scheduler run (a batch of workgroups) may take before it stops "
                          "with StepBudgetExceeded: auto (50,000,000 per 1024 threads of the run) or a number",
                          _step_budget),
    "memo": Option(f"{PREFIX}_MEMO", 256 << 20,  # runtime/emu/memo.py DEFAULT_BUDGET
                   "bytes of post-states kept to replay a launch identical to an earlier one (same build, "
                   "arguments, options and memory bytes; least recently used first out; docs/memo.md): "
                   "a byte count such as 512M, or 0 (off)", _bytes),
    "native": Option(f"{PREFIX}_NATIVE", "auto",
                     "lockstep runs of lane-wise ops, and the sanitizer's clean-case LDS checks of those launches, "
                     "compiled to C for this CPU (zig cc from the ziglang wheel, cached "
                     "under ~/.cache/ldssan/native): auto (launches of 8192 threads or more), on, off; the "
                     "results are the same bits either way (docs/virtual-gfx1250.md)",
                     str.lower, ("auto", "on", "off")),
    "coverage": Option(f"{PREFIX}_COVERAGE", False, "print each kernel's instrumented sites by kind", _bool),
    "max_reports": Option(f"{PREFIX}_MAX_REPORTS", 20, "violations printed in full per test", _positive),
    "lint": Option(f"{PREFIX}_LINT", "warn",
                   "fence-pairing check (LDS040/LDS041): warn (reported, never fails a test), "
                   "error (fails like a violation), off", str.lower, ("warn", "error", "off")),
    "isa": Option(f"{PREFIX}_ISA", "off",
                  "also check each sanitized kernel's compiled gfx1250 code (ldssan isa-check, LDS050/LDS052) "
                  "on an uninstrumented compile-only build: warn (reported, never fails a test; 1 = warn), "
                  "error (fails like a violation), off", _isa_mode),
    "device": Option(f"{PREFIX}_DEVICE", "auto",
                     "where launches are checked, and torch's GPU device: auto (the device runtime on a real "
                     "gfx1250 when one is present, else the Python engine on the virtual gfx1250, which is "
                     "torch's GPU when torch has none); off (the Python engine, torch's own GPU); virtual (the "
                     "Python engine, torch's GPU always the virtual gfx1250); emulated (the device runtime's "
                     "linked IR run on the virtual gfx1250, per-wave policy); hardware (the device runtime on "
                     "a gfx1250 HIP device, an error naming the reason when there is none)",
                     str.lower, DEVICE_CHOICES),
    "kernels": Option(f"{PREFIX}_KERNELS", None,
                      "check only these kernels: comma-separated shell patterns over kernel names, file:PATH "
                      "or module:NAME, a leading - excludes; the others run plain, unchecked "
                      "(docs/scope-and-suppressions.md)", _kernels),
    "suppressions": Option(f"{PREFIX}_SUPPRESSIONS", "",
                           "a file of RULE:PATTERN lines: reports they match fail no test and are marked "
                           "suppressed (docs/scope-and-suppressions.md)", str),
    "keep_temp": Option(f"{PREFIX}_KEEP_TEMP", False,
                        "keep ldssan's temporary files (kernel variants, test caches) at exit, for debugging",
                        _bool),
}


def get(name: str) -> Any:
    return OPTIONS[name].get()


def unknown_variables() -> list[str]:
    """One line per set FLYDSL_LDSSAN_* variable that is no option (a misspelt name would
    otherwise be ignored silently), with the closest option's name when one is close."""
    import difflib

    # compared after the prefix, which every name shares: FLYDSL_LDSSAN_FOO is close to nothing
    known = {opt.env[len(PREFIX):]: opt.env for opt in OPTIONS.values()}
    lines = []
    for var in sorted(os.environ):
        if var.startswith(PREFIX) and var[len(PREFIX):] not in known:
            close = difflib.get_close_matches(var[len(PREFIX):], sorted(known), n=1)
            hint = f"did you mean {known[close[0]]}?" if close else "`ldssan env` lists the options"
            lines.append(f"ldssan: {var}={os.environ[var]!r}: unknown ldssan option ({hint})")
    return lines


def validate() -> dict[str, Any]:
    """Every option's value; a ConfigError listing each bad variable (one line each) if any
    is set to a value it does not accept, or is a FLYDSL_LDSSAN_* name that is no option."""
    values, errors = {}, unknown_variables()
    for name, opt in OPTIONS.items():
        try:
            values[name] = opt.get()
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("\n".join(errors))
    return values


def help_text() -> str:
    lines = ["ldssan options (environment variables):"]
    for opt in OPTIONS.values():
        extra = f" (one of {', '.join(opt.choices)})" if opt.choices else ""
        lines.append(f"  {opt.env:<28} default {opt.default!r:<14} {opt.description}{extra}")
    return "\n".join(lines)
