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
    assert main(["isa-check", f"{TARGET}::launch_raw", "--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_a_linker_that_fails_is_a_one_line_error(capsys, tmp_path, monkeypatch):
    lld = tmp_path / "llvm" / "bin" / "ld.lld"
    lld.parent.mkdir(parents=True)
    lld.write_text("#!/bin/sh\nexit 1\n")
    lld.chmod(0o755)
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))  # a user's ROCm root with ld.lld is used as is
    assert main(["isa-check", f"{TARGET}::launch_waited"]) == 2
    err = capsys.readouterr().err
    assert err == f"ldssan isa-check: error: linking with {tmp_path}/llvm/bin/ld.lld failed: lld invocation failed\n"
