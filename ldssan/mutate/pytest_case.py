"""Campaign cases taken from a pytest test: `ldssan mutate kernel.py --pytest tests/test_x.py::test_y`.

A kernel file with a test but no `ldssan_cases()` is mutated as is: each named test function
(each parameter set of its `@pytest.mark.parametrize` marks) is one `Case`. Its launches
are the case's launches and its assertions are the output check: the test passing is a
correct output, an `AssertionError` a wrong one; any other exception is a launch that
raised (never a detection), as for hand-written cases.

How the mutant reaches the test: while the test's file is imported and its function runs,
`sys.modules` maps the kernel's module names to the variant (the name the test imports it
by — the file stem, or the dotted name the campaign was given — and any module already
loaded from that file). The test file is imported once per variant, so its `@flyc.jit`
functions compile once and the K output-check launches reuse the build.

The test runs as under `FLYDSL_LDSSAN=1 pytest`: torch's GPU device is the virtual gfx1250
while the test file is imported and while the test runs (`hook.torch_device`), so a
module-level `skipif(not torch.cuda.is_available())` gate passes; its output is captured,
and its package root is first on sys.path (`package_root`). The test's verdict is
pytest's: it passes, or fails its check (`AssertionError`, `pytest.fail`, `SystemExit`);
anything else it raises is a launch that raised.

Supported: test functions whose every argument comes from `parametrize` marks (fixtures
cannot be provided outside pytest: such a test is refused with `PytestCaseError` naming
the test and the argument). `skip` / `skipif` marks (the module's `pytestmark` and the
function's) are evaluated as pytest does; a test that is skipped, by a mark or by
`pytest.skip()` at import or while running, is a `TestSkipped` with pytest's reason —
never run as if it had passed.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import io
import itertools
import os
import platform
import sys
from dataclasses import dataclass
from types import ModuleType

from ldssan.passes.ir.errors import UsageError
from ldssan.scoped import scoped_items

from .target import Case, Target


class PytestCaseError(UsageError, LookupError):
    """A --pytest test the campaign cannot take as a case (named, with its file and line)."""


class TestSkipped(PytestCaseError):
    """The --pytest test was skipped (a mark, or `pytest.skip()`), with pytest's reason."""

    __test__ = False  # not a test class for pytest's collection


class TestExited(PytestCaseError):
    """The --pytest test called `pytest.exit()` or `pytest.xfail()`: no verdict to score."""

    __test__ = False


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False

    passed: bool
    message: str = ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


@contextlib.contextmanager
def _as_pytest(where: str):
    """Run a test file's code: its output captured, and pytest's outcome exceptions
    (BaseExceptions, which pickle badly and would end a worker) made named
    `PytestCaseError`s with pytest's reason."""
    import pytest

    try:  # the test's prints are captured, as pytest's default does (K launches would repeat them)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    except pytest.skip.Exception as exc:
        raise TestSkipped(f"{where} was skipped: {_first_line(exc)}") from None
    except (pytest.exit.Exception, pytest.xfail.Exception) as exc:
        raise TestExited(f"{where}: {type(exc).__name__}: {_first_line(exc)}") from None


def _skip_reason(marks, namespace: dict) -> str | None:
    """pytest's reason to skip under these `skip` / `skipif` marks, or None (conditions as
    pytest evaluates them: a bool, or a string run in the test module's namespace)."""
    for mark in marks:
        if mark.name == "skip":
            return mark.kwargs.get("reason") or (mark.args[0] if mark.args else "unconditional skip")
        if mark.name != "skipif":
            continue
        conditions = mark.args or ((mark.kwargs["condition"],) if "condition" in mark.kwargs else ())
        if not conditions:
            return mark.kwargs.get("reason") or "unconditional skip"
        for cond in conditions:
            if isinstance(cond, str):
                cond = eval(cond, {"os": os, "sys": sys, "platform": platform, **namespace})  # noqa: S307 - as pytest
            if cond:
                return mark.kwargs.get("reason") or "skipif condition true"
    return None


def _marks(mod: ModuleType, func) -> list:
    marks = getattr(mod, "pytestmark", [])
    marks = list(marks) if isinstance(marks, (list, tuple)) else [marks]
    return [*marks, *getattr(func, "pytestmark", [])]


def split_spec(spec: str) -> tuple[str, str]:
    """`path/test_x.py::test_y` -> (absolute path, function name); checked without importing."""
    path, sep, func = spec.partition("::")
    if not sep or not func or "::" in func or "[" in func:
        raise PytestCaseError(f"--pytest {spec!r}: expected FILE.py::TEST_FUNCTION (a module-level test function)")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise PytestCaseError(f"--pytest {spec!r}: no such file {path}")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func for n in tree.body):
        raise PytestCaseError(f"--pytest {spec!r}: {os.path.basename(path)} defines no module-level function {func!r}")
    return path, func


def pytest_failed() -> type:
    """pytest's exception of `pytest.fail()` (a failed check, like an assertion)."""
    import pytest

    return pytest.fail.Exception


