"""The pytest plugin's settings: one table, each row a command-line flag, an ini option
(`[pytest]` / `[tool.pytest.ini_options]`) and, for most, a `FLYDSL_LDSSAN_*` variable
(`ldssan.config`).

Precedence for each: command line > environment variable > ini option > default. Every
value is read and parsed once, at configure (`resolve`): a bad one is a `ConfigError`
naming the flag, the variable or the ini option that gave it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from . import config as opts

MODE_HELP = "fail: a test whose launches have violations fails; warn: report only"
REQUIRE_HELP = ("fail the run if ldssan is on and no FlyDSL kernel was launched (nothing was checked), and "
                "each test that called a FlyDSL launcher but had no launch checked")


@dataclass(frozen=True)
class Setting:
    name: str  # the key in `resolve`'s result; a `config.OPTIONS` name when `env` is true
    flag: str
    help: str
    switch: bool = False  # a flag without a value (store_true); the ini option is a boolean
    metavar: str | None = None
    env: bool = True  # also a FLYDSL_LDSSAN_* variable (the option of the same name)
    default: Any = None  # for a setting with no variable
    path: bool = False  # a file: relative in the ini file means relative to the ini file

    @property
    def ini(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def dest(self) -> str:
        return self.ini

    def parse(self) -> Callable[[str], Any]:
        return opts.OPTIONS[self.name].parse if self.env else opts._bool

    def ini_help(self) -> str:
        var = f" (FLYDSL_LDSSAN{'' if self.name == 'enable' else '_' + self.name.upper()})" if self.env else ""
        return f"as {self.flag}{var}: {self.help}"


SETTINGS = (
    Setting("enable", "--ldssan", "sanitize every FlyDSL kernel launch (same as FLYDSL_LDSSAN=1)", switch=True),
    Setting("mode", "--ldssan-mode", MODE_HELP, metavar="fail|warn"),
    Setting("policy", "--ldssan-policy", "virtual gfx1250 scheduler policy: lockstep (default), round-robin, "
            "reverse, random(SEED)[+early|+random]"),
    Setting("report", "--ldssan-report", "write all violations to PATH (.sarif for SARIF, otherwise JSON)",
            metavar="PATH", path=True),
    Setting("require_launch", "--ldssan-require-launch", REQUIRE_HELP, switch=True, env=False, default=False),
    Setting("time_limit", "--ldssan-time-limit",
            "CPU seconds of emulation per launch: auto (default; scales with the launch) or a number",
            metavar="SECONDS"),
    Setting("step_budget", "--ldssan-step-budget",
            "loop iterations per emulator run: auto (default; scales with the run) or a number", metavar="STEPS"),
    Setting("kernels", "--ldssan-kernels",
            "check only these kernels: comma-separated shell patterns over kernel names, file:PATH or "
            "module:NAME; a leading - excludes (the others run plain, unchecked)", metavar="PATTERNS"),
    Setting("suppressions", "--ldssan-suppressions",
            "a file of RULE:PATTERN lines: the reports they match fail no test", metavar="FILE", path=True),
)


def add_options(parser) -> None:
    group = parser.getgroup("ldssan", "LDS synchronization sanitizer for FlyDSL kernels")
    for s in SETTINGS:
        kwargs = {"action": "store_true"} if s.switch else {"metavar": s.metavar} if s.metavar else {}
        group.addoption(s.flag, dest=s.dest, default=None, help=s.help, **kwargs)
        # a string, parsed here like the variable: one set of accepted spellings and errors
        parser.addini(s.ini, s.ini_help(), type="string", default="")


def _env(s: Setting) -> str | None:
    if not s.env:
        return None
    raw = os.environ.get(opts.OPTIONS[s.name].env)
    return raw if raw else None


def _parsed(s: Setting, raw: str, source: str) -> Any:
    try:
        got = s.parse()(raw)
    except ValueError as exc:
        raise opts.ConfigError(f"ldssan: {source}={raw!r}: {exc}") from None
    choices = opts.OPTIONS[s.name].choices if s.env else ()
    if choices and got not in choices:
        raise opts.ConfigError(f"ldssan: {source}={raw!r}: expected one of {', '.join(choices)}")
    return got


def value(config, s: Setting) -> Any:
    """The setting's value: the command line's, else the variable's, else the ini file's,
    else the default (the variable's default for a setting that has one)."""
    given = config.getoption(s.dest)
    if given is not None:
        return True if s.switch else _parsed(s, given, s.flag)
    if _env(s) is not None:
        return opts.OPTIONS[s.name].get()
    raw = config.getini(s.ini).strip()
    if raw and s.path and config.inipath is not None:  # as pytest's own "paths" ini options
        raw = os.path.join(config.inipath.parent, raw)
    if raw:
        return _parsed(s, raw, f"ini option {s.ini}")
    return opts.OPTIONS[s.name].default if s.env else s.default


def resolve(config, *, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Every setting's value by name (or those in `only`); a `ConfigError` for a bad one."""
    return {s.name: value(config, s) for s in SETTINGS if only is None or s.name in only}


def source(config, name: str) -> str:
    """Where the setting `name` was given (for messages): its flag, variable or ini option."""
    s = next(s for s in SETTINGS if s.name == name)
    if config.getoption(s.dest) is not None:
        return s.flag
    if _env(s) is not None:
        return opts.OPTIONS[s.name].env
    return f"ini option {s.ini}" if config.getini(s.ini).strip() else s.flag
