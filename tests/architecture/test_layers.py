"""The layers as docs/architecture.md draws them, checked on every run: import-linter's
contracts from pyproject.toml, and the size rule for source modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("ldssan", "runtime", "passes")  # kernels/ are exempt (campaigns mutate one file)
MAX_LINES = 600


def test_import_contracts_hold():
    pytest.importorskip("importlinter")
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout


def _modules():
    for top in SOURCE_DIRS:
        yield from sorted((ROOT / top).rglob("*.py"))  # rglob does not enter ldssan/'s symlinks


def test_no_source_module_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
