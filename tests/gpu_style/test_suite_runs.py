"""The GPU-style suite must execute in CI: in a child pytest under FLYDSL_LDSSAN=1 every test
runs (none skips) on the virtual gfx1250 and launches at least one sanitized kernel; without
ldssan the same files skip cleanly. A racy kernel in such a suite fails with the report, and
a session that launches nothing says so (and fails under --ldssan-require-launch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldssan.pytest_plugin import NOTHING_CHECKED

from ..neighbour import IMPORTS, neighbour_source

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
SUITE = [str(HERE / "test_rmsnorm_gpu.py"), str(HERE / "test_coop_gpu.py")]

RACY = "import pytest\n" + IMPORTS + neighbour_source(sync=(), shift=32) + '''

@pytest.mark.skipif(not torch.cuda.is_available(), reason="requires GPU")
def test_neighbour_exchange():
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    launch(out, stream=torch.cuda.Stream())
    torch.cuda.synchronize()
    expected = torch.tensor([(i + 32) % N * 10 for i in range(N)], dtype=torch.int32)
    torch.testing.assert_close(out.cpu(), expected)
'''


def test_suite_runs_on_the_virtual_gfx1250_under_ldssan(pytester, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.delenv("FLYDSL_LDSSAN_DEVICE", raising=False)
    report = pytester.path / "ldssan.json"
    res = pytester.runpytest_subprocess(*SUITE, "-p", "ldssan", f"--ldssan-report={report}",
                                        "--ldssan-require-launch")
    outcomes = res.parseoutcomes()
    assert set(outcomes) == {"passed"}, res.stdout.str()  # nothing skipped, failed or errored
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*torch GPU=virtual gfx1250*", "*ldssan: 0 violations in 0 tests*"])
    per_test = json.loads(report.read_text())["tests"]
    assert len(per_test) == outcomes["passed"]
    assert all(t["launches"] >= 1 and t["sites"] >= 1 and t["violations"] == 0 for t in per_test.values())


def test_suite_skips_cleanly_without_ldssan(pytester, monkeypatch):
    monkeypatch.delenv("FLYDSL_LDSSAN", raising=False)
    res = pytester.runpytest_subprocess(*SUITE, "-p", "ldssan", "-rs")
    outcomes = res.parseoutcomes()
    assert set(outcomes) == {"skipped"}, res.stdout.str()
    assert "ldssan:" not in res.stdout.str()


def test_a_racy_kernel_fails_its_gpu_style_test_with_the_report(pytester, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    pytester.makepyfile(test_racy=RACY)
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([
        "*ldssan found LDS synchronization violations*",
        "*WARNING: ldssan:*(LDS001)*",
        "*Out[[]tid[]] = lds[[](tid + 32) % N[]]*",
        "*= ldssan: 1 violations in 1 tests =*",
    ])


def test_a_session_that_checks_nothing_says_so(pytester, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_DEVICE", "off")  # the GPU guard skips the only test
    pytester.makepyfile(test_racy=RACY)
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(skipped=1)
    assert res.ret == 0
    res.stdout.fnmatch_lines([f"*{NOTHING_CHECKED}*", "*--ldssan-require-launch makes this a failure*"])

    strict = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan-require-launch")
    strict.assert_outcomes(skipped=1)
    assert strict.ret == pytest.ExitCode.TESTS_FAILED


def test_require_launch_without_ldssan_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.delenv("FLYDSL_LDSSAN", raising=False)
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan-require-launch")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ldssan-require-launch needs ldssan on" in res.stderr.str()
