"""The SARIF log validates against the official SARIF 2.1.0 schema (vendored, see
data/SARIF-SCHEMA-NOTICE.md) and the JSON report against our own schema (docs/reports.md, "JSON
report"); SARIF points at the user's files relative to %SRCROOT% and says what went wrong
running the tool."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from ldssan import report as rpt
from ldssan.decode import SiteTable, decode, merge_reports
from ldssan.runtime.records import Record

from .conftest import mixed_records

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def sarif_validator():
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


@pytest.fixture(scope="module")
def json_validator():
    schema = json.loads((DATA / "ldssan-report.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _reports(sites, raw_records):
    extra = mixed_records(lds011_other=3) + [Record(77, 0, 1)]  # 77: a number no rule has
    return {
        "grouped": decode(raw_records, sites),
        "mixed": decode(raw_records + extra, sites, capacity=64),
        "dropped": decode(raw_records[:4], sites, dropped=9, capacity=4),
        "nothing ran": merge_reports(),
    }


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_sarif_validates_against_the_sarif_2_1_0_schema(sarif_validator, sites, raw_records):
    for name, report in _reports(sites, raw_records).items():
        doc = rpt.to_sarif(report, notes=[("error", "t.py::test: DeadlockError: waves 0-3 wait")])
        assert not _errors(sarif_validator, doc), name


def test_the_sarif_validator_rejects_a_broken_log(sarif_validator, sites, raw_records):
    doc = rpt.to_sarif(decode(raw_records, sites))
    doc["runs"][0]["results"][0]["level"] = "fatal"  # not a SARIF level
    del doc["runs"][0]["tool"]["driver"]["name"]
    assert len(_errors(sarif_validator, doc)) >= 2


def test_json_report_validates_against_its_schema(json_validator, sites, raw_records, tmp_path):
    for name, report in _reports(sites, raw_records).items():
        assert not _errors(json_validator, rpt.to_json(report)), name
    # the file the pytest plugin writes, with each test's counts
    path = rpt.write_report(decode(raw_records, sites), tmp_path / "r.json",
                            extra={"tests": {"t.py::a": {"launches": 1, "kernels": 1, "sites": 6,
                                                         "violations": 1, "replayed": 0}},
                                   "memo": {"replayed": 0, "recorded": 1, "not_memoizable": {"why": 2}}})
    assert not _errors(json_validator, json.loads(path.read_text()))


def test_the_json_validator_rejects_a_broken_report(json_validator, sites, raw_records):
    doc = rpt.to_json(decode(raw_records, sites))
    doc["violations"][0]["count"] = 0
    del doc["violations"][0]["lds"]["buffer"]["symbol"]
    doc["kernels"][0].pop("build")
    assert len(_errors(json_validator, doc)) == 3


def test_sarif_paths_are_relative_to_srcroot(sites, raw_records):
    doc = rpt.to_sarif(decode(raw_records, sites), srcroot="/src")
    (run,) = doc["runs"]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": "file:///src/"}}
    (res,) = run["results"]
    art = res["locations"][0]["physicalLocation"]["artifactLocation"]
    assert art == {"uri": "kernels/k_lds.py", "uriBaseId": "%SRCROOT%"}
    assert res["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "kernels/k_lds.py"
    # the fingerprint holds no absolute path, so it matches across checkouts
    (fp,) = res["partialFingerprints"].values()
    assert "/src" not in fp and "kernels/k_lds.py:17:9" in fp
    moved = SiteTable.from_json(json.loads(json.dumps(sites.to_dict()).replace("/src/", "/ci/checkout/")))
    other = rpt.to_sarif(decode(raw_records, moved), srcroot="/ci/checkout")["runs"][0]["results"][0]
    assert other["partialFingerprints"] == res["partialFingerprints"]
    # a file outside the source root keeps its absolute URI
    outside = rpt.to_sarif(decode(raw_records, sites), srcroot="/elsewhere")["runs"][0]["results"][0]
    assert outside["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "file:///src/kernels/k_lds.py"}


def test_sarif_tool_has_information_uri_and_rule_help(sites, raw_records):
    driver = rpt.to_sarif(decode(raw_records, sites))["runs"][0]["tool"]["driver"]
    assert driver["informationUri"]
    for rule in driver["rules"]:
        assert rule["help"]["text"] and "Fix:" in rule["help"]["text"]
        assert rule["helpUri"] == driver["informationUri"]


def test_execution_problems_are_notifications_and_fail_the_invocation(sites, raw_records):
    ok = rpt.to_sarif(decode(raw_records, sites))["runs"][0]["invocations"][0]
    assert ok == {"executionSuccessful": True}
    dropped = rpt.to_sarif(decode(raw_records, sites, dropped=3, capacity=8))["runs"][0]["invocations"][0]
    assert dropped["executionSuccessful"] is False
    assert "3 violation records were DROPPED" in dropped["toolExecutionNotifications"][0]["message"]["text"]
    hung = rpt.to_sarif(decode(raw_records, sites), notes=[("error", "t::x: SpinTimeout: wave 2 spun")])
    (inv,) = hung["runs"][0]["invocations"]
    assert inv["executionSuccessful"] is False
    assert inv["toolExecutionNotifications"] == [
        {"level": "error", "message": {"text": "t::x: SpinTimeout: wave 2 spun"}}]


def test_a_report_with_no_kernel_says_nothing_was_checked(tmp_path):
    empty = merge_reports()
    for name in ("r.sarif", "r.json"):
        doc = json.loads(rpt.write_report(empty, tmp_path / name).read_text())
        text = json.dumps(doc)
        assert "NOTHING WAS CHECKED" in text, name
    inv = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["invocations"][0]
    assert inv["toolExecutionNotifications"][0]["level"] == "warning"
