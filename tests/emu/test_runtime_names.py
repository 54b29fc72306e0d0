"""Every `R.<name>` an op emitter can write into generated code exists in the run-time
package: a missing one would only show up as an AttributeError on the first kernel that uses
the op. The emitters' sources are scanned (AST, every string literal, f-string parts too)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ldssan.runtime.emu import rt

EMU = Path(rt.__file__).resolve().parents[1]
EMITTER_SOURCES = sorted((EMU / "ops").glob("*.py")) + [EMU / "codegen.py"]
_NAME = re.compile(r"(?<![\w.])R\.([A-Za-z_]\w*)")
_DYNAMIC = re.compile(r"(?<![\w.])R\.$")


def runtime_names(source: str) -> tuple[set[str], list[int]]:
    """(names used as `R.<name>` in string literals, lines where the name is built at run
    time, `f"R.{x}"`, which a scan cannot check)."""
    names: set[str] = set()
    dynamic: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for part, nxt in zip(parts, parts[1:]):
                if isinstance(part, ast.Constant) and isinstance(nxt, ast.FormattedValue) \
                        and _DYNAMIC.search(part.value):
                    dynamic.append(node.lineno)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(_NAME.findall(node.value))
    return names, dynamic


def _all_names() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in EMITTER_SOURCES:
        names, dynamic = runtime_names(path.read_text())
        assert not dynamic, f"{path.name}: run-time name built dynamically at lines {dynamic}; spell it out"
        for n in names:
            found.setdefault(n, []).append(path.name)
    return found


def test_every_runtime_name_an_emitter_writes_exists():
    found = _all_names()
    missing = {n: files for n, files in found.items() if not hasattr(rt, n)}
    assert not missing, f"emitters call run-time functions that do not exist: {missing}"


def test_the_scan_sees_the_emitters():
    found = _all_names()
    # the two that were once missing, and one from each run-time module
    for name in ("tuple_set", "bpermute", "select", "divsi", "fconv", "lds_load", "shuffle", "AsyncCopy",
                 "tdm_copy", "atomic_rmw", "wmma", "extsi", "bitcast_lanes", "lds_store"):
        assert name in found, name
    assert len(found) >= 50


def test_the_scan_reports_missing_and_dynamic_names():
    src = '''
def emit(t, op):
    t.out(f"{t.v(1)} = R.no_such_function(ctx, {t.mask})")
    t.out(f"{t.v(2)} = R.{op.name}(ctx)")
    x = "np.asarray(R.lanes(v1, L))"
'''
    names, dynamic = runtime_names(src)
    assert names == {"no_such_function", "lanes"}
    assert dynamic == [4]
    assert not hasattr(rt, "no_such_function")


def test_exported_names_are_the_runtime_surface():
    # __all__ is what generated code may call: each name is defined, none twice
    assert len(rt.__all__) == len(set(rt.__all__))
    assert all(hasattr(rt, n) for n in rt.__all__)
    assert set(_all_names()) <= set(rt.__all__)
