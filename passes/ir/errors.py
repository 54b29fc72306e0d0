"""The one error family of ldssan. It lives in the bottom layer so that every layer (the IR
reader, the passes, the runtime, the user-facing package) can subclass it without importing
upward.

Every error ldssan raises derives from `LdssanError`, keeping its historical built-in base as
well (`ConfigError` is still a `ValueError`, `EmulationError` still a `RuntimeError`), so
existing `except` clauses keep working. `tests/architecture/test_error_family.py` fails for a
new error class outside the family.
"""

from __future__ import annotations


class LdssanError(Exception):
    """An error ldssan raised on purpose: it already says what went wrong in the kernel's or
    the user's terms (the emulator passes it on unchanged, `runtime.emu.errors.fail_closed`)."""


class UsageError(LdssanError):
    """The user's input is wrong (an option or FLYDSL_LDSSAN_* value, a file, a target, the
    tools the environment provides), not ldssan: the command line shows one line and exits
    with status 2 (`ldssan.cli`)."""
