"""The arguments of `ldssan.sanitize()`, `ldssan.enable()` and `ldssan.emulate()`, checked
when the call is made: a bad one is a named error (the function, the argument, the value and
what it accepts), never a raw AttributeError at the first launch.

`ConfigError` lives here, at the bottom of the layers, so the emulator's `emulate()` and the
user-facing options (`ldssan.config`, which re-exports it) raise one error family. This
module imports nothing heavy: the pytest plugin loads it in every pytest run.
"""

from __future__ import annotations

from typing import Any

from ldssan.passes.ir.errors import UsageError


class ConfigError(UsageError, ValueError):
    """A bad ldssan option (environment variable, command-line flag) or argument."""


class ArgumentValueError(ConfigError):
    """An argument of sanitize()/enable()/emulate() has a value it does not accept."""


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of sanitize()/enable()/emulate() has a type it does not accept."""


POLICY_CHOICES = ("lockstep, round-robin, reverse, canonical or random(SEED), optionally followed by "
                  "+late, +early or +random")


def _shown(fn: str, name: str, value: Any) -> str:
    return f"ldssan: {fn}({name}={value!r})"


def policy(fn: str, value: Any, policy_type: type):
    """A `policy_type` (the emulator's `Policy`, passed in: this module sits below it), or a
    policy name parsed into one."""
    if isinstance(value, policy_type):
        return value
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{_shown(fn, 'policy', value)}: expected a Policy or a policy name: "
                                f"{POLICY_CHOICES}")
    try:
        return policy_type.parse(value)
    except ValueError:
        raise ArgumentValueError(f"{_shown(fn, 'policy', value)}: expected {POLICY_CHOICES}") from None


def integer(fn: str, name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """An int (not a bool, not a numeric string) from `lo` to `hi`."""
    accepted = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{_shown(fn, name, value)}: expected {accepted}")
    if value < lo or (hi is not None and value > hi):
        raise ArgumentValueError(f"{_shown(fn, name, value)}: expected {accepted}")
    return value


def batch(fn: str, value: Any, *, per_call: bool = False):
    """'auto' or a positive int (or, with `per_call`, a function of each host call's module)."""
    if per_call and callable(value):
        return value
    expected = "'auto' or an integer >= 1" + (" (or a function of the call's module)" if per_call else "")
    if isinstance(value, str):
        if value.strip().lower() != "auto":
            raise ArgumentValueError(f"{_shown(fn, 'batch', value)}: expected {expected}")
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{_shown(fn, 'batch', value)}: expected {expected}")
    if value < 1:
        raise ArgumentValueError(f"{_shown(fn, 'batch', value)}: expected {expected}")
    return value


def batch_and_resident(fn: str, batch_value: Any, resident: int) -> None:
    """Batched workgroups run in lockstep, resident ones interleave: not both at once."""
    if isinstance(batch_value, int) and batch_value > 1 and resident > 1:
        raise ArgumentValueError(f"ldssan: {fn}(batch={batch_value!r}, resident={resident!r}): batch and "
                                 "resident are exclusive (batched workgroups run in lockstep); set one of them to 1")


def choice(fn: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{_shown(fn, name, value)}: expected one of {', '.join(choices)}")
    if value.lower() not in choices:
        raise ArgumentValueError(f"{_shown(fn, name, value)}: expected one of {', '.join(choices)}")
    return value.lower()
