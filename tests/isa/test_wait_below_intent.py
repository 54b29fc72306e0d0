"""LDS051 isa-wait-below-intent end to end: `s_wait_dscnt(2)` after an LDS store and two
LDS loads retires the store in the IR; the backend merges the loads into one instruction
and the compiled wait leaves the store in flight. Reported by `ldssan isa-check` (golden
text, JSON) and inside a sanitized run (golden report text: a static finding names no
workgroup or LDS offset); the twin whose loads stay two instructions gives none; a build
the intent cannot be taken from is a note, never a silent pass; the consistency row."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from ldssan import hook
from ldssan import report as rpt
from ldssan.cli import main
from ldssan.isa import check, sanitized
from ldssan.isa.asm import parse_kernel
from ldssan.isa.capture import capture_builds
from ldssan.isa.check import check_build
from ldssan.isa.output import render_text
from ldssan.isa.run import resolve
from ldssan.runtime.records import Rule
from tests.isa import consistency, intent_kernels
from tests.isa.test_counters import kernel
from tests.isa.test_intent import line_of
from tests.isa.test_isa_check import _validator

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
TARGET = os.path.relpath(HERE / "intent_kernels.py")
LDS051 = Rule.ISA_WAIT_BELOW_INTENT


def _normalized(text: str) -> str:
    return text.replace(str(HERE.resolve()), "<tests/isa>")


def test_merged_loads_are_reported_with_the_wait_and_the_op_it_meant_to_retire(capsys, tmp_path):
    out, report, sarif = tmp_path / "isa.json", tmp_path / "report.json", tmp_path / "isa.sarif"
    rc = main(["isa-check", f"{TARGET}::launch_merged", "--json", str(out), "--report", str(report),
               "--sarif", str(sarif)])
    text = capsys.readouterr().out
    assert rc == 1
    assert _normalized(text) == (GOLDEN / "lds051_merged_wait.txt").read_text()
    (kernel,) = json.loads(out.read_text())["kernels"]
    assert kernel["notes"] == []  # the intent was taken: LDS051 was checked
    (f,) = [f for f in kernel["findings"] if f["code"] == "LDS051"]
    assert (f["this"]["line"], f["other"]["line"]) == (line_of("WAIT"), line_of("MEANT"))
    assert f["this"]["isa"] == "s_wait_dscnt 0x2" and f["other"]["isa"].startswith("ds_store_b32")
    assert f["other"]["offset"] < f["this"]["offset"]
    assert "only 1 follows" in f["cause"]

    import jsonschema

    doc = json.loads(report.read_text())
    assert not list(_validator("ldssan-report.schema.json", jsonschema.Draft7Validator).iter_errors(doc))
    assert doc["rules"]["LDS051"]["name"] == "isa-wait-below-intent"
    (v,) = [v for v in doc["violations"] if v["rule"] == "LDS051"]
    assert (v["access"]["site"]["line"], v["other"]["site"]["line"]) == (line_of("WAIT"), line_of("MEANT"))
    log = json.loads(sarif.read_text())
    assert not list(_validator("sarif-schema-2.1.0.json", jsonschema.Draft4Validator).iter_errors(log))
    assert sorted(r["ruleId"] for r in log["runs"][0]["results"]) == ["LDS050", "LDS051"]


def test_the_twin_whose_loads_stay_two_instructions_is_clean(capsys):
    assert main(["isa-check", f"{TARGET}::launch_split"]) == 0
    text = capsys.readouterr().out
    assert "not checked" not in text and text.endswith(", 0 finding(s)\n")


@pytest.fixture(scope="module")
def merged_build():
    # a fresh copy of the file: this process may have compiled (and cached) the imported one
    (build,) = capture_builds(resolve(f"{TARGET}::launch_merged"))
    assert build.ir  # the capture kept the IR the intent is taken from
    return build


@pytest.mark.parametrize("ir, note", [
    ("", "LDS051 not checked: the build has no IR dump to take the waits' intent from"),
    ("module {", "LDS051 not checked: the IR dump of merged_wait_0 does not parse: "),
])
def test_a_build_without_usable_ir_is_a_note_not_a_pass(merged_build, ir, note):
    result = check_build(replace(merged_build, ir=ir), offsets=False)
    assert [n[:len(note)] for n in result.notes] == [note]
    assert [f.rule.code for f in result.findings] == ["LDS050"]  # the other checks still ran
    assert f"ldssan isa-check: note: merged_wait_0: {note}" in render_text([result])
    checked = check_build(merged_build, offsets=False)
    assert checked.notes == () and LDS051 in {f.rule for f in checked.findings}


def test_sanitized_report_text_carries_the_finding_without_a_workgroup(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_ISA", "warn")
    sanitized.clear()
    try:
        with hook.sanitize() as col:
            intent_kernels.launch_merged()
    finally:
        sanitized.clear()
    assert not col.violations  # every finding of this kernel is a static warning
    (launch,) = col.results
    text = _normalized(rpt.render_text(launch.report))
    assert text == (GOLDEN / "lds051_sanitized.txt").read_text()
    sides = [ln for ln in text.splitlines() if ln.startswith(("This instruction:", "Other instruction:"))]
    assert len(sides) == 4 and not any("(workgroup" in ln or "at LDS" in ln for ln in sides)


def test_consistency_row_names_lds051_as_what_the_ir_cannot_show():
    merged, split = consistency.run(["intent"])
    assert merged["isa"] == ["LDS050", "LDS051"] and merged["verdict"] == "agree"
    assert merged["isa_store_lines"] == merged["ir_release_other_lines"] == [line_of("MEANT")]
    assert f"ISA only: LDS051: the hand-written wait on line {line_of('WAIT')}" in merged["reason"]
    assert split["isa"] == [] and split["verdict"] == "IR-only"  # the IR's lint warns of the raw split barrier


def test_a_flat_op_left_in_flight_needs_a_wait_for_zero(monkeypatch):
    # enough younger ops follow, but FLAT completes out of order: only s_wait_dscnt 0 retires it
    isa = kernel("flat_store_b32 v[0:1], v2", "ds_load_b32 v3, v4", "s_wait_dscnt 0x1", "s_barrier_signal -1")
    table = {("/src/k.py", 3, "dscnt", 1): frozenset({("/src/k.py", 1)})}
    monkeypatch.setattr(check, "kernel_intent", lambda ir, name: table)
    (f,), notes = check.wait_below_intent(parse_kernel(isa, "k"), "ir")
    assert notes == [] and f.other.mnemonic == "flat_store_b32"
    assert "completes out of order" in f.cause and f.cause.endswith("(s_wait_dscnt 0 would retire it)")
