"""`ldssan isa-check FILE::FUNC`: call FUNC (which launches FlyDSL kernels) as compile-only
gfx1250 builds, and check every kernel it builds at the ISA level.

`resolve` and `guarded` are the FILE::FUNC handling of every command that takes one
(isa-check, build, rows): a FILE that cannot be imported, a FUNC that needs arguments,
and a FUNC whose call raises are one-line `IsaTargetError`s naming the target."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import sys
import sysconfig
import traceback
from pathlib import Path

from ldssan.passes.ir.errors import UsageError
from .capture import capture_builds
from .check import check_build
from .findings import KernelResult


class IsaTargetError(UsageError, ValueError):
    """A FILE::FUNC that names nothing callable, or a call that built no kernel."""


class TargetCallError(IsaTargetError):
    """FUNC's call raised (the user's error, not ldssan's): `__cause__` is what it raised."""


# Where ldssan's own code lives: an exception raised there is not attributed to the user's line.
_ROOT = Path(__file__).resolve().parents[2]
_OWN = tuple(str(_ROOT / d) + os.sep for d in ("ldssan", "runtime", "passes"))
_INSTALLED = tuple(sorted({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")}))
# Exception types that, raised in ldssan's own code, are a bug in ldssan: they keep their traceback.
_BUG_TYPES = (AssertionError, AttributeError, LookupError, NameError, TypeError, ZeroDivisionError, RecursionError)


def _frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return traceback.extract_tb(exc.__traceback__)


def _user_line(exc: BaseException) -> str:
    """` (at file:line)`: the innermost frame of the traceback in the user's code (not
    ldssan's, not an installed package's), or "" when there is none."""
    for frame in reversed(_frames(exc)):
        path = str(Path(frame.filename).resolve())
        if not path.startswith(_OWN + _INSTALLED) and not frame.filename.startswith("<"):
            return f" (at {_shown(frame.filename)}:{frame.lineno})"
    return ""


def _shown(path: str) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _what(exc: BaseException) -> str:
    """`raised ValueError: bad row count`, or `called sys.exit(3)`: one line."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    text = " ".join(str(exc).split())
    return f"raised {type(exc).__name__}: {text}" if text else f"raised {type(exc).__name__}"


def is_ldssan_bug(exc: BaseException) -> bool:
    """An exception of a programming-error type raised in ldssan's own code: a bug in ldssan,
    shown with its traceback rather than blamed on the user's function."""
    frames = _frames(exc)
    return (isinstance(exc, _BUG_TYPES) and bool(frames)
            and str(Path(frames[-1].filename).resolve()).startswith(_OWN))


def _import_problem(exc: BaseException) -> str:
    """What went wrong importing the user's module, in one line."""
    if isinstance(exc, SyntaxError):  # also binary bytes: null bytes, undecodable text
        at = f" at line {exc.lineno}" if exc.lineno else ""
        return f"cannot compile it{at}: {' '.join(str(exc.msg).split())}"
    return f"importing it {_what(exc)}{_user_line(exc)}"


def _load_file(target: str, path: Path):
    # The file's folder goes first on sys.path, as for `python FILE`: its sibling imports work.
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(f"_ldssan_isa_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        raise IsaTargetError(f"{target!r}: {path}: {_import_problem(exc)}") from None
    return module


def _import(target: str, where: str):
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (where == exc.name or where.startswith(exc.name + ".")):  # the target itself
            raise IsaTargetError(f"{target!r}: cannot import {where!r}: {exc}") from None
        raise IsaTargetError(f"{target!r}: module {where!r}: {_import_problem(exc)}") from None
    except (Exception, SystemExit) as exc:
        raise IsaTargetError(f"{target!r}: module {where!r}: {_import_problem(exc)}") from None


def _required_parameters(fn) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): the call will tell
        return []
    return [p.name for p in params if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def resolve(target: str):
    """`path/to/file.py::func` or `package.module::func` -> the callable, which must take
    no arguments."""
    where, sep, name = target.partition("::")
    if not sep or not where or not name:
        raise IsaTargetError(f"{target!r}: expected FILE::FUNC (e.g. my_kernels.py::launch_all)")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise IsaTargetError(f"{target!r}: no file {where!r}")
        module = _load_file(target, path)
    else:
        module = _import(target, where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise IsaTargetError(f"{target!r}: {where} has no callable {name!r}")
    required = _required_parameters(fn)
    if required:
        raise IsaTargetError(f"{target!r}: {name}() is called with no arguments, but it requires "
                             f"{', '.join(required)} (give it defaults, or wrap it in a function that takes none)")
    return fn


def guarded(fn, target: str):
    """`fn` whose call, when it raises (or calls sys.exit), raises a one-line `TargetCallError`
    naming `target`, the exception and the user's line; a bug in ldssan propagates as is."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (Exception, SystemExit) as exc:
            if is_ldssan_bug(exc):
                raise
            raise TargetCallError(f"{target!r}: calling it {_what(exc)}{_user_line(exc)}") from exc

    return call


def isa_check(fn, *, offsets: bool = True) -> list[KernelResult]:
    """Every kernel build `fn()` makes, checked."""
    builds = capture_builds(fn)
    if not builds:
        raise IsaTargetError(
            f"{getattr(fn, '__name__', fn)!r} built no FlyDSL kernel (it launched none, or this "
            "process had already compiled them: run it in a fresh process)")
    return [check_build(b, offsets=offsets) for b in builds]
