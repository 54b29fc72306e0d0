"""The README's "What ldssan does when …" table is `tests/faults/table.py` rendered, and every
test a row names exists (so a row cannot outlive its test, nor the README drift from it)."""

from __future__ import annotations

import ast
from pathlib import Path

from . import table

ROOT = Path(__file__).resolve().parents[2]


def _section(readme: str) -> str:
    start = readme.index(table.TITLE)
    end = readme.find("\n## ", start + len(table.TITLE))
    return readme[start:end if end >= 0 else len(readme)].rstrip()


def test_readme_carries_the_generated_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert table.TITLE in readme, "README.md has no fault table: paste `python -m tests.faults.table`"
    assert _section(readme) == table.render(), "README fault table is stale: paste `python -m tests.faults.table`"


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_row_names_tests_that_exist():
    for when, _does, tests in table.ROWS:
        assert tests, f"row without a test: {when}"
        for ref in tests:
            file, func = ref.split("::", 1)
            assert (ROOT / file).is_file(), f"{ref}: no such file"
            assert func in _test_functions(ROOT / file), f"{ref}: no such test"


def test_every_fault_test_file_has_a_row():
    named = {ref.split("::", 1)[0] for _w, _d, tests in table.ROWS for ref in tests}
    here = Path(__file__).parent
    files = {f"tests/faults/{p.name}" for p in here.glob("test_*.py") if p.name != Path(__file__).name}
    assert files <= named, f"fault tests without a README row: {sorted(files - named)}"
