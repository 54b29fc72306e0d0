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

Supported: test functions whose every argument comes from `parametrize` marks (fixtures
cannot be provided outside pytest: such a test is refused with `PytestCaseError` naming
the test and the argument). Marks such as `skipif` are not evaluated: the test is run.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import itertools
import os
import sys
from dataclasses import dataclass
from types import ModuleType

from ldssan.scoped import scoped_items

from .target import Case, Target


class PytestCaseError(LookupError):
    """A --pytest test the campaign cannot take as a case (named, with its file and line)."""


@dataclass(frozen=True)
class TestOutcome:
    passed: bool
    message: str = ""


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


def _kernel_names(target: Target) -> set[str]:
    names = {target.module} if target.module else {os.path.splitext(os.path.basename(target.path))[0]}
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
        key = variant.__name__
        if key not in self.loaded:
            folder = os.path.dirname(self.path)
            if folder not in sys.path:  # pytest's rootdir-less import mode does the same
                sys.path.insert(0, folder)
            name = f"_ldssan_pytest_{os.path.splitext(os.path.basename(self.path))[0]}_{len(self.loaded)}_{key}"
            spec = importlib.util.spec_from_file_location(name, self.path)
            mod = importlib.util.module_from_spec(spec)
            with _substituted(self.names, variant):
                spec.loader.exec_module(mod)
            self.loaded[key] = mod
        return self.loaded[key]

    def run(self, variant: ModuleType, func: str, kwargs: dict) -> TestOutcome:
        mod = self.module_for(variant)
        with _substituted(self.names, variant):
            try:
                getattr(mod, func)(**kwargs)
            except AssertionError as exc:  # the test's own check failed: a wrong output
                return TestOutcome(False, (str(exc).strip().splitlines() or [""])[0][:200])
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
