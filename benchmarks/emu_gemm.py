"""Virtual gfx1250 on the bundled GEMM: seconds per launch, plain and sanitized, and their
ratio, for FP8 256x256x256 with 8 waves per workgroup (nb = 3; 16 workgroups). Prints JSON.

Two execution modes: unbatched (one workgroup at a time, the default) and batched (all 16
workgroups in lockstep on the lane axis, `batch=16`). Plain and sanitized launches alternate
in one run (machines are noisy); compile and translation are excluded by a warm-up launch
of each; figures are medians of the emulator's launch time. Pinned to one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from _common import machine, use_bench_cache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--waves", type=int, default=8)
    ap.add_argument("--nb", type=int, default=3)
    ap.add_argument("--size", type=int, default=256)
    args = ap.parse_args()
    use_bench_cache()
    pinned = False
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        pinned = True
    torch.set_num_threads(1)

    from ldssan import hook
    from ldssan.kernels.gemm import gemm
    from ldssan.runtime.emu import emulate, frontend

    n = args.size
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, generator=gen).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(n, generator=gen) + 0.5, torch.rand(n, generator=gen) + 0.5

    def plain(batch):
        with emulate(batch=batch) as cfg:
            gemm(a, b, scale_a=sa, scale_b=sb, waves=args.waves, nb=args.nb)
        return cfg.launches[-1]

    def sanitized(batch):
        with hook.sanitize(batch=batch) as col:
            cfg = frontend.current()
            gemm(a, b, scale_a=sa, scale_b=sb, waves=args.waves, nb=args.nb)
        assert col.results[-1].report.clean
        return cfg.launches[-1]

    def measure(batch):
        plain(batch), sanitized(batch)  # warm-up
        p, s, calls = [], [], []
        for _ in range(args.rounds):
            p.append(plain(batch).seconds)
            t0 = time.perf_counter()
            s.append(sanitized(batch).seconds)
            calls.append(time.perf_counter() - t0)
        pm, sm = statistics.median(p), statistics.median(s)
        return {"batch": batch, "plain_seconds": round(pm, 4), "sanitized_seconds": round(sm, 4),
                "ratio": round(sm / pm, 3), "sanitized_call_seconds": round(statistics.median(calls), 4)}

    rec = plain(1)
    groups = rec.grid[0] * rec.grid[1] * rec.grid[2]
    print(json.dumps({
        "benchmark": "emu_gemm",
        "kernel": f"ldssan.kernels.gemm FP8 {n}x{n}x{n}, {args.waves} waves, nb={args.nb}, "
                  f"grid {rec.grid}, {rec.wave_ops} wave-ops",
        "machine": machine(), "pinned_to_one_core": pinned, "median_of_rounds": args.rounds,
        "unbatched": measure(1), "batched": measure(groups),
        "targets": {"sanitized_seconds": 0.3, "ratio": 1.5},
    }, indent=2))


if __name__ == "__main__":
    main()
