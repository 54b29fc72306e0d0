"""`ldssan isa-check` end to end: a kernel whose compiled code runs `s_barrier_signal` with
its LDS store still in flight (raw split barrier, no fence) is reported with both ISA
instructions, their offsets and both source lines (golden text); its twin with the
release wait is clean; bad targets are one-line usage errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ldssan.cli import main
from tests.isa import split_kernels

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
TARGET = os.path.relpath(HERE / "split_kernels.py")


def _normalized(text: str) -> str:
    return text.replace(str(HERE.resolve()), "<tests/isa>")


def test_raw_split_barrier_is_reported_with_both_source_lines(capsys, tmp_path):
    out = tmp_path / "sub" / "isa.json"
    rc = main(["isa-check", f"{TARGET}::launch_raw", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    assert _normalized(text) == (GOLDEN / "lds050_raw_split.txt").read_text()
    doc = json.loads(out.read_text())
    assert doc["schema"] == "ldssan.isa/1" and doc["summary"] == {"kernels": 1, "findings": 1}
    (f,) = doc["kernels"][0]["findings"]
    assert f["code"] == "LDS050"
    assert (f["other"]["line"], f["this"]["line"]) == (split_kernels.line_of("STORE"), split_kernels.line_of("SIGNAL"))
    assert f["other"]["isa"].startswith("ds_store") and f["this"]["isa"].startswith("s_barrier_signal")
    assert f["other"]["offset"] < f["this"]["offset"]


def test_the_twin_with_the_release_wait_is_clean(capsys):
    rc = main(["isa-check", f"{TARGET}::launch_waited"])
    assert rc == 0
    assert capsys.readouterr().out.endswith(", 0 finding(s)\n")


def test_bad_targets_are_one_line_usage_errors(capsys, tmp_path):
    for target, message in [("nofile.py::f", "no file 'nofile.py'"),
                            (f"{TARGET}::missing", "has no callable 'missing'"),
                            (f"{TARGET}", "expected FILE::FUNC"),
                            (f"{TARGET}::line_of_nothing", "has no callable"),
                            (f"{TARGET}::launch_nothing", "built no FlyDSL kernel")]:
        assert main(["isa-check", target]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    for flag in ("--json", "--sarif", "--report"):
        assert main(["isa-check", f"{TARGET}::launch_raw", flag, str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ldssan isa-check: error: {flag}: ") and "is a directory" in err


def test_a_linker_that_fails_is_a_one_line_error(capsys, tmp_path, monkeypatch):
    lld = tmp_path / "llvm" / "bin" / "ld.lld"
    lld.parent.mkdir(parents=True)
    lld.write_text("#!/bin/sh\nexit 1\n")
    lld.chmod(0o755)
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))  # a user's ROCm root with ld.lld is used as is
    assert main(["isa-check", f"{TARGET}::launch_waited"]) == 2
    err = capsys.readouterr().err
    assert err == f"ldssan isa-check: error: linking with {tmp_path}/llvm/bin/ld.lld failed: lld invocation failed\n"


def _validator(name: str, draft):
    import jsonschema

    schema = json.loads((HERE.parent / "report" / "data" / name).read_text(encoding="utf-8"))
    draft.check_schema(schema)
    return draft(schema, format_checker=jsonschema.FormatChecker())


def test_sarif_and_report_json_validate_and_name_both_lines(capsys, tmp_path):
    import jsonschema

    sarif, report = tmp_path / "isa.sarif", tmp_path / "isa-report.json"
    assert main(["isa-check", f"{TARGET}::launch_raw", "--sarif", str(sarif), "--report", str(report)]) == 1
    capsys.readouterr()
    signal, store = split_kernels.line_of("SIGNAL"), split_kernels.line_of("STORE")

    log = json.loads(sarif.read_text())
    assert not list(_validator("sarif-schema-2.1.0.json", jsonschema.Draft4Validator).iter_errors(log))
    (run,) = log["runs"]
    (res,) = run["results"]
    assert res["ruleId"] == "LDS050" and res["level"] == "warning"
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == "LDS050"
    here = res["locations"][0]["physicalLocation"]
    (there,) = res["relatedLocations"]
    assert here["artifactLocation"]["uri"].endswith("tests/isa/split_kernels.py")
    assert (here["region"]["startLine"], there["physicalLocation"]["region"]["startLine"]) == (signal, store)
    assert "s_barrier_signal -1 at raw_split_0+0x" in res["message"]["text"]
    assert run["invocations"][0]["executionSuccessful"] is True

    doc = json.loads(report.read_text())
    assert not list(_validator("ldssan-report.schema.json", jsonschema.Draft7Validator).iter_errors(doc))
    (v,) = doc["violations"]
    assert (v["rule"], v["access"]["site"]["line"], v["other"]["site"]["line"]) == ("LDS050", signal, store)
    assert v["access"]["site"]["kind"] == "instruction" and v["other"]["site"]["op"].startswith("ds_store_b32")
    (k,) = doc["kernels"]
    assert k["name"] == "raw_split_0" and k["sites"] == 20 and v["build"] == k["build"]


def test_clean_twin_sarif_has_no_result(capsys, tmp_path):
    sarif = tmp_path / "clean.sarif"
    assert main(["isa-check", f"{TARGET}::launch_waited", "--sarif", str(sarif)]) == 0
    capsys.readouterr()
    (run,) = json.loads(sarif.read_text())["runs"]
    assert run["results"] == [] and [k["name"] for k in run["properties"]["kernels"]] == ["waited_split_0"]
