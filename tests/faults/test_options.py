"""Options are validated once, before any test runs: a bad FLYDSL_LDSSAN_* value (or
--ldssan-* option, or report path) is a pytest usage error (exit 4) naming the variable,
the value and what is accepted. Before, some were a pytest INTERNALERROR (exit 3), some
were only read when a test had violations (clean tests passed, racy ones failed with a
config error), and a huge ring was accepted and failed every test allocating it."""

from __future__ import annotations

import pytest

from ldssan import config, hook

pytest_plugins = ["pytester"]

# Two plain tests: a failure would be a test outcome, not a usage error.
TESTS = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"

# (probe, env, what the one-line error must contain)
BAD_ENV = [
    ("policy banana", {"FLYDSL_LDSSAN_POLICY": "banana"}, "FLYDSL_LDSSAN_POLICY='banana': unknown scheduler policy*round-robin, reverse, canonical or random(SEED)*"),
    ("ring -1", {"FLYDSL_LDSSAN_RING": "-1"}, "FLYDSL_LDSSAN_RING='-1': expected an integer from 1 to 2097152"),
    ("ring 10**9", {"FLYDSL_LDSSAN_RING": "1000000000"}, "FLYDSL_LDSSAN_RING='1000000000': expected an integer from 1 to 2097152"),
    ("batch 0", {"FLYDSL_LDSSAN_BATCH": "0"}, f"FLYDSL_LDSSAN_BATCH='0': expected auto or an integer from 1 to {config.batch_max()}"),
    ("enable 2", {"FLYDSL_LDSSAN": "2"}, "FLYDSL_LDSSAN='2': expected 0/1, true/false, yes/no or on/off"),
    ("mode loud", {"FLYDSL_LDSSAN_MODE": "loud"}, "FLYDSL_LDSSAN_MODE='loud': expected one of fail, warn"),
    ("coverage maybe", {"FLYDSL_LDSSAN_COVERAGE": "maybe"}, "FLYDSL_LDSSAN_COVERAGE='maybe': expected 0/1*"),
    ("max reports 0", {"FLYDSL_LDSSAN_MAX_REPORTS": "0"}, "FLYDSL_LDSSAN_MAX_REPORTS='0': expected an integer >= 1"),
]


@pytest.mark.parametrize("env, message", [b[1:] for b in BAD_ENV], ids=[b[0] for b in BAD_ENV])
def test_bad_env_value_is_a_usage_error_before_any_test(pytester, monkeypatch, env, message):
    pytester.makepyfile(test_plain=TESTS)
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = pytester.runpytest_subprocess("-p", "ldssan")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: ldssan: {message}"])
    out = res.stdout.str() + res.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out and "passed" not in out


def test_every_bad_value_is_listed_at_once(pytester, monkeypatch):
    pytester.makepyfile(test_plain=TESTS)
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_MODE", "loud")
    monkeypatch.setenv("FLYDSL_LDSSAN_BATCH", "0")
    res = pytester.runpytest_subprocess("-p", "ldssan")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: ldssan: FLYDSL_LDSSAN_MODE='loud'*", "ldssan: FLYDSL_LDSSAN_BATCH='0'*"])


@pytest.mark.parametrize("args, message", [
    (["--ldssan-policy=banana"], "ERROR: ldssan: --ldssan-policy='banana': unknown scheduler policy*"),
    (["--ldssan-report=plain.txt/out.json"], "ERROR: ldssan: --ldssan-report*'plain.txt' is not a directory"),
    (["--ldssan-report=."], "ERROR: ldssan: --ldssan-report*is a directory"),
], ids=["policy", "report-under-a-file", "report-is-a-directory"])
def test_bad_command_line_option_is_a_usage_error(pytester, args, message):
    pytester.makepyfile(test_plain=TESTS)
    pytester.makefile(".txt", plain="not a directory")
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])


def test_bad_values_are_ignored_while_ldssan_is_off(pytester, monkeypatch):
    # the plugin is loaded in every pytest run of an environment that has ldssan installed
    pytester.makepyfile(test_plain=TESTS)
    monkeypatch.delenv("FLYDSL_LDSSAN", raising=False)
    monkeypatch.setenv("FLYDSL_LDSSAN_MODE", "loud")
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=2)


def test_enable_validates_up_front(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_COVERAGE", "maybe")
    with pytest.raises(config.ConfigError, match="FLYDSL_LDSSAN_COVERAGE='maybe'"):
        hook.enable()
    assert not hook.enabled()


def test_sanitize_reads_its_options_before_any_launch(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_COVERAGE", "maybe")
    with pytest.raises(config.ConfigError, match="FLYDSL_LDSSAN_COVERAGE='maybe'"):
        with hook.sanitize():
            pytest.fail("the block must not run")


def test_ring_budget_is_documented_in_ldssan_env():
    assert f"1..{config.RING_MAX}" in config.help_text()
    assert config.RING_MAX * 32 <= config.RING_BUDGET_BYTES
