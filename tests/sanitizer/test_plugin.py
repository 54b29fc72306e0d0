"""The pytest plugin, on FlyDSL kernels written in the test file itself (pytester, in a
subprocess so the outer session's ldssan state is not shared)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

KERNELS = '''
import torch, flydsl.compiler as flyc, flydsl.expr as fx
N = 64

def make(with_barrier):
    @flyc.kernel
    def neighbour(Out: fx.Tensor):
        tid = fx.thread_idx.x
        lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
        lds[tid] = fx.Int32(tid) * 10
        if fx.const_expr(with_barrier):
            fx.gpu.barrier()
        Out[tid] = lds[(tid + 32) % N]

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        neighbour(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)
    return launch

def test_clean():
    out = torch.zeros(N, dtype=torch.int32)
    make(True)(out)
    assert int(out[0]) == 320

def test_racy():
    out = torch.zeros(N, dtype=torch.int32)
    make(False)(out)
'''


@pytest.fixture
def kernel_tests(pytester):
    pytester.makepyfile(test_kernels=KERNELS)
    return pytester


def test_env_var_fails_the_racy_test_with_the_report(kernel_tests, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = kernel_tests.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines([
        "*ldssan: on (FLYDSL_LDSSAN=1)*",
        "*ldssan found LDS synchronization violations*",
        "*WARNING: ldssan:*(LDS001)*",
        "*test_kernels.py:12:*",
        "*Out[[]tid[]] = lds[[](tid + 32) % N[]]*",
        "*lds[[]tid[]] = fx.Int32(tid) * 10*",
        "*= ldssan: 1 violations in 1 tests =*",
        "*ldssan: 2 kernels, 2 launches, 5 sites checked*",  # clean: 3 sites, racy: 2
    ])


def test_warn_mode_only_reports(kernel_tests, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_MODE", "warn")
    res = kernel_tests.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*ldssan: 1 violations in 1 tests*", "*test_racy*LDS001*"])


def test_command_line_flag_and_sarif_report(kernel_tests):
    res = kernel_tests.runpytest_subprocess("-p", "ldssan", "--ldssan", "--ldssan-report=out.sarif",
                                            "--ldssan-policy=reverse")
    res.assert_outcomes(passed=1, failed=1)
    import json

    sarif = json.loads((kernel_tests.path / "out.sarif").read_text())
    results = sarif["runs"][0]["results"]
    assert results and results[0]["ruleId"] == "LDS001"
    assert results[0]["relatedLocations"]


def test_off_by_default(kernel_tests, monkeypatch):
    monkeypatch.delenv("FLYDSL_LDSSAN", raising=False)
    res = kernel_tests.runpytest_subprocess("-p", "ldssan", "-k", "nothing_selected")
    assert "ldssan: on" not in res.stdout.str()


def test_bad_env_value_is_a_clear_error(kernel_tests, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "maybe")
    res = kernel_tests.runpytest_subprocess("-p", "ldssan")
    assert "FLYDSL_LDSSAN='maybe'" in res.stderr.str() + res.stdout.str()


def test_coverage_line_lists_sites_by_kind(kernel_tests, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_COVERAGE", "1")
    res = kernel_tests.runpytest_subprocess("-p", "ldssan", "-k", "clean", "-s")
    res.assert_outcomes(passed=1)
    assert "ldssan: neighbour_0: 3 sites (barrier 1, ds_read 1, ds_write 1)" in res.stderr.str() + res.stdout.str()


def test_expect_marker_turns_an_intended_race_into_a_pass(pytester, monkeypatch):
    pytester.makepyfile(test_kernels=KERNELS.replace(
        "def test_racy():", "import pytest\n\n@pytest.mark.ldssan(expect=['LDS001'])\ndef test_racy():").replace(
        "def test_clean():", "import pytest\n\n@pytest.mark.ldssan(expect=['LDS002'])\ndef test_clean():"))
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*_ test_clean _*", "ldssan: expected [[]'LDS002'[]] but the launches reported nothing"])


def test_expect_marker_fails_a_test_that_launched_nothing(pytester, monkeypatch):
    # an expectation no launch could meet would otherwise pass: a test that cannot fail
    pytester.makepyfile(test_nolaunch='''
import pytest

@pytest.mark.ldssan(expect=["LDS001"])
def test_forgot_to_launch():
    assert True

def test_unmarked_without_launch():
    assert True
''')
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines([
        "*_ test_forgot_to_launch _*",
        "ldssan: expected [[]'LDS001'[]] but the test launched no FlyDSL kernel (nothing was checked)",
    ])


def test_sarif_report_is_written_when_no_kernel_ran(pytester, monkeypatch):
    import json

    pytester.makepyfile(test_nothing="def test_plain():\n    assert True\n")
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan-report=out.sarif")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*ldssan: report written to out.sarif*"])
    (run,) = json.loads((pytester.path / "out.sarif").read_text())["runs"]
    assert run["results"] == [] and run["properties"]["kernels"] == []
    (note,) = run["invocations"][0]["toolExecutionNotifications"]
    assert "NOTHING WAS CHECKED" in note["message"]["text"]
    assert run["properties"]["tests"] == {
        "test_nothing.py::test_plain": {"launches": 0, "kernels": 0, "sites": 0, "violations": 0,
                                        "calls": 0, "not_checked": False}}
