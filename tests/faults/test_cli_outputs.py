"""Output paths of `ldssan rows`, `isa-check` and `build`: checked before the work, and a
write that still fails names the flag it came from. Before: `rows --json missing/dir/x.json`
passed the up-front check and failed after every run; `build -o EXISTING_FILE` built every
kernel, then said "[Errno 17] File exists"; a failing write said "[Errno 28] ..." with no
flag; `rows --rtol nan` (or a negative tolerance) ran every run, then ended in torch's
RuntimeError; a report path of spaces was accepted."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from ldssan import config, rows
from ldssan.cli import main

TARGETS = os.path.relpath(Path(__file__).with_name("cli_targets.py"))
SPLIT = os.path.relpath(Path(__file__).parents[1] / "isa" / "split_kernels.py")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_rows_creates_the_missing_directories_of_its_outputs(tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "x.json"
    assert main(["rows", f"{TARGETS}::tiny", "--runs", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["schema"] == rows.SCHEMA
    assert "nothing varies over 2 runs" in capsys.readouterr().out


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_rows_write_that_fails_names_its_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rows.RowsReport, "to_json", _disk_full)
    out = tmp_path / "r.json"
    assert main(["rows", f"{TARGETS}::tiny", "--runs", "2", "--json", str(out)]) == 2
    line = _one_error_line(capsys)
    assert line == f"ldssan rows: error: --json: cannot write {str(out)!r}: No space left on device"


@pytest.mark.parametrize("flag", ["--json", "--sarif", "--report"])
def test_an_isa_check_write_that_fails_names_its_flag(tmp_path, capsys, monkeypatch, flag):
    from ldssan.isa import output

    monkeypatch.setattr(output, "write_json", _disk_full)
    monkeypatch.setattr("ldssan.report.write_report", _disk_full)
    out = tmp_path / "isa.out"
    assert main(["isa-check", f"{SPLIT}::launch_waited", flag, str(out)]) == 2
    line = _one_error_line(capsys)
    assert line == f"ldssan isa-check: error: {flag}: cannot write {str(out)!r}: No space left on device"


def test_build_into_an_existing_file_is_refused_before_building(tmp_path, capsys, monkeypatch):
    existing = tmp_path / "taken"
    existing.write_text("not a directory")
    mark = tmp_path / "ran"
    monkeypatch.setenv("LDSSAN_TEST_MARK", str(mark))
    assert main(["build", "--device", f"{TARGETS}::marks_that_it_ran", "-o", str(existing)]) == 2
    line = _one_error_line(capsys)
    assert line == f"ldssan build: error: -o/--output: path {str(existing)!r} exists and is not a directory"
    assert not mark.exists(), "FUNC ran (the kernels were built) before the output was checked"
    assert existing.read_text() == "not a directory"


@pytest.mark.parametrize("args, needle", [
    (["--rtol", "nan"], "argument --rtol: 'nan': expected a finite number >= 0"),
    (["--rtol=-1e-3"], "argument --rtol: '-1e-3': expected a finite number >= 0"),
    (["--atol", "-1"], "argument --atol: '-1': expected a finite number >= 0"),
    (["--atol", "inf"], "argument --atol: 'inf': expected a finite number >= 0"),
    (["--batch", str(10**20)], f"argument --batch: '{10**20}': expected an integer from 1 to {config.batch_max()}"),
    (["--batch", "0"], f"argument --batch: '0': expected an integer from 1 to {config.batch_max()}"),
], ids=["rtol-nan", "rtol-negative", "atol-negative", "atol-inf", "batch-huge", "batch-0"])
def test_rows_bad_tolerance_or_batch_is_refused_before_any_run(tmp_path, capsys, monkeypatch, args, needle):
    mark = tmp_path / "ran"
    monkeypatch.setenv("LDSSAN_TEST_MARK", str(mark))
    with pytest.raises(SystemExit) as exc:
        main(["rows", f"{TARGETS}::marks_that_it_ran", "--runs", "2", *args])
    assert exc.value.code == 2
    line = _one_error_line(capsys)
    assert line.startswith("ldssan rows: error: ") and needle in line, line
    assert not mark.exists()


def test_explain_refuses_a_bad_tolerance_before_calling_the_function():
    def never():
        raise AssertionError("called")

    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(rows.RowsError, match="expected a finite number >= 0"):
            rows.explain(never, runs=2, rtol=bad)
        with pytest.raises(rows.RowsError, match="expected a finite number >= 0"):
            rows.explain(never, runs=2, atol=bad)


@pytest.mark.parametrize("path", ["", " ", "   ", "out/  "])
def test_a_report_path_of_spaces_is_refused(path):
    from ldssan.report import output_dir_problem, report_path_problem

    assert "names no file (it is empty or only spaces)" in report_path_problem(path)
    assert "names no directory (it is empty or only spaces)" in output_dir_problem(path)


def test_a_report_path_of_spaces_is_a_cli_usage_error(capsys):
    assert main(["isa-check", f"{SPLIT}::launch_waited", "--json", "   "]) == 2
    assert _one_error_line(capsys) == ("ldssan isa-check: error: --json: path '   ' names no file "
                                       "(it is empty or only spaces)")
