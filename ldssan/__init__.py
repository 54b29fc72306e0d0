"""ldssan: an LDS synchronization sanitizer and a virtual gfx1250 for FlyDSL kernels.

    import ldssan
    with ldssan.sanitize("reverse") as results:    # or ldssan.enable() for the whole process
        my_flydsl_launch(x_cpu, out_cpu)
    assert not results.violations

    with ldssan.emulate("random(7)"):              # the virtual gfx1250 (checked only under a sanitizer)
        my_flydsl_launch(x_cpu, out_cpu)

The names are loaded on first use: importing them pulls in FlyDSL, MLIR and torch (seconds),
and the pytest plugin imports this package in every pytest run, sanitized or not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module that defines it
_EXPORTS = {
    "enable": "ldssan.hook",
    "disable": "ldssan.hook",
    "sanitize": "ldssan.hook",
    "emulate": "ldssan.runtime.emu",
    "Report": "ldssan.decode",
    "Violation": "ldssan.decode",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from ldssan.decode import Report, Violation
    from ldssan.hook import disable, enable, sanitize
    from ldssan.runtime.emu import emulate


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ldssan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
