"""ldssan's options: `FLYDSL_LDSSAN_*` environment variables, typed, each with a description.

Read on every access, so a test can monkeypatch the environment. A bad value raises an
error naming the variable and the raw value. `help_text()` lists every option.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

PREFIX = "FLYDSL_LDSSAN"


class ConfigError(ValueError):
    pass


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
            raise ConfigError(f"failed to parse environment variable {self.env}={raw!r}: {exc}") from None
        if self.choices and value not in self.choices:
            raise ConfigError(f"environment variable {self.env}={raw!r}: expected one of {list(self.choices)}")
        return value


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 0/1, true/false, yes/no or on/off")


def _positive(raw: str) -> int:
    v = int(raw)
    if v <= 0:
        raise ValueError("expected a positive integer")
    return v


def _policy(raw: str) -> str:
    from ldssan.runtime.emu.sched import Policy

    return str(Policy.parse(raw))


OPTIONS = {
    "enable": Option(PREFIX, False, "instrument and check every FlyDSL kernel launched", _bool),
    "mode": Option(f"{PREFIX}_MODE", "fail", "fail: a test with violations fails; warn: only report",
                   str.lower, ("fail", "warn")),
    "report": Option(f"{PREFIX}_REPORT", "", "write violations to this path (.sarif -> SARIF, else JSON)", str),
    "policy": Option(f"{PREFIX}_POLICY", "round-robin",
                     "virtual gfx1250 scheduler: round-robin, reverse, random(SEED), optionally +early/+random",
                     _policy),
    "ring": Option(f"{PREFIX}_RING", 4096, "violation records kept per launch (overflow is counted)", _positive),
    "batch": Option(f"{PREFIX}_BATCH", 1, "workgroups run together on the lane axis (throughput mode)", _positive),
    "coverage": Option(f"{PREFIX}_COVERAGE", False, "print each kernel's instrumented sites by kind", _bool),
    "max_reports": Option(f"{PREFIX}_MAX_REPORTS", 20, "violations printed in full per test", _positive),
}


def get(name: str) -> Any:
    return OPTIONS[name].get()


def help_text() -> str:
    lines = ["ldssan options (environment variables):"]
    for opt in OPTIONS.values():
        extra = f" (one of {', '.join(opt.choices)})" if opt.choices else ""
        lines.append(f"  {opt.env:<28} default {opt.default!r:<14} {opt.description}{extra}")
    return "\n".join(lines)
