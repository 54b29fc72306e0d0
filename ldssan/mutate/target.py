"""The campaign protocol: how `ldssan mutate` launches a kernel it has never seen.

A kernel module opts in with a module-level function

    def ldssan_cases() -> list[ldssan.mutate.Case]: ...

Each `Case` has

* `name` — a short label ("4x4096-bf16");
* `run(module) -> output` — launch the kernel *of the given module* on fixed inputs and
  return what it produced. The module is the kernel file itself or a mutant of it (a fresh
  import of the edited source), so `run` must call `module.<launcher>(...)`, never a
  launcher imported at the top of the case file. Build the inputs inside `run` (or from a
  fixed seed), so every launch sees the same data;
* `check(output) -> bool` — True when the output matches the kernel's reference.

`run` is called inside `ldssan.hook.sanitize(...)` (the sanitizer's launch) and inside
`ldssan.runtime.emu.emulate(policy)` (the output-check launches), so it must launch through
FlyDSL as usual with CPU tensors. Keep each case to one launch of one `@flyc.jit`
function: the "instrumented IR identical to the clean kernel's" test reads the last
compiled module of every JIT function in the module after each case.

A kernel package can keep its cases apart from the kernel files instead: it registers a
factory per module name with `register_cases(module, factory)` when it is imported (the
bundled kernels do so in `ldssan.kernels.campaigns`, imported by `ldssan.kernels`). The
worker imports the kernel before it asks for cases, so its package has registered them by
then. A module's own `ldssan_cases` wins over the registry. This package never imports a
kernel package itself: kernels depend on this API, not the other way round.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from ldssan.passes.ir.errors import LdssanError

CASES_FUNCTION = "ldssan_cases"
_REGISTRY: dict[str, Callable[[], list["Case"]]] = {}


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[ModuleType], Any]
    check: Callable[[Any], bool]
    # The JIT functions `run` compiled when they are not module-level functions of the
    # mutated module (a library primitive used by a kernel of the case's own): the
    # identical-IR test reads their last compile too. A variant with no JIT function in
    # either place is never "equivalent" by IR (nothing to compare).
    jit_functions: Callable[[ModuleType], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Target:
    """A kernel to mutate: what the user named, and the source file the mutants edit."""

    spec: str  # as given: a dotted module name or a .py path
    name: str  # short label for tables (the file stem)
    path: str  # the kernel's source file
    module: str | None  # the dotted module name, when given as one
    pytest: tuple[str, ...] = ()  # FILE::TEST specs whose launches and assertions are the cases

    @property
    def import_ref(self) -> str:
        """What `ldssan.variants.load_variant` should load."""
        return self.module or self.path


class MissingKernel(LdssanError, LookupError):
    """The named kernel module or file does not exist (yet)."""


def is_file_spec(spec: str) -> bool:
    """A kernel given as a file path (else a dotted module name)."""
    return spec.endswith(".py") or os.sep in spec


def kernel_name(spec: str) -> str:
    """The name a kernel is reported under: a file's stem, or a module's last part."""
    if is_file_spec(spec):
        return os.path.splitext(os.path.basename(spec))[0]
    return spec.rsplit(".", 1)[-1]


def locate(spec: str) -> Target:
    """Find a kernel's source file without importing it (FlyDSL stays out of the parent)."""
    if is_file_spec(spec):
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise MissingKernel(f"no such kernel file: {spec}")
        return Target(spec, kernel_name(spec), path, None)
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise MissingKernel(f"no module named {spec!r}")
    return Target(spec, kernel_name(spec), found.origin, spec)


def register_cases(module: str, factory: Callable[[], list[Case]]) -> None:
    """Register the case factory of kernel module `module` (a dotted name; once per module)."""
    if _REGISTRY.get(module, factory) is not factory:
        raise ValueError(f"campaign cases for {module!r} registered twice")
    _REGISTRY[module] = factory


def registered(module: str | None, path: str) -> Callable[[], list[Case]] | None:
    """The registered case factory of a kernel (by module name, else by its source file)."""
    if module in _REGISTRY:
        return _REGISTRY[module]
    for name, factory in _REGISTRY.items():
        spec = importlib.util.find_spec(name) if _parent_exists(name) else None
        if spec is not None and spec.origin and os.path.samefile(spec.origin, path):
            return factory
    return None


def _parent_exists(name: str) -> bool:
    parent = name.rpartition(".")[0]
    return not parent or importlib.util.find_spec(parent) is not None


def cases_of(target: Target, clean: ModuleType) -> list[Case]:
    """The cases of a kernel: its own `ldssan_cases()`, else the registry's (--pytest tests
    are turned into cases by the worker, `pytest_case.py`)."""
    factory = getattr(clean, CASES_FUNCTION, None) or registered(target.module, target.path)
    if factory is None:
        raise LookupError(
            f"{target.spec} has no campaign cases: define `def {CASES_FUNCTION}() -> list[ldssan.mutate.Case]` "
            f"in the module, or register a factory with ldssan.mutate.target.register_cases")
    cases = list(factory())
    if not cases or not all(isinstance(c, Case) for c in cases):
        raise TypeError(f"{target.spec}: {CASES_FUNCTION}() must return a non-empty list of ldssan.mutate.Case")
    return cases


def import_clean(target: Target) -> ModuleType:
    if target.module:
        return importlib.import_module(target.module)
    from ldssan.variants import load_variant

    return load_variant(target.path, [], tag="clean")


_RELATIVE = re.compile(r"^(\s*from\s+)(\.+)([\w.]*)(\s+import\b)")


def package_edits(target: Target) -> tuple:
    """Edits that make a package module's relative imports absolute, one line for one line.

    A variant is imported as a top-level module from a scratch file, where `from ..x import
    y` has no parent package; a library module (`flydsl.extension.coop.block.reduce`)
    needs its imports to resolve against its real package. Line numbers stay the
    original's, so reports and mutant ids do not move."""
    if not target.module or "." not in target.module:
        return ()
    from ldssan.variants import Edit

    package = target.module.rpartition(".")[0]
    with open(target.path, encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines()
    edits = []
    for node in ast.walk(ast.parse(text, filename=target.path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            line = lines[node.lineno - 1]
            m = _RELATIVE.match(line)
            if m is None:  # `from . import (x` split oddly: refuse rather than guess
                raise MissingKernel(f"{target.path}:{node.lineno}: relative import the campaign cannot "
                                    f"make absolute: {line.strip()!r}")
            absolute = importlib.util.resolve_name(m.group(2) + m.group(3), package)
            edits.append(Edit(node.lineno, m.group(1).lstrip() + absolute + line[m.end(3):]))
    return tuple(edits)


def source_digest(path: str) -> str:
    """sha256 of a kernel file's bytes: the store's key for "the same kernel"."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
