"""FlyDSL's own test files under `FLYDSL_LDSSAN=1`, one core each, full default runs (issue #27).

    python benchmarks/flydsl_suite.py <FlyDSL>/tests/kernels                  # test_rmsnorm.py test_layernorm.py
    python benchmarks/flydsl_suite.py <FlyDSL>/tests/kernels test_softmax.py --cap 600 --slowest 15
    python benchmarks/flydsl_suite.py <tree> --memo 0                           # the same with launch memoization off

Fetches nothing: the first argument is the path of a FlyDSL test tree (a checkout's
`tests/kernels`); the folder holding its top package (`tests/`) is the working directory and
goes first on PYTHONPATH, so the tree's `from kernels... import` and `from tests... import`
resolve to that checkout. Each file runs as `python -m pytest <file> -q` in a process of its
own, pinned to one core (one torch / OpenMP thread), with FLYDSL_LDSSAN=1 and the ldssan JSON
report and a JUnit XML file written to a temporary folder. `--cap` seconds: a file still
running then is interrupted (SIGINT: pytest still writes both files and counts what ran), then
killed a minute later.

Prints JSON: per file the wall seconds, whether it finished within the cap and the budget
(600 s), pytest's outcome counts, the launches ldssan saw, how many were executed and how
many replayed by the memo (docs/memo.md) with the refusal reasons, the peak RSS of the
pytest process, and the `--slowest` tests with their seconds, launches and replays: where
the time goes. The machine (and its load) is reported once.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

from _common import machine

BUDGET_SECONDS = 600.0
DEFAULT_FILES = ("test_rmsnorm.py", "test_layernorm.py")


def import_root(tree: str) -> str:
    """The folder holding the tree's top package: up from `tree` while folders are packages."""
    root = os.path.abspath(tree)
    while os.path.exists(os.path.join(root, "__init__.py")):
        root = os.path.dirname(root)
    return root


def one_core(core: int | None = None) -> int | None:
    """The core this process and its children run on (None when the OS cannot pin):
    `core`, or the first one allowed."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    if core is None:
        core = sorted(os.sched_getaffinity(0))[0]
    os.sched_setaffinity(0, {core})  # inherited by the pytest process
    return core


def run_file(tree: str, name: str, cap: float, memo: str | None, extra: list[str], log: str | None) -> dict:
    root = import_root(tree)
    path = os.path.join(os.path.abspath(tree), name)
    with tempfile.TemporaryDirectory(prefix="ldssan-suite-") as tmp:
        report, junit = os.path.join(tmp, "ldssan.json"), os.path.join(tmp, "junit.xml")
        env = {**os.environ, "FLYDSL_LDSSAN": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
               "FLYDSL_GPU_ARCH": os.environ.get("FLYDSL_GPU_ARCH", "gfx1250")}
        if memo is not None:
            env["FLYDSL_LDSSAN_MEMO"] = memo
        cmd = [sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider",
               f"--ldssan-report={report}", f"--junitxml={junit}", *extra]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_interruptible)
        capped = threading.Event()
        kill = threading.Timer(60.0, _signal, (proc.pid, signal.SIGKILL))

        def stop() -> None:
            capped.set()
            _signal(proc.pid, signal.SIGINT)  # pytest still finishes its session: both files written
            kill.start()

        timer = threading.Timer(cap, stop)
        timer.start()
        out = proc.stdout.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        timer.cancel()
        kill.cancel()
        text = out.decode(errors="replace")
        if log:
            os.makedirs(log, exist_ok=True)
            with open(os.path.join(log, name + ".log"), "w", encoding="utf-8") as f:
                f.write(text)
        tail = text.strip().splitlines()[-3:]
        row = {"file": name, "wall_seconds": round(seconds, 1), "capped": capped.is_set(),
               "within_budget": not capped.is_set() and seconds <= BUDGET_SECONDS,
               "exit_code": os.waitstatus_to_exitcode(status),
               "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
               "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
               **_junit(junit), **_ldssan(report), "pytest_tail": tail}
        proc.returncode = row["exit_code"]
        return row


def _interruptible() -> None:
    """SIGINT as Python expects it in the child (a shell's background job starts with SIGINT
    ignored, and Python then installs no KeyboardInterrupt handler: the cap could only kill)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _junit(path: str) -> dict:
    """Outcome counts and each test's seconds from pytest's JUnit XML."""
    if not os.path.exists(path):
        return {"tests": None}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    times = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("name"):  # what an interrupt leaves: not a test
            continue
        kinds = {child.tag for child in case}
        kind = ("failed" if "failure" in kinds else "errors" if "error" in kinds
                else "skipped" if "skipped" in kinds else "passed")
        counts[kind] += 1
        times[case.get("name")] = (float(case.get("time", 0.0)), kind)
    return {"tests": counts, "_times": times}


