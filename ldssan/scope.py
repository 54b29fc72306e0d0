"""Which kernels are checked: `FLYDSL_LDSSAN_KERNELS`, `--ldssan-kernels`, the ini option
`ldssan_kernels`, `enable(kernels=...)`, `sanitize(kernels=...)` and the per-test marker
`@pytest.mark.ldssan(kernels=..., check=False)` (docs/scope-and-suppressions.md).

A scope is a comma-separated list of patterns; each is a shell pattern (`fnmatch`, case
sensitive) over one property of a kernel, chosen by its prefix:

    NAME             the kernel's name: its symbol (`neighbour_0`) or the Python function
                     it was traced from (the symbol without FlyDSL's `_<n>` suffix)
    file:PATH        the file that defines the kernel: its absolute path or any trailing
                     part of it (`file:test_kernels.py`, `file:kernels/*.py`)
    module:DOTTED    the Python module that defines the kernel (`module:mypkg.ops.*`)

A leading `-` excludes. A kernel is in scope when it matches some included pattern (or
there is none) and no excluded one. A host call's module is instrumented when any of its
kernels is in scope; otherwise it is built plain and run on the virtual gfx1250
(its outputs stay right), and the launch is counted as not checked.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ldssan.runtime.arguments import ConfigError

KINDS = ("name", "file", "module")
_SUFFIX = re.compile(r"_\d+$")  # FlyDSL names a kernel's symbol `<function>_<kernel id>`


@dataclass(frozen=True)
class Pattern:
    kind: str  # one of KINDS
    glob: str
    exclude: bool

    def matches(self, name: str, file: str) -> bool:
        if self.kind == "name":
            return any(fnmatch.fnmatchcase(n, self.glob) for n in (name, _SUFFIX.sub("", name)))
        if self.kind == "file":
            return file_matches(self.glob, file)
        return any(fnmatch.fnmatchcase(m, self.glob) for m in _modules_of(file))

    @property
    def text(self) -> str:
        return ("-" if self.exclude else "") + ("" if self.kind == "name" else f"{self.kind}:") + self.glob


def file_matches(glob: str, file: str) -> bool:
    """`glob` matches the path `file` or a trailing part of it (whole components)."""
    if not file:
        return False
    parts = os.path.abspath(file).replace(os.sep, "/").split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[i:]), glob) for i in range(len(parts)))


def _modules_of(file: str) -> list[str]:
    """The imported modules whose source is `file` (a test file may be imported twice)."""
    if not file:
        return []
    path = os.path.abspath(file)
    return [name for name, mod in list(sys.modules.items())
            if isinstance(getattr(mod, "__file__", None), str) and os.path.abspath(mod.__file__) == path]


@dataclass(frozen=True)
class Scope:
    """The kernels a sanitized run checks. Hashable: it is part of the launch cache key.
    `source` names where it came from (the summary says which scope left launches out);
    `within`: an outer scope this one narrows (a test's marker inside the session's)."""

    patterns: tuple[Pattern, ...]
    source: str
    within: "Scope | None" = None

    def covers(self, kernels: Iterable[tuple[str, str]]) -> bool:
        """Whether a module with these kernels ((symbol, defining file) each) is checked."""
        return self.refuser(list(kernels)) is None

    def refuser(self, kernels: list[tuple[str, str]]) -> "Scope | None":
        """The innermost-first scope that leaves every kernel out, or None (checked)."""
        if not any(self._own(name, file) for name, file in kernels):
            return self
        return None if self.within is None else self.within.refuser(kernels)

    def _own(self, name: str, file: str) -> bool:
        included = [p for p in self.patterns if not p.exclude]
        if included and not any(p.matches(name, file) for p in included):
            return False
        return not any(p.matches(name, file) for p in self.patterns if p.exclude)

    def skipped(self, kernels: list[tuple[str, str]]) -> None:
        """Called by the front end for a launch this scope built plain: counted in SKIPPED."""
        refuser = self.refuser(kernels) or self
        SKIPPED.add(refuser.source, tuple(name for name, _file in kernels))

    def narrowed(self, inner: "Scope") -> "Scope":
        """`inner` checked only where this scope also checks."""
        return Scope(inner.patterns, inner.source, within=self)

    @property
    def text(self) -> str:
        return ",".join(p.text for p in self.patterns)


NOTHING = "checking off"  # the source of a test's `ldssan(False)` scope


def parse(text: "str | Iterable[str]", source: str) -> Scope | None:
    """Patterns (a comma-separated string, or a list of them) -> a `Scope`; None when there
    are none (every kernel). A pattern that is empty, a lone `-`, or has nothing after its
    prefix is a ValueError saying which (its caller names the option: `source`)."""
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in str(t).split(",")]
    items = [p.strip() for p in items]
    if all(not p for p in items):
        return None
    patterns = []
    for raw in items:
        if not raw:
            raise ValueError("an empty pattern (two commas, or a trailing comma)")
        body = raw[1:].strip() if raw.startswith("-") else raw
        kind, glob = "name", body
        for k in KINDS[1:]:
            if body.startswith(k + ":"):
                kind, glob = k, body[len(k) + 1:].strip()
        if not glob:
            raise ValueError(f"pattern {raw!r} has nothing to match after its prefix")
        patterns.append(Pattern(kind, glob, raw.startswith("-")))
    return Scope(tuple(patterns), source)


def nothing(source: str = NOTHING) -> Scope:
    """The scope of a test marked `ldssan(False)`: every kernel left out."""
    return Scope((Pattern("name", "*", exclude=True),), source)


class SkipLog:
    """Launches built plain because a scope left them out: (scope source, kernels) each,
    since the last `take` (the pytest plugin takes it around each test)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[str, tuple[str, ...]]] = []

    def add(self, source: str, kernels: tuple[str, ...]) -> None:
        with self._lock:
            self._items.append((source, kernels))

    def take(self) -> list[tuple[str, tuple[str, ...]]]:
        with self._lock:
            out, self._items = self._items, []
        return out


SKIPPED = SkipLog()


def argument(fn: str, value, source: str | None = None) -> Scope | None:
    """`enable(kernels=...)` / `sanitize(kernels=...)`: a `Scope`, patterns (a string or a
    list of strings) or None; a bad value is an `ArgumentValueError` naming the call."""
    from ldssan.runtime.arguments import ArgumentTypeError, ArgumentValueError

    if value is None or isinstance(value, Scope):
        return value
    if not isinstance(value, str) and not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
        raise ArgumentTypeError(f"ldssan: {fn}(kernels={value!r}): expected a string of patterns or a list of them")
    try:
        return parse(value, source or f"{fn}(kernels=...)")
    except ValueError as exc:
        raise ArgumentValueError(f"ldssan: {fn}(kernels={value!r}): {exc}") from None


def refuse_hardware(scope: Scope | None, engine: str) -> None:
    """On a gfx1250 HIP device every launch runs the linked build: a plain one cannot be
    launched beside it, so a scope there is a usage error, not a silently wider check."""
    if scope is not None and engine == "hardware":
        raise ConfigError(f"ldssan: {scope.source}={scope.text!r}: a kernel scope is not supported on a gfx1250 "
                          "HIP device (FLYDSL_LDSSAN_DEVICE=hardware, or auto with one present); "
                          "use FLYDSL_LDSSAN_DEVICE=virtual or emulated")
