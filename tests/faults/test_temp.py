"""Temporary files and directories are removed at exit: kernel variants
(`ldssan-variants-*`), the test suite's FlyDSL cache (`ldssan-test-flydsl-cache-*`) and a
campaign's workers' variants. `FLYDSL_LDSSAN_KEEP_TEMP=1` keeps them for debugging. Before,
the first two were left in the system temp directory by every run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LOAD_VARIANT = """
import sys
from ldssan.variants import Edit, load_variant
mod = load_variant(sys.argv[1], [Edit(1, "X = 2")], tag="t")
assert mod.X == 2
print(mod.__file__)
"""


def _run(code: str, *args: str, keep: bool = False, drop: tuple[str, ...] = ()) -> str:
    env = {k: v for k, v in os.environ.items() if k not in drop and k != "FLYDSL_LDSSAN_KEEP_TEMP"}
    if keep:
        env["FLYDSL_LDSSAN_KEEP_TEMP"] = "1"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300, check=True)
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture
def module_file(tmp_path):
    path = tmp_path / "tiny_mod.py"
    path.write_text("X = 1\n")
    return str(path)


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept-with-FLYDSL_LDSSAN_KEEP_TEMP"])
def test_variant_directory_is_removed_at_exit(module_file, keep):
    from ldssan import config, variants

    assert config.OPTIONS["keep_temp"].env == variants.KEEP_TEMP_ENV  # documented in `ldssan env`
    written = Path(_run(LOAD_VARIANT, module_file, keep=keep))
    assert written.parent.name.startswith("ldssan-variants-")
    try:
        assert written.parent.exists() == keep
    finally:
        shutil.rmtree(written.parent, ignore_errors=True)


@pytest.mark.parametrize("keep", [False, True], ids=["removed", "kept-with-FLYDSL_LDSSAN_KEEP_TEMP"])
def test_test_suite_flydsl_cache_is_removed_at_exit(keep):
    code = ("import os, runpy; runpy.run_path('tests/conftest.py'); "
            "print(os.environ['FLYDSL_RUNTIME_CACHE_DIR'])")
    cache = Path(_run(code, keep=keep, drop=("FLYDSL_RUNTIME_CACHE_DIR",)))
    assert cache.name.startswith("ldssan-test-flydsl-cache-")
    try:
        assert cache.exists() == keep
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_campaign_worker_variants_live_in_the_campaign_scratch_directory(module_file, tmp_path):
    # pool workers exit without atexit handlers; the parent removes the campaign's directory
    scratch = tmp_path / "campaign"
    code = ("import sys; from ldssan.mutate.worker import init_worker; init_worker(sys.argv[2]); "
            + LOAD_VARIANT.replace("\n", ";").strip(";"))
    written = Path(_run(code, module_file, str(scratch)))
    assert scratch in written.parents and written.exists()
