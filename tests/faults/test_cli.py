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


def test_ldssan_env_into_a_closed_pipe_ends_quietly():
    # `ldssan env | head -1`: before, "[Errno 32] Broken pipe" on stderr and exit 2 (a usage error).
    # The reading end is closed before ldssan writes anything, so every write meets the closed pipe.
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "ldssan.cli", "env"], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ), timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr  # 128 + SIGPIPE: what a shell shows for `cat` there
    assert proc.stderr == ""


def test_counts_of_launches_are_plural_english():
    from ldssan.console import counted

    assert [counted(n, "launch") for n in (1, 2)] == ["1 launch", "2 launches"]  # before: "2 launchs"
    assert [counted(n, w) for n, w in ((2, "byte"), (3, "pass"), (0, "violation"))] == [
        "2 bytes", "3 passes", "0 violations"]


def test_a_tensor_on_another_device_is_named_once():
    # before: "argument argument 'Out'.torch_tensor is on meta"
    import torch

    import ldssan
    from ldssan.runtime.emu.memory import EmuMemoryError
    from tests.isa import split_kernels

    with pytest.raises(EmuMemoryError) as exc, ldssan.sanitize():
        split_kernels._waited(torch.zeros(split_kernels.N, dtype=torch.int32, device="meta"))
    assert "argument argument" not in str(exc.value) and "argument 'Out'" in str(exc.value)
