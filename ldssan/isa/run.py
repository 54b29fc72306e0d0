"""`ldssan isa-check FILE::FUNC`: call FUNC (which launches FlyDSL kernels) as compile-only
gfx1250 builds, and check every kernel it builds at the ISA level."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from .capture import capture_builds
from .check import check_build
from .findings import KernelResult


class IsaTargetError(ValueError):
    """A FILE::FUNC that names nothing callable, or a call that built no kernel."""


def resolve(target: str):
    """`path/to/file.py::func` or `package.module::func` -> the callable."""
    where, sep, name = target.partition("::")
    if not sep or not where or not name:
        raise IsaTargetError(f"{target!r}: expected FILE::FUNC (e.g. my_kernels.py::launch_all)")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise IsaTargetError(f"{target!r}: no file {where!r}")
        # The file's folder goes first on sys.path, as for `python FILE`: its sibling imports work.
        sys.path.insert(0, str(path.resolve().parent))
        spec = importlib.util.spec_from_file_location(f"_ldssan_isa_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise IsaTargetError(f"{target!r}: cannot import {where!r}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise IsaTargetError(f"{target!r}: {where} has no callable {name!r}")
    return fn


def isa_check(fn, *, offsets: bool = True) -> list[KernelResult]:
    """Every kernel build `fn()` makes, checked."""
    builds = capture_builds(fn)
    if not builds:
        raise IsaTargetError(
            f"{getattr(fn, '__name__', fn)!r} built no FlyDSL kernel (it launched none, or this "
            "process had already compiled them: run it in a fresh process)")
    return [check_build(b, offsets=offsets) for b in builds]
