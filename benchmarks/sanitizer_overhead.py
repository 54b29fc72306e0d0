"""Cost of the sanitizer on the virtual gfx1250: sanitized / plain emulation time for the
bundled RMSNorm (`--m` rows of `--n` bf16), measured in one run. Prints JSON.

The "default" block is the mode `emulate()` / `hook.sanitize()` use with no options; then
"lockstep" (both runs in lockstep: the sanitizer's own cost) and "per_wave" (the per-wave
scheduler for both; see _common.mode_options). Plain and sanitized runs of every mode alternate in one loop;
compile and translation are excluded by a warm-up launch of each. Times are medians of the
emulator's launch time (`LaunchRecord.seconds`) and of the whole host call for context.
"""

from __future__ import annotations

import json

from _common import kernel_runner, machine, modes, plain_vs_sanitized, setup


def rmsnorm_call(m: int, n: int):
    """The launch of RMSNorm over m x n bf16 rows on fixed random inputs."""
    import torch

    from ldssan.kernels.rmsnorm import rmsnorm

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, n, generator=gen).to(torch.bfloat16)
    g = torch.randn(n, generator=gen).to(torch.bfloat16)
    return lambda: rmsnorm(x, g)


def main() -> None:
    args, pinned = setup(__doc__, m=64, n=8192, rounds=5)
    names = modes(args.m)
    got = plain_vs_sanitized(kernel_runner(rmsnorm_call(args.m, args.n), args.m), names, args.rounds)
    out = {
        "benchmark": "sanitizer_overhead",
        "kernel": f"ldssan.kernels.rmsnorm {args.m}x{args.n} bf16, 8 waves/workgroup",
        "machine": machine(), "pinned_to_one_core": pinned, "median_of_rounds": args.rounds,
        "modes_measured": names,
    }
    if "per_wave" not in got:
        out["per_wave"] = "the default mode"
    out.update(got)
    out["target_ratio"] = 1.5
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