def package_root(path: str) -> tuple[str, str]:
    """(the folder pytest puts first on sys.path for `path`, `path`'s dotted module name from
    there): the first folder up from the file that is not a package (pytest's default
    `prepend` import mode), so `tests/kernels/test_x.py` in a package tree imports
    `kernels.norm.y` and `tests.test_common` from the checkout root, as under pytest."""
    folder = os.path.dirname(os.path.abspath(path))
    parts = [os.path.splitext(os.path.basename(path))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return folder, ".".join(parts)


def use_import_roots(target: Target) -> None:
    """sys.path as pytest has it for the target's test files (their package roots first)."""
    for spec in target.pytest:
        root = package_root(spec.partition("::")[0])[0]
        if root not in sys.path:
            sys.path.insert(0, root)


def _kernel_names(target: Target) -> set[str]:
    """The names the test may import the kernel by: the campaign's, the file stem, its dotted
    name in its package tree, and any module already loaded from the file."""
    names = {target.module} if target.module else {os.path.splitext(os.path.basename(target.path))[0]}
    names.add(package_root(target.path)[1])
    for name, mod in list(sys.modules.items()):
        origin = getattr(mod, "__file__", None)
        if origin and os.path.exists(origin) and os.path.samefile(origin, target.path):
            names.add(name)
    return names


def _substituted(names: set[str], variant: ModuleType):
    return scoped_items(sys.modules, dict.fromkeys(names, variant))


def _param_sets(func) -> list[tuple[str, dict]]:
    """(id, kwargs) for every combination of the function's parametrize marks."""
    axes = []
    for mark in getattr(func, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        argnames, argvalues = mark.args[0], mark.args[1]
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        ids = mark.kwargs.get("ids")
        axis = []
        for i, value in enumerate(argvalues):
            pid = getattr(value, "id", None)
            values = getattr(value, "values", None)  # a pytest.param(...)
            if values is None:
                values = (value,) if len(names) == 1 else tuple(value)
            if pid is None and isinstance(ids, (list, tuple)) and i < len(ids):
                pid = str(ids[i])
            axis.append((pid or "-".join(str(v) for v in values), dict(zip(names, values))))
        axes.append(axis)
    out = []
    for combo in itertools.product(*axes):
        kwargs = {}
        for _, kw in combo:
            kwargs.update(kw)
        out.append(("-".join(pid for pid, _ in combo), kwargs))
    return out


def _check_signature(func, kwargs: dict, where: str) -> None:
    for name, p in inspect.signature(func).parameters.items():
        if name not in kwargs and p.default is inspect.Parameter.empty \
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise PytestCaseError(f"{where}: argument {name!r} is a pytest fixture; a campaign case can only "
                                  f"fill parametrize arguments (write ldssan_cases() for this kernel)")


class _TestFile:
    """One test file, imported once per kernel variant with the variant substituted."""

    def __init__(self, path: str, target: Target) -> None:
        self.path, self.target = path, target
        self.names = _kernel_names(target)
        self.loaded: dict[str, ModuleType] = {}  # variant module name -> the test module importing it

    def module_for(self, variant: ModuleType) -> ModuleType:
        from ldssan.hook import torch_device

        key = variant.__name__
        if key not in self.loaded:
            folder = package_root(self.path)[0]
            if folder not in sys.path:  # pytest's default (prepend) import mode does the same
                sys.path.insert(0, folder)
            name = f"_ldssan_pytest_{os.path.splitext(os.path.basename(self.path))[0]}_{len(self.loaded)}_{key}"
            spec = importlib.util.spec_from_file_location(name, self.path)
            mod = importlib.util.module_from_spec(spec)
            with torch_device(), _substituted(self.names, variant), _as_pytest(os.path.basename(self.path)):
                spec.loader.exec_module(mod)
            self.loaded[key] = mod
        return self.loaded[key]

    def run(self, variant: ModuleType, func: str, kwargs: dict) -> TestOutcome:
        from ldssan.hook import torch_device

        mod = self.module_for(variant)
        where = f"{os.path.basename(self.path)}::{func}"
        reason = _skip_reason(_marks(mod, getattr(mod, func)), vars(mod))
        if reason is not None:
            raise TestSkipped(f"{where} was skipped: {reason}")
        with torch_device(), _substituted(self.names, variant), _as_pytest(where):
            try:
                getattr(mod, func)(**kwargs)
            except (AssertionError, pytest_failed(), SystemExit) as exc:  # the test failed its check
                return TestOutcome(False, _first_line(exc))
        return TestOutcome(True)

    def jit_functions(self, variant: ModuleType) -> dict:
        from flydsl.compiler.jit_function import JitFunction

        mod = self.module_for(variant)
        return {f"test:{n}": o for n, o in vars(mod).items() if isinstance(o, JitFunction)}


def pytest_cases(target: Target, clean: ModuleType) -> list[Case]:
    """The cases of `target.pytest` (FILE::FUNC specs), one per parameter set."""
    cases = []
    files: dict[str, _TestFile] = {}
    for spec in target.pytest:
        path, func_name = split_spec(spec)
        tf = files.setdefault(path, _TestFile(path, target))
        func = getattr(tf.module_for(clean), func_name)
        where = f"{os.path.basename(path)}:{func.__code__.co_firstlineno} {func_name}"
        for pid, kwargs in _param_sets(func) or [("", {})]:
            _check_signature(func, kwargs, where)
            label = f"{func_name}[{pid}]" if pid else func_name
            cases.append(Case(label, run=lambda m, tf=tf, f=func_name, kw=kwargs: tf.run(m, f, kw),
                              check=lambda out: isinstance(out, TestOutcome) and out.passed,
                              jit_functions=tf.jit_functions))
    return cases
