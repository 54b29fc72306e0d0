"""FLYDSL_LDSSAN_ISA inside a sanitized run: each kernel build a sanitized launch makes is
also built uninstrumented (compile-only), ISA-checked, and its findings join the launch's
report with the launch's kernel build, at the option's severity. The uninstrumented build
is the one `ldssan isa-check` checks (same instructions, same byte offsets); a kernel
launched twice is captured once; the waited twin is captured and clean; a bad value is a
ConfigError before any launch."""

from __future__ import annotations

import json

import pytest

from ldssan import config, hook
from ldssan.isa import sanitized
from ldssan.isa.run import isa_check
from ldssan.runtime.records import Rule
from tests.isa import split_kernels

LDS050 = Rule.ISA_STORE_UNWAITED_AT_SIGNAL


@pytest.fixture
def captures(monkeypatch):
    """Every uninstrumented capture the sanitized run makes (and a fresh memo of checked builds)."""
    made = []
    real = sanitized.capture_builds

    def counting(*args, **kwargs):
        builds = real(*args, **kwargs)
        made.append(builds)
        return builds

    monkeypatch.setattr(sanitized, "capture_builds", counting)
    sanitized.clear()
    yield made
    sanitized.clear()


def _isa(violations):
    return [v for v in violations if v.rule == LDS050]


def test_sanitized_launch_reports_the_isa_finding_with_both_lines(monkeypatch, captures):
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "1")
    with hook.sanitize() as col:
        split_kernels.launch_raw()
        split_kernels.launch_raw()
    assert len(col.results) == 2 and len(captures) == 1  # one capture for one build
    for launch in col.results:
        (v,) = _isa(launch.report.violations)
        assert v.severity == "warning" and v.kernel == launch.kernel and v.build == launch.sites.build
        assert v.launch == launch.launch
        assert (v.site.line, v.other_site.line) == (split_kernels.line_of("SIGNAL"), split_kernels.line_of("STORE"))
        assert v.site.op.startswith("s_barrier_signal -1 at raw_split_0+0x")
        assert v.other_site.op.startswith("ds_store_b32 ")
        assert "SIGNAL" in v.site.text and "STORE" in v.other_site.text
    assert not _isa(col.violations)  # a warning fails no test
    # the IR-level verdict is still there, unchanged
    assert {v.code for v in col.violations} == {"LDS001"}


def test_the_checked_build_is_the_uninstrumented_one_isa_check_sees(monkeypatch, captures):
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "warn")
    with hook.sanitize():
        split_kernels.launch_raw()
    ((build,),) = captures
    assert "__ldssan" not in build.isa
    (plain,) = isa_check(split_kernels.launch_raw)  # outside the hook: the CLI's build
    (inside,) = sanitized._checked.values()
    assert [(f.this.offset, f.other.offset, f.this.text, f.other.text) for f in inside[0].findings] == \
        [(f.this.offset, f.other.offset, f.this.text, f.other.text) for f in plain.findings]
    assert inside[0].instructions == plain.instructions and inside[0].offsets_note is None


def test_error_severity_fails_like_a_violation(monkeypatch, captures):
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "error")
    with hook.sanitize() as col:
        split_kernels.launch_raw()
    (v,) = _isa(col.violations)
    assert v.severity == "error"


def test_the_waited_twin_is_checked_and_clean(monkeypatch, captures):
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "1")
    with hook.sanitize() as col:
        split_kernels.launch_waited()
    assert len(captures) == 1
    ((result,),) = sanitized._checked.values()
    assert result.instructions > 0 and result.findings == ()
    assert not _isa(col.results[0].report.violations)


def test_off_by_default_captures_nothing(monkeypatch, captures):
    monkeypatch.delenv("FLYDSL_LDSSAN_ISA", raising=False)
    with hook.sanitize() as col:
        split_kernels.launch_raw()
    assert captures == [] and not _isa(col.results[0].report.violations)


def test_bad_value_is_a_config_error_before_any_launch(monkeypatch, captures):
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "loud")
    with pytest.raises(config.ConfigError, match=r"FLYDSL_LDSSAN_ISA='loud': expected warn, error, off"):
        with hook.sanitize():
            pytest.fail("the block ran with a bad FLYDSL_LDSSAN_ISA")
    with pytest.raises(config.ConfigError, match="FLYDSL_LDSSAN_ISA"):
        config.validate()


pytest_plugins = ["pytester"]

PLUGIN_TEST = """
from tests.isa import split_kernels

def test_raw():
    split_kernels.launch_raw()
"""


def test_pytest_report_carries_the_isa_finding(pytester, monkeypatch, request):
    """The plugin path (FLYDSL_LDSSAN=1): the report file holds the ISA finding; LDS001 fails the test."""
    root = str(request.config.rootpath)
    pytester.makepyfile(test_k=PLUGIN_TEST)
    monkeypatch.setenv("PYTHONPATH", root)
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "warn")
    out = pytester.path / "r.json"
    res = pytester.runpytest_subprocess("-p", "ldssan", f"--ldssan-report={out}")
    assert res.ret == pytest.ExitCode.TESTS_FAILED  # the IR race, not the warning
    doc = json.loads(out.read_text())
    isa = [v for v in doc["violations"] if v["rule"] == "LDS050"]
    assert [(v["severity"], v["access"]["site"]["line"], v["other"]["site"]["line"]) for v in isa] == \
        [("warning", split_kernels.line_of("SIGNAL"), split_kernels.line_of("STORE"))]
