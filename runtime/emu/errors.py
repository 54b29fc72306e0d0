"""Errors of the virtual gfx1250 on a user kernel, and the fail-closed rule for everything
else: whatever goes wrong while translating or running a kernel reaches the user as an
ldssan error that names the op and its source line, never as a bare Python exception."""

from __future__ import annotations

from ldssan.passes.ir.errors import LdssanError


class EmulationError(LdssanError, RuntimeError):
    """The virtual gfx1250 failed on an op of the kernel (`op_name`, `loc`: where)."""

    def __init__(self, message: str, op_name: str = "", loc=None):
        super().__init__(message)
        self.op_name = op_name
        self.loc = loc


class UnsupportedOp(EmulationError, NotImplementedError):
    """The virtual gfx1250 has no implementation for an op (or for this use of it)."""

    def __init__(self, op_name: str, loc, detail: str = ""):
        more = f": {detail}" if detail else ""
        super().__init__(f"ldssan-emu: no implementation for '{op_name}' at {loc}{more}", op_name, loc)


class EmuLaunchError(LdssanError, ValueError):
    """A launch argument the virtual gfx1250 cannot take (names the argument)."""


def is_ldssan_error(exc: BaseException) -> bool:
    # ldssan's own errors (memory faults, deadlocks, step budgets, ...) already say what went
    # wrong in the kernel's terms; only Python's built-in exceptions need translating.
    return isinstance(exc, LdssanError)


def fail_closed(exc: Exception, at, during: str) -> Exception:
    """The error to raise for `exc`, which escaped `during` (e.g. "wave 0 of kernel k") at op
    `at` = (op name, loc) or None: ldssan's own errors unchanged, NotImplementedError as
    UnsupportedOp, any other exception as EmulationError; the original is the `__cause__`."""
    if is_ldssan_error(exc):
        return exc
    op_name, loc = at if at is not None else ("?", "an unknown location")
    if isinstance(exc, NotImplementedError):
        err: EmulationError = UnsupportedOp(op_name, loc, str(exc))
    else:
        err = EmulationError(f"ldssan-emu: '{op_name}' at {loc} failed in {during}: "
                             f"{type(exc).__name__}: {exc}", op_name, loc)
    err.__cause__ = exc
    return err
