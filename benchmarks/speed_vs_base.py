"""Old vs new in one run: the virtual gfx1250's launch time on the shapes of issue #27
("native speed"), for a base revision (`--base`, checked out into a temporary git worktree)
and this checkout, measured alternately in the same run. Prints JSON.

Each tree gets one worker process (this script with `--worker`, `PYTHONPATH` set to the
tree, so `import ldssan` is that tree's code; both workers pinned to the same core and never
running at once). A warm-up launch of every case in each worker excludes compile and
translation; then for `--rounds` rounds every case runs once in the base worker and once in
the new one, in turn. Reported per case and tree: the median of the emulator's launch time
(`LaunchRecord.seconds`), and the new/base ratio of those medians.

Cases (issue #27 targets): sanitized RMSNorm 4096x8192 and 64x8192 bf16, sanitized FP8
GEMM (`--gemm`, default 1024) and the bundled MegaMoE (its four launches) in the default mode (`hook.sanitize()` with no options); plain
RMSNorm 4096x8192 in lockstep (lane-ops/s). Every sanitized run must come back clean.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TARGETS = {"rmsnorm_4096x8192_sanitized_s": 0.15, "rmsnorm_64x8192_sanitized_s": 0.010,
           "gemm_1024_sanitized_s": 0.79, "rmsnorm_4096x8192_lockstep_plain_lane_ops_per_s": 1e9,
           "mega_moe_sanitized_s": 0.1}


# -- worker: runs inside the tree under test ----------------------------------------------

def _cases(gemm_n: int) -> dict:
    from _common import kernel_runner
    from emu_gemm import gemm_call
    from sanitizer_overhead import rmsnorm_call

    big, small = rmsnorm_call(4096, 8192), rmsnorm_call(64, 8192)
    records: list = []
    return {
        "rmsnorm_4096x8192_sanitized_s": (kernel_runner(big, 4096)("default", True), None),
        "rmsnorm_64x8192_sanitized_s": (kernel_runner(small, 64)("default", True), None),
        f"gemm_{gemm_n}_sanitized_s": (kernel_runner(gemm_call(gemm_n, 8, 3), 1)("default", True), None),
        "rmsnorm_4096x8192_lockstep_plain_lane_ops_per_s": (
            kernel_runner(big, 4096, records=records)("lockstep", False), records),
        "mega_moe_sanitized_s": _mega_moe(),
    }


def _mega_moe():
    """The bundled MegaMoE's four launches (emu_mega_moe.py's default problem), sanitized."""
    import torch

    from _common import kernel_runner
    from ldssan.kernels.mega_moe import DEFAULTS, mega_moe

    t, e, d, inter = 32, 8, 512, 256
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    w1 = (torch.randn(e, 2 * inter, d, generator=gen) / d ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(e, d, inter, generator=gen) / inter ** 0.5).to(torch.bfloat16)
    run = kernel_runner(lambda: mega_moe(x, logits, w1, w2), 1, launches=4,
                        base={"resident": DEFAULTS["persistent"]})("default", True)
    return run, None


def worker(gemm_n: int) -> None:
    sys.path.insert(0, HERE)
    from _common import pin_one_core, use_bench_cache

    use_bench_cache()
    pinned = pin_one_core()
    import ldssan

    cases = _cases(gemm_n)
    print(json.dumps({"ready": True, "ldssan": os.path.dirname(os.path.dirname(ldssan.__file__)),
                      "pinned": pinned}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        run, records = cases[name]
        if records is not None:
            records.clear()
        cpu0 = time.process_time()
        seconds = run()
        cpu = time.process_time() - cpu0
        value = seconds
        if records is not None:  # lane-ops/s of the launch
            rec = records[-1][2][0]
            value = rec.lane_ops / rec.seconds
        print(json.dumps({"case": name, "value": value, "seconds": seconds, "cpu": cpu}), flush=True)


# -- controller ---------------------------------------------------------------------------

class Worker:
    def __init__(self, tree: str, gemm_n: int):
        env = dict(os.environ, PYTHONPATH=tree)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--gemm", str(gemm_n)],
                                     cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read()
        if os.path.realpath(self.info["ldssan"]) != os.path.realpath(tree):
            raise RuntimeError(f"worker imported ldssan from {self.info['ldssan']}, not {tree}")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a benchmark worker stopped (see its stderr above)")
        return json.loads(line)

    def run(self, case: str) -> tuple[float, float]:
        """(the case's figure, CPU seconds of the whole host call)."""
        self.proc.stdin.write(case + "\n")
        self.proc.stdin.flush()
        got = self._read()
        return got["value"], got["cpu"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="c01c3eb", help="base revision (default: c01c3eb)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gemm", type=int, default=1024, help="GEMM size N (N x N x N FP8)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.gemm)

    sys.path.insert(0, HERE)
    from _common import machine

    tmp = tempfile.mkdtemp(prefix="ldssan-base-")
    base_tree = os.path.join(tmp, "tree")
    _git("worktree", "add", "--detach", base_tree, args.base)
    try:
        trees = {"base": base_tree, "new": ROOT}
        workers = {name: Worker(tree, args.gemm) for name, tree in trees.items()}
        names = [n for n in _case_names(args.gemm) if not args.cases or n in args.cases.split(",")]
        for name in names:  # warm-up: compile, translate
            for w in workers.values():
                w.run(name)
        got = {name: {t: [] for t in trees} for name in names}
        cpu = {name: {t: [] for t in trees} for name in names}
        for _ in range(args.rounds):
            for name in names:
                for t, w in workers.items():
                    value, seconds = w.run(name)
                    got[name][t].append(value)
                    cpu[name][t].append(seconds)
        for w in workers.values():
            w.close()
    finally:
        _git("worktree", "remove", "--force", base_tree)
        os.rmdir(tmp)

    out = {
        "benchmark": "speed_vs_base",
        "base": f"{args.base} ({_git('rev-parse', '--short', args.base)})",
        "new": f"{_git('rev-parse', '--short', 'HEAD')}" + (" + uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else ""),
        "machine": machine(), "pinned_to_one_core": all(w.info["pinned"] for w in workers.values()),
        "rounds": args.rounds, "statistic": "median of the rounds (and min, and the median of per-round new/base ratios) of the "
                     "launch seconds (LaunchRecord.seconds); lane-ops/s for the lockstep plain case",
        "cases": {},
    }
    for name in names:
        b, n = statistics.median(got[name]["base"]), statistics.median(got[name]["new"])
        paired = [y / x for x, y in zip(got[name]["base"], got[name]["new"])]
        entry = {"base": _round(b), "new": _round(n), "new_over_base": round(n / b, 3),
                 # each round's new / base (the two ran back to back): robust to load drifting
                 "median_of_round_ratios": round(statistics.median(paired), 3),
                 "base_min": _round(min(got[name]["base"])), "new_min": _round(min(got[name]["new"])),
                 # CPU time of the whole host call (launch + decode + ldssan's per-call work):
                 # what the process itself spent, less sensitive to a busy machine than wall time
                 "call_cpu_base": _round(statistics.median(cpu[name]["base"])),
                 "call_cpu_new": _round(statistics.median(cpu[name]["new"])),
                 "base_rounds": [_round(x) for x in got[name]["base"]],
                 "new_rounds": [_round(x) for x in got[name]["new"]]}
        if name in TARGETS:
            entry["target"] = TARGETS[name]
        out["cases"][name] = entry
    print(json.dumps(out, indent=2))


def _case_names(gemm_n: int) -> list[str]:
    return ["rmsnorm_4096x8192_sanitized_s", "rmsnorm_64x8192_sanitized_s", f"gemm_{gemm_n}_sanitized_s",
            "rmsnorm_4096x8192_lockstep_plain_lane_ops_per_s", "mega_moe_sanitized_s"]


def _round(x: float) -> float:
    return float(f"{x:.4g}")


if __name__ == "__main__":
    main()
