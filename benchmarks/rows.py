"""`ldssan rows` on the bundled RMSNorm (256 x 8192, bf16) with a planted race (the barrier
publishing the per-wave partials deleted), K = 16 runs: wall seconds for the whole
explanation, and the cost of taint over plain sanitizing (one sanitized launch against one
sanitized launch with taint, same policy, translations warm). Prints JSON. The batch is
`rows`' default: decided from the kernel's IR (RMSNorm's workgroups are independent: 8 in
lockstep); `--batch N` forces one.

    python benchmarks/rows.py [--rows 256] [--cols 8192] [--runs 16] [--batch N] [--json out.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time

import torch

from _common import machine, use_bench_cache


def planted_rmsnorm():
    """The bundled RMSNorm with the first `fx.gpu.barrier()` of `_block_sum` deleted."""
    from ldssan.kernels import rmsnorm as rms
    from ldssan.variants import Edit, load_variant

    source = inspect.getsource(rms).splitlines()  # Edit lines are 1-based lines of this file
    start = next(i for i, s in enumerate(source) if s.strip().startswith("def _block_sum"))
    barrier = next(i for i in range(start, len(source)) if source[i].strip() == "fx.gpu.barrier()")
    return load_variant(rms, [Edit(barrier + 1, None)], tag="rows_bench_no_barrier_1")


def measure(M: int, N: int, runs: int, rounds: int, batch: int | None) -> dict:
    from ldssan import hook, rows
    from ldssan.runtime.emu.taint import tracking

    mod = planted_rmsnorm()
    torch.manual_seed(0)
    x = torch.randn(M, N).to(torch.bfloat16) * torch.logspace(-2, 2, M).reshape(M, 1).to(torch.bfloat16)
    g = torch.randn(N).to(torch.bfloat16)

    def call():
        return mod.rmsnorm(x, g)

    t0 = time.perf_counter()
    rep = rows.explain(call, runs=runs, batch=batch)
    total = time.perf_counter() - t0

    batch = rep.batch  # the overhead pair runs at the batch `explain` used
    sources = rows.taint_sources([v for v in rep.violations if int(v.rule) in rows.RACE_RULES])
    plain, taint = [], []
    for _ in range(rounds):  # alternating, translations already warm from `explain`
        with hook.sanitize("round-robin", batch=batch):
            t0 = time.perf_counter()
            call()
            plain.append(time.perf_counter() - t0)
        with tracking(sources), hook.sanitize("round-robin", batch=batch):
            t0 = time.perf_counter()
            call()
            taint.append(time.perf_counter() - t0)
    p, t = statistics.median(plain), statistics.median(taint)
    out = rep.outputs[0]
    return {
        "kernel": "rmsnorm (barrier publish_partials deleted)", "shape": [M, N], "runs": runs, "batch": batch,
        "batch_reason": rep.batch_reason,
        "rows_seconds": round(total, 2), "phases_seconds": {k: round(v, 2) for k, v in rep.timings.items()},
        "sanitized_call_seconds": round(p, 3), "taint_sanitized_call_seconds": round(t, 3),
        "taint_overhead": round(t / p, 3),
        "varying_elements": out.varying, "varying_rows": len(out.varying_rows), "unexplained": out.unexplained,
        "races": [{"rule": r.rule, "this": r.this, "other": r.other, "elements": r.elements, "rows": len(r.rows)}
                  for r in rep.races],
        "latent": len(rep.latent), "target_seconds": 60, "machine": machine(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--cols", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--batch", type=int, default=None, help="workgroups per emulator batch (default: automatic)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating launches for the overhead figure")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    use_bench_cache()
    result = measure(args.rows, args.cols, args.runs, args.rounds, args.batch)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
