"""Virtual gfx1250 on the bundled GEMM: seconds per launch, plain and sanitized, and their
ratio, for FP8 N x N x N (`--size`, default 256) with 8 waves per workgroup (nb = 3). Prints JSON.

The "default" block is the mode `emulate()` / `hook.sanitize()` use with no options (what a
user's `FLYDSL_LDSSAN=1` run gets: sanitized runs in lockstep, workgroups batched on the lane
axis automatically; plain runs per wave); "lockstep" runs both in lockstep (its ratio is the
sanitizer's own cost); "per_wave" is the per-wave scheduler for both. Every run of
every mode alternates plain / sanitized in one loop (machines are noisy); compile and
translation are excluded by a warm-up launch of each; figures are medians of the emulator's
launch time. Pinned to one core.
"""

from __future__ import annotations

import json

from _common import kernel_runner, machine, modes, plain_vs_sanitized, setup


def gemm_call(n: int, waves: int, nb: int):
    """The launch of an FP8 n x n x n GEMM on fixed random inputs."""
    import torch

    from ldssan.kernels.gemm import gemm

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, generator=gen).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(n, generator=gen) + 0.5, torch.rand(n, generator=gen) + 0.5
    return lambda: gemm(a, b, scale_a=sa, scale_b=sb, waves=waves, nb=nb)


def main() -> None:
    args, pinned = setup(__doc__, rounds=5, waves=8, nb=3, size=256)

    from ldssan.runtime.emu import emulate

    n = args.size
    call = gemm_call(n, args.waves, args.nb)
    with emulate() as cfg:
        call()
    rec = cfg.launches[-1]
    groups = rec.grid[0] * rec.grid[1] * rec.grid[2]
    names = modes(groups)
    out = {
        "benchmark": "emu_gemm",
        "kernel": f"ldssan.kernels.gemm FP8 {n}x{n}x{n}, {args.waves} waves, nb={args.nb}, "
                  f"grid {rec.grid}, {rec.wave_ops} wave-ops",
        "machine": machine(), "pinned_to_one_core": pinned, "median_of_rounds": args.rounds,
        "modes_measured": names,
    }
    got = plain_vs_sanitized(kernel_runner(call, groups), names, args.rounds)
    if "per_wave" not in got:
        out["per_wave"] = "the default mode"
    out.update(got)
    out["targets"] = {"sanitized_seconds_512": 0.435, "ratio": 1.5}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
