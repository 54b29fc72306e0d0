"""Virtual gfx1250 on the bundled MegaMoE: seconds per `mega_moe` call (its four launches:
route, stage 1, stage 2, combine), plain and sanitized, and their ratio, for 32 tokens, 8
experts, model_dim 512, inter_dim 256, top-2, bf16 (or FP8) weights, the default pipeline.
Prints JSON.

Plain and sanitized calls alternate in one run (machines are noisy); compile and translation
are excluded by a warm-up call of each; figures are medians of the emulator's launch times
(summed over the four launches), plus the wall time of a whole sanitized call. The grouped
GEMM's persistent workgroups run resident together (resident = 4). Pinned to one core when
the OS allows it.
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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--model-dim", type=int, default=512)
    ap.add_argument("--inter-dim", type=int, default=256)
    ap.add_argument("--weights", choices=("bf16", "fp8"), default="bf16")
    args = ap.parse_args()
    use_bench_cache()
    pinned = False
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        pinned = True
    torch.set_num_threads(1)

    from ldssan import hook
    from ldssan.kernels.mega_moe import DEFAULTS, mega_moe
    from ldssan.runtime.emu import emulate, frontend

    t, e, d, inter = args.tokens, args.experts, args.model_dim, args.inter_dim
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    w1 = torch.randn(e, 2 * inter, d, generator=gen) / d ** 0.5
    w2 = torch.randn(e, d, inter, generator=gen) / inter ** 0.5
    wdt = torch.bfloat16 if args.weights == "bf16" else torch.float8_e4m3fn
    w1, w2 = w1.to(wdt), w2.to(wdt)
    resident = DEFAULTS["persistent"]

    def plain():
        with emulate(resident=resident) as cfg:
            mega_moe(x, logits, w1, w2)
        return cfg.launches[-4:]

    def sanitized():
        with hook.sanitize(resident=resident) as col:
            cfg = frontend.current()
            mega_moe(x, logits, w1, w2)
        assert all(r.report.clean for r in col.results) and len(col.results) == 4
        return cfg.launches[-4:]

    plain(), sanitized()  # warm-up
    p, s, calls = [], [], []
    for _ in range(args.rounds):
        p.append(sum(r.seconds for r in plain()))
        t0 = time.perf_counter()
        s.append(sum(r.seconds for r in sanitized()))
        calls.append(time.perf_counter() - t0)
    recs = plain()
    pm, sm = statistics.median(p), statistics.median(s)
    print(json.dumps({
        "benchmark": "emu_mega_moe",
        "kernel": f"ldssan.kernels.mega_moe top-2, {t} tokens, {e} experts, model_dim {d}, inter_dim {inter}, "
                  f"{args.weights} weights, tiles {DEFAULTS['tile_m']}x{DEFAULTS['tile_n']}x{DEFAULTS['tile_k']}, "
                  f"nb={DEFAULTS['nb']}, {resident} persistent workgroups",
        "launches": [{"kernel": r.kernel, "grid": "x".join(map(str, r.grid)), "wave_ops": r.wave_ops,
                      "seconds": round(r.seconds, 4)}
                     for r in recs],
        "machine": machine(), "pinned_to_one_core": pinned, "median_of_rounds": args.rounds,
        "plain_seconds": round(pm, 4), "sanitized_seconds": round(sm, 4), "ratio": round(sm / pm, 3),
        "sanitized_call_seconds": round(statistics.median(calls), 4),
    }, indent=2))


if __name__ == "__main__":
    main()
