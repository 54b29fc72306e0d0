"""The command line: an error the user can fix is one line on stderr, no traceback, with
the exit status the help documents (2 usage error, 1 nothing to run). Before, `ldssan
demo --policy banana` and an unwritable output path were raw tracebacks, `ldssan mutate
--only bogus` exited 0, and `--timeout 0` was accepted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ldssan.cli import build_parser
from ldssan.cli import main as ldssan_main
from tests.mutate.kernel_source import RING_KERNEL


def _ldssan(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "ldssan.cli", *args], capture_output=True, text=True,
                          env=full, timeout=300)


def _one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_demo_with_a_bad_policy_is_a_one_line_usage_error():
    proc = _ldssan("demo", "--policy", "banana")
    assert proc.returncode == 2
    _one_line_error(proc, "ldssan demo: error: argument --policy: unknown scheduler policy 'banana'")


def test_bad_env_value_stops_the_demo_before_it_runs():
    proc = _ldssan("demo", env={"FLYDSL_LDSSAN_COVERAGE": "maybe"})
    assert proc.returncode == 2
    _one_line_error(proc, "FLYDSL_LDSSAN_COVERAGE='maybe'")


def test_ldssan_env_still_lists_options_when_a_value_is_bad():
    proc = _ldssan("env", env={"FLYDSL_LDSSAN_MODE": "loud"})
    assert proc.returncode == 0 and "FLYDSL_LDSSAN_KEEP_TEMP" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (["--timeout", "0"], "argument --timeout: '0': expected a number of seconds > 0"),
    (["--timeout", "nan"], "argument --timeout: 'nan': expected a number of seconds > 0"),
    (["-k", "0"], "argument -k/--launches: '0': expected an integer >= 1"),
    (["-j", "x"], "argument -j/--jobs: 'x': expected an integer >= 1"),
    (["--policy", "banana"], "argument --policy: unknown scheduler policy"),
], ids=["timeout-0", "timeout-nan", "launches-0", "jobs-text", "policy"])
def test_mutate_bad_option_is_a_one_line_usage_error(capsys, args, needle):
    with pytest.raises(SystemExit) as exc:
        ldssan_main(["mutate", "ldssan.kernels.rmsnorm", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ldssan mutate: error:") and needle in err[0], err


def test_mutate_unwritable_output_path_is_refused_before_running(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code = ldssan_main(["mutate", "ldssan.kernels.rmsnorm", "--json", str(tmp_path / "file" / "out.json")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--json" in err[0] and "is not a directory" in err[0], err


def test_mutate_only_an_unknown_id_is_nothing_to_run(tmp_path, capsys):
    kernel = tmp_path / "ring_kernel.py"
    kernel.write_text(RING_KERNEL)
    code = ldssan_main(["mutate", str(kernel), "-j", "1", "-k", "1", "--no-live", "--only", "bogus"])
    assert code == 1
    assert "nothing to run: --only bogus matched no mutant" in capsys.readouterr().err


def test_documented_exit_statuses_are_in_the_help():
    text = build_parser().format_help()
    assert "1 a check failed (demo) or nothing to run (mutate)" in text and "2 usage error" in text
