"""Cost of the sanitizer on the virtual gfx1250: sanitized / plain emulation time for the
bundled RMSNorm, measured in one run, alternating plain and sanitized launches. Prints JSON.

Both sides run the same kernel on the same inputs with the same batching; compile and
translation are excluded by a warm-up launch of each. Times are the emulator's launch time
(`LaunchRecord.seconds`, the workgroups' execution), and the whole host call for context.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from _common import machine, use_bench_cache


def _launch(fn, ctx_factory):
    with ctx_factory() as ctx:
        fn()
    return ctx


def measure(M: int, N: int, batch: int, rounds: int) -> dict:
    import time

    from ldssan import hook
    from ldssan.kernels.rmsnorm import rmsnorm
    from ldssan.runtime.emu import emulate

    torch.manual_seed(0)
    x = torch.randn(M, N, dtype=torch.bfloat16)
    g = torch.randn(N, dtype=torch.bfloat16)
    with emulate(batch=batch):
        rmsnorm(x, g)
    with hook.sanitize(batch=batch):
        rmsnorm(x, g)
    plain, san, plain_call, san_call = [], [], [], []
    for _ in range(rounds):
        with emulate(batch=batch) as cfg:
            t0 = time.perf_counter()
            rmsnorm(x, g)
            plain_call.append(time.perf_counter() - t0)
        plain.append(cfg.launches[-1].seconds)
        with hook.sanitize(batch=batch) as col:
            from ldssan.runtime.emu import frontend

            cfg2 = frontend.current()
            t0 = time.perf_counter()
            rmsnorm(x, g)
            san_call.append(time.perf_counter() - t0)
        san.append(cfg2.launches[-1].seconds)
        assert col.results and col.results[-1].report.clean
    p, s = statistics.median(plain), statistics.median(san)
    return {
        "batch": batch, "workgroups": M,
        "plain_launch_seconds": round(p, 5), "sanitized_launch_seconds": round(s, 5),
        "ratio": round(s / p, 3),
        "plain_call_seconds": round(statistics.median(plain_call), 5),
        "sanitized_call_seconds": round(statistics.median(san_call), 5),
        "call_ratio": round(statistics.median(san_call) / statistics.median(plain_call), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    use_bench_cache()
    runs = [measure(args.m, args.n, b, args.rounds) for b in (1, args.m)]
    print(json.dumps({
        "benchmark": "sanitizer_overhead",
        "kernel": f"ldssan.kernels.rmsnorm {args.m}x{args.n} bf16, 8 waves/workgroup",
        "machine": machine(),
        "median_of_rounds": args.rounds,
        "unbatched": runs[0],
        "batched": runs[1],
        "target_ratio": 1.5,
    }, indent=2))


if __name__ == "__main__":
    main()
