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
        "ldssan: 0 launches replayed (identical to an earlier one), 2 recorded",  # the launch memo
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
        "test_nothing.py::test_plain": {"launches": 0, "kernels": 0, "sites": 0, "violations": 0, "replayed": 0,
                                        "faulted": 0, "calls": 0, "not_checked": False,
                                        "outside_kernels": 0, "outside_marker": 0, "suppressed": 0}}


# -- issue 29: never a false clean ----------------------------------------------------------

RACE_LINES = ["*Out[[]tid[]] = lds[[](tid + 32) % N[]]*", "*lds[[]tid[]] = fx.Int32(tid) * 10*"]


def _race_has_both_lines(violation: dict) -> None:
    assert violation["rule"] == "LDS001"
    texts = {violation["access"]["site"]["text"].strip(), violation["other"]["site"]["text"].strip()}
    assert texts == {"Out[tid] = lds[(tid + 32) % N]", "lds[tid] = fx.Int32(tid) * 10"}


def test_xdist_controller_reports_every_workers_launches(kernel_tests, monkeypatch):
    import json

    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = kernel_tests.runpytest_subprocess("-p", "ldssan", "-n", "2", "--ldssan-report=out.json",
                                            "--ldssan-require-launch")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines([*RACE_LINES, "*= ldssan: 1 violations in 1 tests =*",
                              "*ldssan: 2 kernels, 2 launches, 5 sites checked*",
                              "test_kernels.py::test_racy: LDS001 *"])
    assert "NOTHING WAS CHECKED" not in res.stdout.str()
    doc = json.loads((kernel_tests.path / "out.json").read_text())
    assert doc["summary"]["clean"] is False and len(doc["kernels"]) == 2
    (v,) = doc["violations"]
    _race_has_both_lines(v)
    assert set(doc["tests"]) == {"test_kernels.py::test_clean", "test_kernels.py::test_racy"}
    assert doc["tests"]["test_kernels.py::test_racy"]["violations"] == 1
    assert doc["memo"] == {"replayed": 0, "recorded": 2, "not_memoizable": {}}  # the workers' memo outcomes


@pytest.mark.slow  # a second xdist session (about 30 s on 2 cores); the one above runs in CI
def test_xdist_clean_session_counts_the_launches_its_workers_checked(kernel_tests, monkeypatch):
    import json

    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    clean = kernel_tests.runpytest_subprocess("-p", "ldssan", "-n", "2", "-k", "clean",
                                              "--ldssan-report=clean.json", "--ldssan-require-launch")
    clean.assert_outcomes(passed=1)
    assert clean.ret == 0  # the launch a worker checked counts: no "nothing was checked"
    clean.stdout.fnmatch_lines(["*ldssan: 1 kernels, 1 launches, 3 sites checked*"])
    assert json.loads((kernel_tests.path / "clean.json").read_text())["summary"]["clean"] is True


CONTEXTS = KERNELS + '''
import ldssan
from ldssan.runtime.emu import EmuMemoryError
from ldssan.runtime.shadow import ShadowEngine


def test_racy_inside_emulate():
    with ldssan.emulate("random(7)"):
        make(False)(torch.zeros(N, dtype=torch.int32))


def test_caught_fault():
    try:
        make(True)(torch.zeros(N // 2, dtype=torch.int32))  # stores N elements: out of bounds
    except EmuMemoryError:
        pass


def test_caught_internal_error(monkeypatch):
    def broken(self, *args, **kwargs):
        raise KeyError(4097)

    monkeypatch.setattr(ShadowEngine, "finish", broken)
    try:
        make(True)(torch.zeros(N, dtype=torch.int32))
    except Exception:
        pass
'''


def test_emulate_blocks_faults_and_internal_errors_never_pass_as_clean(pytester, monkeypatch):
    import json

    pytester.makepyfile(test_contexts=CONTEXTS)
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = pytester.runpytest_subprocess("-p", "ldssan", "-k", "inside_emulate or caught",
                                        "--ldssan-report=out.json")
    res.assert_outcomes(passed=1, failed=2)
    res.stdout.fnmatch_lines([
        "*_ test_racy_inside_emulate _*", "*ldssan found LDS synchronization violations*", *RACE_LINES,
        "*_ test_caught_internal_error _*",
        "ldssan internal error in launch * of kernel neighbour_*: KeyError: 4097 (caught by the test, "
        "but the launch was not checked)",
        "*ldssan: 2 launches faulted (not checked to their end)*",
        "test_contexts.py::test_caught_fault: launch * of kernel neighbour_* faulted (not checked to its end): "
        "EmuMemoryError: *",
    ])
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["summary"]["clean"] is False
    _race_has_both_lines(doc["violations"][0])
    errors = [n["text"] for n in doc["notifications"] if n["level"] == "error"]
    assert any("test_caught_fault" in t and "EmuMemoryError" in t for t in errors)
    assert any("test_caught_internal_error" in t and "ldssan internal error" in t for t in errors)
    assert doc["tests"]["test_contexts.py::test_caught_fault"]["faulted"] == 1

    sarif = pytester.runpytest_subprocess("-p", "ldssan", "-k", "caught_fault", "--ldssan-report=out.sarif")
    sarif.assert_outcomes(passed=1)
    sarif.stdout.fnmatch_lines(["*ldssan: NOTHING WAS CHECKED: every FlyDSL launch faulted*"])
    (invocation,) = json.loads((pytester.path / "out.sarif").read_text())["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    notes = [(n["level"], n["message"]["text"]) for n in invocation["toolExecutionNotifications"]]
    assert any(level == "error" and "EmuMemoryError" in text for level, text in notes)
    assert ("warning", "ldssan: NOTHING WAS CHECKED: no FlyDSL launch was checked to its end") in notes


def test_xdist_worker_that_dies_makes_the_report_not_clean(pytester, monkeypatch):
    import json

    pytester.makepyfile(test_crash="import os\n\ndef test_crash():\n    os._exit(3)\n")
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = pytester.runpytest_subprocess("-p", "ldssan", "-n", "1", "--max-worker-restart=0",
                                        "--ldssan-report=out.json")
    assert res.ret != 0
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["summary"]["clean"] is False
    assert any(n["level"] == "error" and "pytest-xdist worker gw0 went down" in n["text"]
               and "results are lost" in n["text"] for n in doc["notifications"])
