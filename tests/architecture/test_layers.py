"""The layers as docs/architecture.md draws them, checked on every run: import-linter's
contracts from pyproject.toml, and the size rule for source modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldssan import LAYERS
from tests.architecture import lint_imports

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("ldssan", "runtime", "passes")  # kernels/ are exempt (campaigns mutate one file)
MAX_LINES = 600


def test_import_contracts_hold(tmp_path):
    pytest.importorskip("importlinter")
    proc = lint_imports.run(lint_imports.stage(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout
    assert "KEPT" in proc.stdout  # the contracts ran (a graph missing a layer is an error, not a pass)


def test_checkout_layers_match_the_packaging():
    """`ldssan.LAYERS` (how a checkout maps the layer folders) is pyproject's package-dir, and
    every package folder under them is listed in `packages` (else a wheel would leave it out)."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {k: v for k, v in tool["package-dir"].items() if k != "ldssan"} == LAYERS
    on_disk = {".".join((name, *init.parent.relative_to(ROOT / folder).parts))
               for name, folder in [("ldssan", "ldssan"), *LAYERS.items()]
               for init in (ROOT / folder).rglob("__init__.py")}
    assert on_disk == set(tool["packages"])


def test_each_source_file_has_one_path():
    """No folder of the package is a link (tracebacks and tools see the path that is edited)."""
    links = [str(p.relative_to(ROOT)) for top in ("ldssan", *LAYERS.values())
             for p in (ROOT / top).rglob("*") if p.is_symlink()]
    assert not links


def _modules():
    for top in SOURCE_DIRS:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_no_source_module_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _user_facing_modules() -> set[str]:
    """Every direct child of the `ldssan` package folder: the user-facing layer."""
    return {f"ldssan.{p.stem}" for p in (ROOT / "ldssan").iterdir()
            if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").is_file())}


def test_layer_contracts_name_every_user_facing_module():
    """A module added to ldssan/ is covered by the contracts that keep the lower layers from
    importing it: the forbidden lists must name all of them (import-linter has no 'all but')."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    lower = [c for c in contracts if c.get("source_modules") in (["ldssan.runtime"], ["ldssan.passes"])]
    assert len(lower) == 2
    for contract in lower:
        missing = _user_facing_modules() - set(contract["forbidden_modules"])
        assert not missing, f"{contract['name']!r} does not forbid {sorted(missing)}"
