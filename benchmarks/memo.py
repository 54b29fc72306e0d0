"""Launch memoization on an inline benchmark loop: `--launches` identical sanitized launches of
the bundled RMSNorm (`--m` rows of `--n` bf16, one output tensor reused, as FlyDSL's
`run_perftest` does), with the memo on (the default budget) and off, in one run. Prints JSON.

Each round runs the loop once with the memo on and once off, alternating (machines are
noisy); the figures are medians over `--rounds` of the loop's wall time. Compile and
translation happen in a warm-up loop and are excluded. With the memo on, the output (only
written, never read) is not in the key, so one launch runs and the rest are replayed
(docs/memo.md); the outputs of both loops must be equal.
"""

from __future__ import annotations

import json
import statistics
import time

from _common import machine, setup


def loop(x, g, out, launches: int, budget: int) -> tuple[float, list[str]]:
    """(wall seconds of `launches` sanitized launches, each launch's memo outcome)."""
    from ldssan import hook
    from ldssan.kernels.rmsnorm import rmsnorm

    out.zero_()
    t0 = time.perf_counter()
    with hook.sanitize(memo=budget) as col:
        for _ in range(launches):
            rmsnorm(x, g, out=out)
    seconds = time.perf_counter() - t0
    if len(col.results) != launches or not all(r.report.clean for r in col.results):
        raise RuntimeError("the sanitizer did not report every RMSNorm launch clean")
    return seconds, [r.memo for r in col.results]


def main() -> None:
    args, pinned = setup(__doc__, m=64, n=8192, launches=20, rounds=3)
    import torch

    from ldssan.runtime.emu.memo import DEFAULT_BUDGET

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.m, args.n, generator=gen).to(torch.bfloat16)
    g = torch.randn(args.n, generator=gen).to(torch.bfloat16)
    outs = {"on": torch.empty_like(x), "off": torch.empty_like(x)}
    budgets = {"on": DEFAULT_BUDGET, "off": 0}
    for name in budgets:  # warm-up: trace, lower, translate
        loop(x, g, outs[name], 1, budgets[name])
    times: dict[str, list[float]] = {"on": [], "off": []}
    memo_outcomes: dict[str, list[str]] = {}
    for _ in range(args.rounds):
        for name, budget in budgets.items():
            seconds, memo_outcomes[name] = loop(x, g, outs[name], args.launches, budget)
            times[name].append(seconds)
    if not torch.equal(outs["on"], outs["off"]):
        raise RuntimeError("the memoized loop's output differs from the executed loop's")
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    out = {
        "benchmark": "memo",
        "kernel": f"ldssan.kernels.rmsnorm {args.m}x{args.n} bf16, sanitized (default mode)",
        "machine": machine(), "pinned_to_one_core": pinned, "median_of_rounds": args.rounds,
        "launches": args.launches,
        "memo_on": {"seconds": round(on, 4), "seconds_per_launch": round(on / args.launches, 5),
                    "executed": sum(m != "replayed" for m in memo_outcomes["on"]),
                    "replayed": memo_outcomes["on"].count("replayed")},
        "memo_off": {"seconds": round(off, 4), "seconds_per_launch": round(off / args.launches, 5),
                     "executed": args.launches, "replayed": 0},
        "speedup": round(off / on, 2),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
