"""The fault table ("What ldssan does when …", in docs/faults.md: `table.TARGET`) is
`tests/faults/table.py` rendered, and every test a row names exists (so a row cannot outlive
its test, nor the page drift from it)."""

from __future__ import annotations

import ast
from pathlib import Path

from . import table

ROOT = Path(__file__).resolve().parents[2]


REGEN = "regenerate it with the snippet in docs/contributing.md (\"The fault table\")"


def _section(page: str) -> str:
    start = page.index(table.TITLE)
    end = page.find("\n## ", start + len(table.TITLE))
    return page[start:end if end >= 0 else len(page)].rstrip()


def test_the_docs_page_carries_the_generated_table():
    page = (ROOT / table.TARGET).read_text(encoding="utf-8")
    assert table.TITLE in page, f"{table.TARGET} has no fault table: {REGEN}"
    assert _section(page) == table.render(), f"{table.TARGET}: the fault table is stale: {REGEN}"


def test_the_readme_does_not_carry_a_second_copy():
    # one copy only: a second one would go stale unchecked
    assert table.TITLE not in (ROOT / "README.md").read_text(encoding="utf-8")


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
    assert files <= named, f"fault tests without a row in {table.TARGET}: {sorted(files - named)}"
