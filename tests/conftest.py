"""Test-suite setup: FlyDSL's compile cache goes to a fresh directory for the run, so the
suite never reads (or pollutes) the user's ~/.flydsl cache."""

import os

import pytest

if "FLYDSL_RUNTIME_CACHE_DIR" not in os.environ:
    from ldssan.variants import scratch_dir  # removed at exit unless FLYDSL_LDSSAN_KEEP_TEMP=1

    os.environ["FLYDSL_RUNTIME_CACHE_DIR"] = scratch_dir("ldssan-test-flydsl-cache-")


@pytest.fixture(autouse=True, scope="module")
def _fresh_runtime_caches():
    """Every test file starts from empty runtime caches (translations, parsed modules, engine
    footprints): a verdict never depends on which file ran before. Per module, not per test,
    so a file's kernels are translated once."""
    from ldssan.runtime import reset_caches

    reset_caches()
    yield


def pytest_terminal_summary(terminalreporter):
    """Print how many planted RMSNorm bugs a one-launch output check caught (issue #3)."""
    import sys

    mod = sys.modules.get("tests.sanitizer.test_rmsnorm_bugs") or sys.modules.get("test_rmsnorm_bugs")
    if mod is None:
        return
    lines = mod.summary_lines()
    if lines:
        terminalreporter.write_sep("-", "ldssan planted bugs")
        for line in lines:
            terminalreporter.write_line(line)
