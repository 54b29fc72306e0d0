"""A FLYDSL_LDSSAN_* variable that is no option, and a batch too large to be meant, are
usage errors wherever options are validated: the pytest plugin (exit 4 before any test),
`ldssan.enable()` and the command line (exit 2). Before, a misspelt `FLYDSL_LDSSAN_POLCY`
was silently ignored (the run used the default policy) and `FLYDSL_LDSSAN_BATCH=10**20`
was accepted."""

from __future__ import annotations

import pytest

from ldssan import config, hook
from tests.faults.test_cli import _ldssan, _one_line_error

pytest_plugins = ["pytester"]

TESTS = "def test_one():\n    pass\n"
HUGE = str(10**20)


def test_a_misspelt_variable_is_a_pytest_usage_error_naming_the_closest_option(pytester, monkeypatch):
    pytester.makepyfile(test_plain=TESTS)
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_POLCY", "reverse")
    res = pytester.runpytest_subprocess("-p", "ldssan")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: ldssan: FLYDSL_LDSSAN_POLCY='reverse': unknown ldssan option "
                              "(did you mean FLYDSL_LDSSAN_POLICY?)"])
    assert "passed" not in res.stdout.str()


def test_enable_refuses_an_unknown_variable(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_KEEPTEMP", "1")
    with pytest.raises(config.ConfigError, match=r"FLYDSL_LDSSAN_KEEPTEMP='1': unknown ldssan option "
                                                 r"\(did you mean FLYDSL_LDSSAN_KEEP_TEMP\?\)"):
        hook.enable()
    assert not hook.enabled()


def test_an_unknown_variable_with_no_close_option_points_to_ldssan_env(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_FROBNICATE", "1")
    assert config.unknown_variables() == [
        "ldssan: FLYDSL_LDSSAN_FROBNICATE='1': unknown ldssan option (`ldssan env` lists the options)"]


def test_every_option_is_known(monkeypatch):
    for opt in config.OPTIONS.values():
        monkeypatch.setenv(opt.env, "")
    assert config.unknown_variables() == []


def test_the_cli_refuses_an_unknown_variable():
    proc = _ldssan("demo", env={"FLYDSL_LDSSAN_MAX_REPORT": "5"})
    assert proc.returncode == 2
    _one_line_error(proc, "ldssan: FLYDSL_LDSSAN_MAX_REPORT='5': unknown ldssan option "
                          "(did you mean FLYDSL_LDSSAN_MAX_REPORTS?)")


def test_a_huge_batch_is_refused(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_BATCH", HUGE)
    with pytest.raises(config.ConfigError, match=rf"FLYDSL_LDSSAN_BATCH='{HUGE}': expected auto or an integer "
                                                 rf"from 1 to {config.batch_max()}"):
        config.validate()
    monkeypatch.setenv("FLYDSL_LDSSAN_BATCH", str(config.batch_max()))
    assert config.validate()["batch"] == config.batch_max()


def test_the_batch_bound_is_the_lane_budget_of_one_wave_workgroups():
    from ldssan.runtime.emu.plan import LANE_BUDGET, auto_batch

    # the automatic batch never exceeds it, so no batch auto would pick is refused
    assert auto_batch(10**9, 1, 0) == config.batch_max() == LANE_BUDGET // 32
