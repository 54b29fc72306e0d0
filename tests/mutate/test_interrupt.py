"""Interrupting `ldssan mutate` (SIGTERM, or Ctrl-C to the terminal's process group) while its
workers run: every process it started ends, its temp folder is removed, one line says how
far it got and the command that resumes, the partial --json/--markdown are written (marked
partial), no traceback, and the exit status is 128 + the signal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .kernel_source import RING_KERNEL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _children() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (Linux)."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z":  # a zombie has ended; only its parent has not reaped it yet
            out.setdefault(int(fields[1]), []).append(int(name))
    return out


def _descendants(pid: int) -> set[int]:
    kids, found, todo = _children(), set(), [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads the process tree from /proc (Linux)")
@pytest.mark.parametrize("sig, to_group", [(signal.SIGTERM, False), (signal.SIGINT, True)], ids=["sigterm", "ctrl-c"])
def test_a_signal_mid_campaign_stops_every_process_and_says_how_to_resume(tmp_path, sig, to_group):
    (tmp_path / "ring_kernel.py").write_text(RING_KERNEL)
    # a short TMPDIR of its own: the forkserver's AF_UNIX socket lives there, and a path past
    # 107 bytes (pytest-xdist's tmp_path is long) cannot be bound
    temp = Path(tempfile.mkdtemp(prefix="ldssan-int-"))
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    argv = ["mutate", "ring_kernel.py", "-j", "1", "-k", "2", "--no-live", "--store", "s.jsonl",
            "--json", "out.json", "--markdown", "out.md"]
    proc = subprocess.Popen([sys.executable, "-m", "ldssan.cli", *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # mid-campaign: a pool worker (a child of the forkserver, not of the campaign) is running
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            started = _descendants(proc.pid)
            if any(p not in _children().get(proc.pid, []) for p in started):
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)  # the worker is inside its task
        started = _descendants(proc.pid)
        os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        leftover = list(temp.iterdir())
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 128 + sig, err
    deadline = time.monotonic() + 10  # the forkserver and resource tracker see their pipes close
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.05)
    assert len(started) >= 3 and not [p for p in started if _alive(p)]  # tracker, forkserver, worker
    assert not leftover  # ldssan-mutate-cache-* (the workers' variants) removed
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.strip().splitlines()[-1]
    name = signal.Signals(sig).name
    assert last.startswith(f"ldssan mutate: interrupted by {name} after ") and " of 24 mutants" in last
    assert last.endswith("resume with: ldssan " + " ".join(argv) + " --resume"), last
    record = json.loads((tmp_path / "out.json").read_text())
    assert record["partial"] is True and record["interrupted"] == name
    assert f"**Partial: interrupted by {name}**" in (tmp_path / "out.md").read_text()
    assert "all:" in out  # the summary of what is done
