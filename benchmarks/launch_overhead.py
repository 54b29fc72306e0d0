"""Per-launch overhead of the virtual gfx1250 outside the kernel's execution: FlyDSL's trace,
ldssan's preparation and the host call, for a small RMSNorm. Prints JSON.

In one process, `--launches` launches of one specialization, plain emulation and sanitized:
each launch's wall time, the emulator's execution time (`LaunchRecord.seconds`) and the
difference (the overhead), and how many FlyDSL traces and compiles ran. Then a cold and a
warm child process on a fresh FlyDSL cache directory: the warm one must load the build from
the disk cache (no compile) and its first launch shows what that saves.
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

from _common import machine, pin_one_core
from emu_gemm import gemm_call
from sanitizer_overhead import rmsnorm_call


def _counters() -> dict:
    """Count FlyDSL traces and compiles (wrapping the two methods for this process)."""
    from flydsl.compiler import jit_function

    counts = {"traces": 0, "compiles": 0}

    def counting(owner, name, key):
        raw = owner.__dict__[name]
        is_classmethod = isinstance(raw, classmethod)
        fn = raw.__func__ if is_classmethod else raw

        def wrapper(*a, **k):
            counts[key] += 1
            return fn(*a, **k)

        setattr(owner, name, classmethod(wrapper) if is_classmethod else wrapper)

    counting(jit_function.JitFunction, "_trace", "traces")
    counting(jit_function.MlirCompiler, "compile", "compiles")
    return counts


def kernel_call(kernel: str, m: int, n: int):
    if kernel == "gemm":
        return gemm_call(n, 8, 3)
    return rmsnorm_call(m, n)


def run_launches(kernel: str, mode: str, m: int, n: int, launches: int) -> dict:
    from ldssan import hook
    from ldssan.runtime.emu import emulate, frontend

    counts = _counters()
    call = kernel_call(kernel, m, n)
    walls, execs = [], []
    # memo=0: identical launches are executed, not replayed (this measures each launch)
    with (hook.sanitize(memo=0) if mode == "sanitized" else emulate()) as got:
        cfg = frontend.current()
        for _ in range(launches):
            t0 = time.perf_counter()
            call()
            walls.append(time.perf_counter() - t0)
            execs.append(cfg.launches[-1].seconds)
    if mode == "sanitized":
        assert got.results and all(r.report.clean for r in got.results)
    over = [w - e for w, e in zip(walls, execs)]
    rest = slice(1, None)
    return {
        "first_launch_seconds": round(walls[0], 4),
        "later_launch_seconds_median": round(statistics.median(walls[rest]), 4) if launches > 1 else None,
        "later_execution_seconds_median": round(statistics.median(execs[rest]), 4) if launches > 1 else None,
        "later_overhead_seconds_median": round(statistics.median(over[rest]), 4) if launches > 1 else None,
        "launch_seconds": [round(w, 4) for w in walls],
        "traces": counts["traces"], "compiles": counts["compiles"],
    }


def spawn(kernel: str, mode: str, m: int, n: int, cache: str) -> dict:
    env = dict(os.environ, FLYDSL_RUNTIME_CACHE_DIR=cache)
    env.pop("FLYDSL_LDSSAN", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--kernel", kernel, "--m", str(m),
                           "--n", str(n)],
                          env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child {mode} failed:\n{proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["process_seconds"] = round(wall, 3)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kernel", choices=("rmsnorm", "gemm"), default="rmsnorm")
    ap.add_argument("--m", type=int, default=4, help="RMSNorm rows")
    ap.add_argument("--n", type=int, default=1024, help="RMSNorm row length, or the GEMM size N (N x N x N)")
    ap.add_argument("--launches", type=int, default=5)
    ap.add_argument("--child", choices=("plain", "sanitized"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_launches(args.kernel, args.child, args.m, args.n, 1)))
        return
    pinned = pin_one_core()
    what = (f"ldssan.kernels.gemm FP8 {args.n}x{args.n}x{args.n}, 8 waves, nb=3" if args.kernel == "gemm"
            else f"ldssan.kernels.rmsnorm {args.m}x{args.n} bf16, 8 waves/workgroup")
    out = {"benchmark": "launch_overhead", "kernel": what,
           "machine": machine(), "pinned_to_one_core": pinned}
    with tempfile.TemporaryDirectory(prefix="ldssan-bench-cache-") as cache:
        os.environ["FLYDSL_RUNTIME_CACHE_DIR"] = cache
        out["in_process"] = {mode: run_launches(args.kernel, mode, args.m, args.n, args.launches)
                             for mode in ("plain", "sanitized")}
    for mode in ("plain", "sanitized"):
        with tempfile.TemporaryDirectory(prefix="ldssan-bench-cache-") as cache:
            cold = spawn(args.kernel, mode, args.m, args.n, cache)
            warm = spawn(args.kernel, mode, args.m, args.n, cache)
        out.setdefault("processes", {})[mode] = {"cold": cold, "warm": warm}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
