"""Kernel variants with one-line source edits: the raw material of planted-bug tests,
the demo, and mutation campaigns.

A variant is the kernel module's source with some lines replaced (or deleted), written
to a temporary file and imported under a fresh name, so FlyDSL traces it anew. Each
variant file's `Origin` (the original file and the edited lines) is registered, so a report
names the original file and line and shows the change (`origin_of`); an edit replaces one
line by one line, so line numbers are the original's. The temporary directory is removed
when the process exits (`FLYDSL_LDSSAN_KEEP_TEMP=1` keeps it, for debugging).
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from types import ModuleType


_DELETED = "pass  # ldssan variant: deleted"  # what a deleted statement becomes


@dataclass(frozen=True)
class Edit:
    line: int  # 1-based line of the original source
    text: str | None  # the replacement line (without newline); None deletes the statement

    def apply(self, old: str) -> str:
        indent = old[: len(old) - len(old.lstrip())]
        if self.text is None:
            return f"{indent}{_DELETED} `{old.strip()}`"
        return indent + self.text.strip()


_DIR = None


KEEP_TEMP_ENV = "FLYDSL_LDSSAN_KEEP_TEMP"  # an option of ldssan.config, which validates it


def keep_temp() -> bool:
    """FLYDSL_LDSSAN_KEEP_TEMP is set to anything but an off value. Read raw, not through
    ldssan.config: this module is imported by kernels' campaign cases, which must not reach
    the runtime that config's policy parser imports. Any unclear value keeps the files."""
    return os.environ.get(KEEP_TEMP_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _remove(path: str, pid: int) -> None:
    # Only the process that made the directory removes it (a fork inherits atexit handlers).
    if os.getpid() == pid and not keep_temp():
        shutil.rmtree(path, ignore_errors=True)


def scratch_dir(prefix: str) -> str:
    """A new temporary directory, removed when this process exits unless
    FLYDSL_LDSSAN_KEEP_TEMP=1."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(_remove, path, os.getpid())
    return path


def use_variant_dir(path: str) -> None:
    """Write variants under `path` (a directory someone else cleans up, e.g. a campaign's
    scratch directory: its worker processes exit without running atexit handlers)."""
    global _DIR
    os.makedirs(path, exist_ok=True)
    _DIR = path


def _variant_dir() -> str:
    global _DIR
    if _DIR is None:
        _DIR = scratch_dir("ldssan-variants-")
    return _DIR


def source_of(module: ModuleType | str) -> tuple[str, str]:
    """(path, text) of a module object, a dotted module name, or a file path."""
    if isinstance(module, str) and os.path.exists(module):
        path = module
    else:
        mod = importlib.import_module(module) if isinstance(module, str) else module
        path = inspect.getsourcefile(mod)
    with open(path, encoding="utf-8") as f:
        return path, f.read()


# -- where a variant came from ------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """The original source of a variant file and its edited lines (line numbers are the
    same in both: an edit replaces one line by one line)."""

    path: str  # the original file
    changes: tuple[tuple[int, str, str], ...] = ()  # (line, old text, new text), stripped

    def describe(self) -> list[str]:
        """`line 57: `fx.gpu.barrier()` -> (deleted)`, one per edited line."""
        out = []
        for line, old, new in self.changes:
            shown = "(deleted)" if new.startswith(_DELETED) else f"`{new}`"
            out.append(f"line {line}: `{old}` -> {shown}")
        return out


_ORIGINS: dict[str, Origin] = {}


def _key(path: str) -> str:
    return os.path.realpath(path)


def register_origin(variant_path: str, origin: Origin) -> None:
    """Remember that `variant_path` is `origin` edited (load_variant does this; a report
    read back from JSON does it for the variants it names)."""
    _ORIGINS[_key(variant_path)] = origin


def origin_of(path: str | None) -> Origin | None:
    """The origin of a variant file this process wrote or read a report of, else None."""
    if not path or not _ORIGINS:
        return None
    return _ORIGINS.get(_key(path))


def original_path(path: str) -> str:
    """The file a report should name for `path`: the original of a variant, else `path`."""
    origin = origin_of(path)
    return path if origin is None else origin.path


def _compose(path: str, changes: dict[int, tuple[str, str]]) -> Origin:
    """A variant of a variant names the first original, with both sets of edits (a line
    edited twice shows its original text and its last new text)."""
    base = origin_of(path)
    merged = {n: (old, new) for n, old, new in base.changes} if base is not None else {}
    for n, (old, new) in changes.items():
        merged[n] = (merged[n][0] if n in merged else old, new)
    return Origin(path if base is None else base.path,
                  tuple((n, old, new) for n, (old, new) in sorted(merged.items()) if old != new))


def load_variant(module: ModuleType | str, edits: list[Edit], *, tag: str = "variant") -> ModuleType:
    path, text = source_of(module)
    lines = text.splitlines()
    changes: dict[int, tuple[str, str]] = {}
    for e in edits:
        if not 1 <= e.line <= len(lines):
            raise ValueError(f"edit line {e.line} is outside {path} ({len(lines)} lines)")
        if e.text is not None and ("\n" in e.text or "\r" in e.text):
            # one line for one line keeps every other line number the original's
            raise ValueError(f"edit of {path}:{e.line} spans several lines: {e.text!r}")
        old = lines[e.line - 1]
        lines[e.line - 1] = e.apply(old)
        changes[e.line] = (changes.get(e.line, (old.strip(), ""))[0], lines[e.line - 1].strip())
    new = "\n".join(lines) + "\n"
    ast.parse(new, filename=path)  # an edit that breaks the syntax is the caller's error
    digest = hashlib.sha256(new.encode()).hexdigest()[:10]
    stem = os.path.splitext(os.path.basename(path))[0]
    name = f"_ldssan_{tag}_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    out = os.path.join(_variant_dir(), f"{name}.py")
    with open(out, "w", encoding="utf-8") as f:
        f.write(new)
    register_origin(out, _compose(path, changes))
    spec = importlib.util.spec_from_file_location(name, out)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def find_calls(module: ModuleType | str, dotted: str, *, within: str | None = None) -> list[int]:
    """Lines of statements that are exactly a call to `dotted` (e.g. 'fx.gpu.barrier'),
    optionally only inside the function named `within`."""
    path, text = source_of(module)
    tree = ast.parse(text, filename=path)
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and (within is None or n.name == within)] if within else [tree]
    lines = []
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                    and ast.unparse(node.value.func) == dotted:
                lines.append(node.lineno)
    return sorted(set(lines))
