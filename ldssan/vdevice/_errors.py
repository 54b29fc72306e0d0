"""The one error the virtual device raises, with the user's source line in it."""

from __future__ import annotations

import os
import sys

from ldssan.passes.ir.errors import LdssanError

_SKIP = (os.sep + "torch" + os.sep, os.sep + "ldssan" + os.sep + "vdevice" + os.sep, os.sep + "contextlib.py")


class VirtualDeviceError(LdssanError, RuntimeError):
    """A torch GPU feature the virtual gfx1250 does not provide (names the call and where)."""


def caller() -> str:
    """`file:line` of the innermost frame outside torch and this package."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not any(part in path for part in _SKIP):
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def unsupported(what: str, why: str) -> VirtualDeviceError:
    return VirtualDeviceError(
        f"ldssan virtual gfx1250: {what} is not supported ({why}), called at {caller()}. "
        "Run this test on a real GPU, or skip it when ldssan.vdevice.active() is true.")
