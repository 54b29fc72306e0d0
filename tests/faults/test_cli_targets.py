"""FILE::FUNC given to `ldssan isa-check`, `ldssan rows` and `ldssan build --device` (the
commands that import a FILE and call a FUNC): anything wrong with them is one line on
stderr and exit status 2, never a traceback with exit 1 (which means "findings" or
"varies" for these commands) and never a pass. Before: a syntax error, an import error or
binary bytes in FILE, a FUNC that needs arguments or raises were raw tracebacks; a FILE
that calls sys.exit(0) at import made isa-check print nothing and exit 0; `rows` on a
FUNC that launches nothing said "nothing varies" (exit 0); a kernel the gfx1250 backend
rejects ("local memory exceeds limit") got 0 findings and its code objects written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ldssan.cli import main
from tests.faults.test_cli import _ldssan, _one_line_error

TARGETS = os.path.relpath(Path(__file__).with_name("cli_targets.py"))
COMMANDS = {"isa-check": ["isa-check"], "rows": ["rows", "--runs", "2"], "build": ["build", "--device"]}


def _run(command: str, target: str, tmp_path, capsys) -> tuple[int, str]:
    extra = ["-o", str(tmp_path / "out")] if command == "build" else []
    code = main([*COMMANDS[command], target, *extra])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ldssan {command}: error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return code, lines[0]


BAD_FILES = [
    ("syntax", b"def launch(:\n    pass\n", "cannot compile it at line 1: invalid syntax"),
    ("import", b"import no_such_module_for_ldssan\n",
     "importing it raised ModuleNotFoundError: No module named 'no_such_module_for_ldssan' (at "),
    ("binary", b"\x7fELF\x00\x01\xff\xfe", "cannot compile it: source code string cannot contain null bytes"),
    ("undecodable", b"x = '\xff\xfe'\n", "cannot compile it at line 1: (unicode error) 'utf-8' codec can't decode"),
    ("exit-0", b"import sys\nsys.exit(0)\n", "importing it called sys.exit(0) (at "),
]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("content, needle", [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_a_file_that_does_not_import_is_a_one_line_usage_error(tmp_path, capsys, command, content, needle):
    bad = tmp_path / "bad_kernels.py"
    bad.write_bytes(content)
    code, line = _run(command, f"{bad}::launch", tmp_path, capsys)
    assert code == 2 and f"'{bad}::launch': {bad}: {needle}" in line, line


def _line_of(tag: str) -> int:
    text = Path(TARGETS).read_text().splitlines()
    return next(n for n, s in enumerate(text, 1) if s.rstrip().endswith(f"# {tag}"))


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("func, needle", [
    ("needs_arguments", "needs_arguments() is called with no arguments, but it requires rows"),
    ("raises", "calling it raised ValueError: bad input shape (at {TARGETS}:{RAISES})"),
    ("exits", "calling it called sys.exit(3) (at {TARGETS}:"),
], ids=["needs-arguments", "raises", "exits"])
def test_a_func_that_needs_arguments_or_raises_is_a_one_line_usage_error(tmp_path, capsys, command, func, needle):
    code, line = _run(command, f"{TARGETS}::{func}", tmp_path, capsys)
    assert code == 2, line
    assert needle.format(TARGETS=TARGETS, RAISES=_line_of("RAISES")) in line, line


def test_a_module_target_that_does_not_import_names_the_module(tmp_path, capsys, monkeypatch):
    (tmp_path / "broken_module_for_ldssan.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, line = _run("isa-check", "broken_module_for_ldssan::launch", tmp_path, capsys)
    assert code == 2 and ("module 'broken_module_for_ldssan': importing it raised RuntimeError: no GPU here "
                          "(at ") in line, line


def test_rows_on_a_function_that_launches_nothing_is_not_a_pass(tmp_path, capsys):
    code, line = _run("rows", f"{TARGETS}::launches_nothing", tmp_path, capsys)
    assert code == 2
    assert "launched no FlyDSL kernel: nothing ran on the virtual gfx1250, so nothing was checked" in line


@pytest.mark.parametrize("command", ["isa-check", "build"])
def test_a_gfx1250_backend_error_is_not_a_clean_build(tmp_path, command):
    out = tmp_path / "out"
    args = ["-o", str(out)] if command == "build" else []
    proc = _ldssan(*COMMANDS[command], f"{TARGETS}::too_much_lds", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _one_line_error(proc, f"ldssan {command}: error: the gfx1250 backend reported 1 error, so its code object "
                          "is not the kernel as written: ")
    assert "local memory (400000) exceeds limit (327680)" in proc.stderr
    assert "0 finding" not in proc.stdout and not out.exists()  # nothing written


def test_a_rows_reference_that_raises_is_a_one_line_usage_error(tmp_path, capsys):
    assert main(["rows", f"{TARGETS}::tiny", "--runs", "2", "--reference", f"{TARGETS}::raises"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"ldssan rows: error: '{TARGETS}::raises': calling it raised ValueError: bad input "
                            f"shape (at {TARGETS}:{_line_of('RAISES')})\n")
    assert "Traceback" not in captured.out
