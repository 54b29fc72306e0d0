"""import-linter over ldssan as installed: `python -m tests.architecture.lint_imports`.

The engine layers live in the repository's top-level folders (pyproject.toml's package-dir maps
them under `ldssan`), which import-linter's graph builder cannot see: it walks the package's
own folder. So the contracts run against a staging folder in which `ldssan/` holds links to the
package's files and to each layer folder — the layout a wheel installs — and nothing in the
checkout is linked or copied."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stage(into: Path) -> Path:
    """`into/ldssan` laid out as installed; returns `into`."""
    from ldssan import LAYERS

    pkg = into / "ldssan"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "ldssan").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in LAYERS.items():
        (pkg / name.rsplit(".", 1)[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return into


def run(staging: Path) -> subprocess.CompletedProcess:
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))")
    env = dict(os.environ, PYTHONPATH=str(staging))
    return subprocess.run([sys.executable, "-c", code], cwd=staging, env=env,
                          capture_output=True, text=True, timeout=120)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ldssan-layers-") as tmp:
        proc = run(stage(Path(tmp)))
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
