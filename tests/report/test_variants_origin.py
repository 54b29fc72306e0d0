"""What a report shows a kernel author beyond the race itself: a report on a kernel variant
(a planted or mutated one-line change) names the original file and line and shows the change,
not the temporary file that ran; lint warnings, which fail no test, are listed in the pytest
summary; a static (lint) finding does not print the LDS offset and workgroup it never had."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import jsonschema
import pytest

from ldssan import hook, variants
from ldssan import report as rpt
from ldssan.decode import Report, SiteTable, SiteTableError, merge_reports
from ldssan.kernels import rmsnorm as rms
from ldssan.session import lint_violations
from ldssan.variants import Edit, Origin, load_variant
from tests.neighbour import IMPORTS, neighbour_source
from tests.sanitizer.test_rmsnorm_bugs import VARIANTS, _inputs

ORIGINAL = inspect.getsourcefile(rms)
SOURCE = Path(ORIGINAL).read_text(encoding="utf-8").splitlines()
SCHEMA = Path(__file__).parent / "data" / "ldssan-report.schema.json"


def _planted(name: str):
    """(variant module, its merged report, planted rule, this line, other line, edited line)."""
    edits, code, this_line, other_line = VARIANTS[name]
    mod = load_variant(rms, edits, tag=name)
    x, g = _inputs()
    with hook.sanitize("round-robin") as col:
        mod.rmsnorm(x, g)
    return mod, merge_reports(*(r.report for r in col.results)), code, this_line, other_line, edits[0].line


@pytest.fixture(scope="module")
def no_barrier():
    return _planted("a_no_barrier_1")


def _the(report, code):
    (v,) = [v for v in report.violations if v.code == code]
    return v


def test_text_names_the_original_file_and_line_and_shows_the_change(no_barrier):
    mod, report, code, this_line, other_line, edited = no_barrier
    v = _the(report, code)
    assert v.site.file == mod.__file__  # the site is the build that ran: its identity is the variant's
    assert v.site.location == f"{ORIGINAL}:{this_line}:{v.site.col + 1}"
    text = rpt.render_text(report)
    assert mod.__file__ not in text and Path(mod.__file__).name not in text
    assert f"  at {ORIGINAL}:{this_line}:" in text
    assert f"  at {ORIGINAL}:{other_line}:" in text
    assert f"SUMMARY: ldssan: {code} {v.name} {ORIGINAL}:{this_line}\n" in text
    old = SOURCE[edited - 1].strip()
    assert old  # the planted edit deletes a real statement
    assert f"Variant of {ORIGINAL}: line {edited}: `{old}` -> (deleted)\n" in text
    # the buffer's allocation line is the original file's too
    assert v.buffer is not None and f"allocated at {ORIGINAL}:{v.buffer.line}" in text


def test_a_replaced_line_is_shown_old_and_new():
    mod, report, code, _this, _other, edited = _planted("c_raw_split_barrier")
    new = VARIANTS["c_raw_split_barrier"][0][0].text
    text = rpt.render_text(report)
    assert f"Variant of {ORIGINAL}: line {edited}: `{SOURCE[edited - 1].strip()}` -> `{new}`" in text
    assert mod.__file__ not in text


def test_json_names_the_original_and_keeps_the_variant(no_barrier, monkeypatch):
    mod, report, code, this_line, _other, edited = no_barrier
    doc = rpt.to_json(report)
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert not list(jsonschema.Draft7Validator(schema).iter_errors(doc))
    (entry,) = [d for d in doc["violations"] if d["rule"] == code]
    site = entry["access"]["site"]
    assert (site["file"], site["line"]) == (ORIGINAL, this_line)
    assert site["variant"]["file"] == mod.__file__
    assert [(c["line"], c["old"]) for c in site["variant"]["changes"]] == [(edited, SOURCE[edited - 1].strip())]
    assert all(f["file"] == ORIGINAL for f in site["chain"])
    assert entry["lds"]["buffer"]["file"] == ORIGINAL
    assert rpt.from_json(json.dumps(doc)) == report
    text = rpt.render_text(report)
    # another process (no variant registered) reads the report back and prints the same text
    monkeypatch.setattr(variants, "_ORIGINS", {})
    assert mod.__file__ in rpt.render_text(report)  # the registry is what maps the path
    assert rpt.render_text(rpt.from_json(json.dumps(doc))) == text


def test_sarif_message_names_the_original(no_barrier):
    mod, report, code, this_line, _other, _edited = no_barrier
    (result,) = [r for r in rpt.to_sarif(report)["runs"][0]["results"] if r["ruleId"] == code]
    assert f"{ORIGINAL}:{this_line}:" in result["message"]["text"]
    assert mod.__file__ not in result["message"]["text"]


def test_a_malformed_variant_entry_is_a_named_error():
    site = {"id": 0, "kind": "ds_read", "op": "llvm.load", "file": ORIGINAL, "line": 3}
    for bad in ("x", {"changes": []}, {"file": "/elsewhere/v.py", "changes": [{"line": "one"}]},
                {"file": "/elsewhere/v.py", "changes": {"line": 1}}):
        with pytest.raises(SiteTableError, match="variant|site table"):
            SiteTable.from_json([{**site, "variant": bad}])
    with pytest.raises(SiteTableError, match="no original file"):
        SiteTable.from_json({"sites": [], "buffers": [
            {"name": "s", "offset": 0, "file": None, "variant": {"file": "/elsewhere/v.py"}}]})


# -- the origin registry ------------------------------------------------------------------


def _tiny(tmp_path) -> str:
    path = tmp_path / "tiny_kernel.py"
    path.write_text("A = 1\nB = 2\nC = 3\n")
    return str(path)


def test_a_variant_of_a_variant_names_the_first_original(tmp_path):
    path = _tiny(tmp_path)
    first = load_variant(path, [Edit(1, "A = 10")], tag="first")
    second = load_variant(first, [Edit(1, "A = 100"), Edit(3, None)], tag="second")
    assert (second.A, second.B) == (100, 2)
    origin = variants.origin_of(second.__file__)
    assert origin.path == path
    assert origin.describe() == ["line 1: `A = 1` -> `A = 100`", "line 3: `C = 3` -> (deleted)"]
    assert variants.origin_of(path) is None and variants.original_path(path) == path


def test_an_edit_must_stay_one_line(tmp_path):
    with pytest.raises(ValueError, match="spans several lines"):
        load_variant(_tiny(tmp_path), [Edit(2, "B = 2\nD = 4")], tag="multi")


def test_an_unedited_variant_still_names_its_original(tmp_path):
    path = _tiny(tmp_path)
    clean = load_variant(path, [Edit(2, "B = 2")], tag="same")  # rewrites the line as it was
    assert variants.origin_of(clean.__file__) == Origin(path, ())
    assert variants.original_path(clean.__file__) == path


# -- static (lint) findings ---------------------------------------------------------------


def test_a_static_finding_prints_no_lds_offset_or_workgroup(sites, match_lines):
    # site 0 is an LDS store, site 2 a raw s_barrier_signal (tests/report/conftest.py)
    (v,) = lint_violations([{"code": "LDS040", "access": 0, "barrier": 2}], sites, kernel="k", launch=0)
    text = rpt.render_text(Report((v,)))
    match_lines(text, [
        "WARNING: ldssan: * (LDS040)",
        "This access: write of 4 bytes",
        "  at /src/kernels/k_lds.py:14:5 in lds_neighbour",
        "Other barrier: rocdl.s.barrier.signal",
        "  at /src/kernels/k_lds.py:15:5 in lds_neighbour",
    ])
    sides = [line for line in text.splitlines() if line.startswith(("This access:", "Other barrier:"))]
    assert len(sides) == 2 and not any("at LDS" in s or "(workgroup" in s for s in sides), sides


# -- lint warnings in the pytest summary --------------------------------------------------

pytest_plugins = ["pytester"]

LINT_KERNELS = IMPORTS + neighbour_source("no_acquire", sync=(
    'fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Release)',
    "fx.rocdl.s_barrier_signal(-1)",
    "fx.rocdl.s_barrier_wait(-1)",
), shift=32) + '''
def test_first():
    out = torch.zeros(N, dtype=torch.int32)
    launch(out)
    assert int(out[0]) == 320

def test_second():
    launch(torch.zeros(N, dtype=torch.int32))
'''


@pytest.mark.parametrize("lint", ["warn", "off"])
def test_lint_warnings_are_listed_once_in_the_summary(pytester, monkeypatch, lint):
    written = pytester.makepyfile(test_lint=LINT_KERNELS).read_text().splitlines()
    load, wait = (written.index(f"    {text}") + 1 for text in ("Out[tid] = lds[(tid + 32) % N]",
                                                            "fx.rocdl.s_barrier_wait(-1)"))
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_LINT", lint)
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=2)  # a warning fails no test
    out = res.stdout.str()
    if lint == "off":
        assert "LDS041" not in out and "lint warning" not in out
        return
    res.stdout.fnmatch_lines([
        "*ldssan: 1 warnings (they fail no test; FLYDSL_LDSSAN_LINT=error makes the lint ones fail)*",
        f"LDS041 missing-acquire at *test_lint.py:{load}:* (barrier at *test_lint.py:{wait}:*): "
        "* [[]first in test_lint.py::test_first[]]",
    ])
    assert out.count("LDS041 missing-acquire at") == 1  # two tests, one site pair: one line
