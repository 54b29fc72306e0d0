"""The site table: for every instrumented op, where it is in the user's Python source.

Locations come from the op's MLIR location (CallSite chains flattened innermost first);
frames inside FlyDSL itself are skipped, so `file:line` is the innermost *user* frame,
and the rest of the chain is kept. The source text and the enclosing Python function are
read from the file (`linecache`, `ast`) at compile time.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.irview import Frame, convert_loc


@register_cache
@functools.lru_cache(maxsize=1)
def _framework_root() -> str:
    import flydsl

    return os.path.dirname(os.path.abspath(flydsl.__file__))


# ldssan's own executor and pass code: a wrapper of ours on the stack during a trace (e.g. the
# launch cache around a @jit helper call) is never the user's line.
_TOOL_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), d) + os.sep
                   for d in ("runtime", "passes"))


@register_cache
@functools.lru_cache(maxsize=1024)
def _is_internal(file: str) -> bool:
    if file.startswith("<") or os.path.abspath(file).startswith(_framework_root()):
        return True
    return os.path.realpath(file).startswith(_TOOL_DIRS)


def user_frames(mlir_loc) -> list[Frame]:
    out: list[Frame] = []
    for f in convert_loc(mlir_loc).chain:
        if _is_internal(f.file):
            continue
        if out and (out[-1].file, out[-1].line) == (f.file, f.line):
            continue  # a comprehension's own frame repeats its line
        out.append(f)
    return out


@register_cache
@functools.lru_cache(maxsize=256)
def _function_spans(path: str) -> tuple[tuple[int, int, str], ...]:
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((node.lineno, node.end_lineno or node.lineno, node.name))
    return tuple(spans)


def function_at(path: str, line: int) -> str:
    """Name of the innermost Python function containing `line` ('' if none)."""
    best = None
    for lo, hi, name in _function_spans(path):
        if lo <= line <= hi and (best is None or lo >= best[0]):
            best = (lo, hi, name)
    return best[2] if best else ""


def source_text(path: str, line: int) -> str:
    return linecache.getline(path, line).strip()


def site_entry(site_id: int, kind: str, op_name: str, mlir_loc, *, nbytes: int = 0,
               buffer: str | None = None) -> dict:
    frames = user_frames(mlir_loc)
    chain = [
        {"file": f.file, "line": f.line, "col": f.col, "function": function_at(f.file, f.line)}
        for f in frames
    ]
    top = chain[0] if chain else {"file": "<unknown>", "line": 0, "col": 0, "function": ""}
    return {
        "id": site_id, "kind": kind, "op": op_name, "file": top["file"], "line": top["line"],
        "col": top["col"], "function": top["function"], "chain": chain,
        "text": source_text(top["file"], top["line"]) if chain else "", "buffer": buffer,
        "bytes": nbytes,
    }
