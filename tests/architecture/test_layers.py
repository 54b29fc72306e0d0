"""The layers as docs/architecture.md draws them, checked on every run: import-linter's
contracts from pyproject.toml, and the size rule for source modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ldssan import LAYERS

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("ldssan", "runtime", "passes")  # kernels/ are exempt (campaigns mutate one file)
MAX_LINES = 600


def test_import_contracts_hold():
    """`lint-imports` as a user runs it from the checkout (the layer links make the layers
    visible to its graph builder)."""
    pytest.importorskip("importlinter")
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
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
    """The only links are ldssan/{runtime,passes,kernels} -> the top-level layer folders (for tools
    that walk the package folder), and modules load from the top-level path, the one to edit."""
    import importlib

    links = {str(p.relative_to(ROOT)): p.resolve() for top in ("ldssan", *LAYERS.values())
             for p in (ROOT / top).rglob("*") if p.is_symlink()}
    assert links == {f"ldssan/{name.rsplit('.', 1)[1]}": (ROOT / folder).resolve() for name, folder in LAYERS.items()}
    for name, folder in LAYERS.items():
        assert Path(importlib.import_module(name).__file__) == ROOT / folder / "__init__.py"


def _modules():
    for top in SOURCE_DIRS:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_no_source_module_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _user_facing_modules() -> set[str]:
    """Every direct child of the `ldssan` package folder: the user-facing layer."""
    return {f"ldssan.{p.stem}" for p in (ROOT / "ldssan").iterdir()
            if p.name != "__init__.py" and not p.is_symlink() and (p.suffix == ".py" or (p / "__init__.py").is_file())}


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