def _ldssan(path: str) -> dict:
    """Launches seen, executed and replayed, and the memo's refusals, from ldssan's JSON report."""
    if not os.path.exists(path):
        return {"launches": None}
    with open(path, encoding="utf-8") as f:
        rep = json.load(f)
    per_test = rep.get("tests", {})
    launches = sum(t.get("launches", 0) for t in per_test.values())
    replayed = sum(t.get("replayed", 0) for t in per_test.values())
    memo = rep.get("memo", {})
    return {"launches": launches, "executed": launches - replayed, "replayed": replayed,
            "memo": memo, "violations": rep.get("summary", {}).get("violations"),
            "_per_test": {k.rsplit("::", 1)[-1]: t for k, t in per_test.items()}}


def slowest(row: dict, n: int) -> list[dict]:
    """The `n` slowest tests of a file: seconds, outcome, launches executed and replayed."""
    times, per_test = row.pop("_times", {}), row.pop("_per_test", {})
    out = []
    for name, (secs, kind) in sorted(times.items(), key=lambda kv: -kv[1][0])[:n]:
        t = per_test.get(name, {})
        out.append({"test": name, "seconds": round(secs, 1), "outcome": kind, "launches": t.get("launches", 0),
                    "replayed": t.get("replayed", 0)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", help="a FlyDSL test tree, e.g. <FlyDSL>/tests/kernels")
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    ap.add_argument("--cap", type=float, default=2 * BUDGET_SECONDS, help="wall seconds per file before it is stopped")
    ap.add_argument("--memo", default=None, help="FLYDSL_LDSSAN_MEMO for the runs (0: memoization off)")
    ap.add_argument("--slowest", type=int, default=10, help="tests listed per file, slowest first")
    ap.add_argument("--core", type=int, default=None, help="the core to pin to (default: the first allowed)")
    ap.add_argument("--log", default=None, help="a folder: each file's pytest output is written there "
                    "(with --pytest-args=-s, the tests' own per-shape lines)")
    ap.add_argument("--pytest-args", default="", help="more pytest arguments, one string (e.g. \"-k large\")")
    args = ap.parse_args()
    if not os.path.isdir(args.tree):
        ap.error(f"not a folder: {args.tree}")
    core = one_core(args.core)
    rows = []
    for name in args.files:
        row = run_file(args.tree, name, args.cap, args.memo, args.pytest_args.split(), args.log)
        row["slowest"] = slowest(row, args.slowest)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)  # each file as it ends (a long run)
    self_usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"benchmark": "flydsl_suite", "tree": os.path.abspath(args.tree), "pinned_core": core,
                      "budget_seconds": BUDGET_SECONDS, "cap_seconds": args.cap, "memo": args.memo or "default",
                      "machine": machine(), "files": rows,
                      "driver_rss_mib": round(self_usage.ru_maxrss / 1024, 1)}, indent=2))
    return 0 if all(r["within_budget"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
