"""Kernel scope, suppressions and ini options through the pytest plugin (pytester, in a
subprocess so the outer session's ldssan state is not shared). Every launched kernel here
is racy: a launch that was checked and not suppressed fails its test."""

from __future__ import annotations

import json

import pytest

from ..neighbour import IMPORTS, RACE_LINES, neighbour_source

pytest_plugins = ["pytester"]

LOAD_LINE = "Out[tid] = lds[(tid + 32) % N]"


def _kernel_module(name: str, comment: str = "") -> str:
    """A module with the racy neighbour kernel `name` (its load line carrying `comment`)."""
    src = IMPORTS + neighbour_source(name=name, sync=(), shift=32)
    return src.replace(LOAD_LINE, LOAD_LINE + comment)


TESTS = '''
import pytest, torch
import k_racy, k_other, k_inline

def run(mod):
    out = torch.zeros(64, dtype=torch.int32)
    mod.launch(out)
    assert out.tolist() == [((t + 32) % 64) * 10 for t in range(64)]  # outputs right, checked or not

def test_racy():
    run(k_racy)

def test_other():
    run(k_other)

@pytest.mark.ldssan(False)
def test_marker_off():
    run(k_other)

@pytest.mark.ldssan(kernels="racy")
def test_marker_narrow():
    run(k_other)

def test_inline():
    run(k_inline)

@pytest.mark.ldssan("no")
def test_bad_marker():
    run(k_racy)
'''


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(k_racy=_kernel_module("racy"), k_other=_kernel_module("other"),
                        k_inline=_kernel_module("inl", "  # ldssan: ignore[LDS001]"), test_suite=TESTS)
    pytester.syspathinsert()
    return pytester


def _load_line(pytester, module: str) -> int:
    text = (pytester.path / f"{module}.py").read_text().splitlines()
    return next(n for n, line in enumerate(text, 1) if LOAD_LINE in line)


def test_scope_marker_and_precedence(suite, monkeypatch):
    """ini says check `racy` in warn mode, the environment says everything but `racy`, the
    command line says fail: the environment beats the ini file, the command line both."""
    suite.makeini("[pytest]\nldssan = true\nldssan_kernels = racy\nldssan_mode = warn\n"
                  "ldssan_report = ini.json\n")
    monkeypatch.setenv("FLYDSL_LDSSAN_KERNELS", "-racy")
    res = suite.runpytest_subprocess("-p", "ldssan", "--ldssan-mode=fail", "--ldssan-report=out.json",
                                     "--ldssan-require-launch")
    # racy: left out (and not "called, not checked" under --ldssan-require-launch); other:
    # checked, fails; the marked ones: left out by their marker; inline: its comment
    res.assert_outcomes(passed=4, failed=2)
    res.stdout.fnmatch_lines([
        "*ldssan: 2 kernels, 2 launches, * sites checked*",
        "*ldssan: 1 launches not checked: outside FLYDSL_LDSSAN_KERNELS*",
        "*ldssan: 2 launches not checked: a test's @pytest.mark.ldssan marker*",
        "*ldssan: 1 suppressed (they fail no test; marked in the report)*",
        "FAILED test_suite.py::test_other*",
        "FAILED test_suite.py::test_bad_marker*",
    ])
    res.stdout.fnmatch_lines(["*ldssan: @pytest.mark.ldssan('no'): the positional argument is check, True or False*"])
    assert "called, not checked" not in res.stdout.str()
    assert not (suite.path / "ini.json").exists()
    doc = json.loads((suite.path / "out.json").read_text())
    assert doc["scope"] == {"kernels": "-racy", "not_checked": 3,
                            "by_source": {"FLYDSL_LDSSAN_KERNELS": 1, "@pytest.mark.ldssan": 2}}
    tests = doc["tests"]
    assert [tests[f"test_suite.py::test_{t}"]["outside_kernels"] for t in ("racy", "other")] == [1, 0]
    assert [tests[f"test_suite.py::test_marker_{t}"]["outside_marker"] for t in ("off", "narrow")] == [1, 1]
    assert {v["kernel"]: v["suppressed"] for v in doc["violations"]} == {"other_0": False, "inl_0": True}


def test_suppressions_file_from_ini(suite):
    """Every kernel test passes: racy by its kernel's name, other by its load line, inl by
    its inline comment, the marked tests unchecked; the entry that matched nothing is stale."""
    other_line = _load_line(suite, "k_other")
    (suite.path / "supp.txt").write_text(
        "# known races\n"
        "LDS001:racy\n"
        f"*:k_other.py:{other_line}   # the load of other\n"
        "LDS030:racy   # stale: racy has no LDS030\n")
    suite.makeini("[pytest]\nldssan = true\nldssan_suppressions = supp.txt\n")
    res = suite.runpytest_subprocess("-p", "ldssan", "--ldssan-report=out.json")
    res.assert_outcomes(passed=5, failed=1)  # test_bad_marker
    res.stdout.fnmatch_lines([
        "*= ldssan: 0 violations in 0 tests =*",
        "*ldssan: 3 suppressed (they fail no test; marked in the report)*",
        "*ldssan: suppression */supp.txt:4: LDS030:racy: matched nothing in this run (stale)*",
    ])
    doc = json.loads((suite.path / "out.json").read_text())
    assert doc["summary"]["suppressed"] == 3 and doc["summary"]["clean"]
    marks = {v["kernel"]: (v["suppression"]["kind"], v["suppression"]["where"]) for v in doc["violations"]}
    supp = suite.path / "supp.txt"  # an ini option's relative path: the ini file's directory
    assert marks == {"racy_0": ("external", f"{supp}:2"), "other_0": ("external", f"{supp}:3"),
                     "inl_0": ("inSource", f"{suite.path / 'k_inline.py'}:{_load_line(suite, 'k_inline')}")}
    assert {v["access"]["site"]["text"].strip() for v in doc["violations"]} <= RACE_LINES | {
        LOAD_LINE + "  # ldssan: ignore[LDS001]"}
    assert doc["suppressions"]["stale"] == [f"{supp}:4: LDS030:racy"]
    assert [e["matched"] for e in doc["suppressions"]["entries"]] == [1, 1, 0]
    assert any("stale" in n["text"] and n["level"] == "warning" for n in doc["notifications"])


@pytest.mark.parametrize("given, message", [
    (("--ldssan-suppressions=supp.txt",), "*ldssan: suppressions supp.txt:3: unknown rule 'LDS1'*"),
    (("-o", "ldssan_policy=sideways"), "*ldssan: ini option ldssan_policy='sideways': *"),
    (("--ldssan-kernels=a,,b",), "*ldssan: --ldssan-kernels='a,,b': an empty pattern*"),
])
def test_bad_settings_are_usage_errors_naming_their_source(pytester, given, message):
    (pytester.path / "supp.txt").write_text("# fine so far\nLDS001:k\nLDS1:k\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan", *given)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])
