"""Virtual gfx1250 on the bundled MegaMoE: seconds per `mega_moe` call (its four launches:
route, stage 1, stage 2, combine), plain and sanitized, and their ratio, for 32 tokens, 8
experts, model_dim 512, inter_dim 256, top-2, bf16 (or FP8) weights, the default pipeline.
Prints JSON.

The grouped GEMM's persistent workgroups take work items from an atomic ticket, so every
mode runs them resident together (resident = the kernel's persistent count): per wave, or
in lockstep one context per workgroup (lockstep does not batch them: a while loop). The
"default" block is the mode `emulate()` / `hook.sanitize()` use with no other option; then
"lockstep" and "per_wave" (see _common.mode_options). Plain and sanitized calls alternate in one
loop; compile and translation are excluded by a warm-up call of each; figures are medians
of the emulator's launch times (summed over the four launches), and of the whole call.
Pinned to one core when the OS allows it.
"""

from __future__ import annotations

import argparse
import json

from _common import kernel_runner, machine, modes, pin_one_core, plain_vs_sanitized, use_bench_cache

LAUNCHES = 4  # route, stage 1, stage 2, combine


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
    pinned = pin_one_core()

    import torch

    from ldssan.kernels.mega_moe import DEFAULTS, mega_moe

    t, e, d, inter = args.tokens, args.experts, args.model_dim, args.inter_dim
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    w1 = torch.randn(e, 2 * inter, d, generator=gen) / d ** 0.5
    w2 = torch.randn(e, d, inter, generator=gen) / inter ** 0.5
    wdt = torch.bfloat16 if args.weights == "bf16" else torch.float8_e4m3fn
    w1, w2 = w1.to(wdt), w2.to(wdt)
    resident = DEFAULTS["persistent"]

    records: list = []
    names = modes(1)
    measure = kernel_runner(lambda: mega_moe(x, logits, w1, w2), 1, launches=LAUNCHES,
                            base={"resident": resident}, records=records)
    got = plain_vs_sanitized(measure, names, args.rounds)
    recs = [r for mode, san, r in records if mode == "default" and not san][-1]  # the last timed call
    out = {
        "benchmark": "emu_mega_moe",
        "kernel": f"ldssan.kernels.mega_moe top-2, {t} tokens, {e} experts, model_dim {d}, inter_dim {inter}, "
                  f"{args.weights} weights, tiles {DEFAULTS['tile_m']}x{DEFAULTS['tile_n']}x{DEFAULTS['tile_k']}, "
                  f"nb={DEFAULTS['nb']}, {resident} persistent workgroups",
        "launches": [{"kernel": r.kernel, "grid": "x".join(map(str, r.grid)), "wave_ops": r.wave_ops,
                      "seconds": round(r.seconds, 4)} for r in recs],
        "machine": machine(), "pinned_to_one_core": pinned, "median_of_rounds": args.rounds,
        "modes_measured": names, "resident": resident,
    }
    if "per_wave" not in got:
        out["per_wave"] = "the default mode"
    out.update(got)
    out["targets"] = {"sanitized_seconds": 0.5}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
