"""Virtual gfx1250 throughput on the bundled RMSNorm (`--m` rows of `--n` bf16, plain
emulation). Prints JSON.

Measures lane-ops/s (ops executed per wave x 32 lanes x workgroups, over the launch's
execution time) and seconds per workgroup, in the default mode (`emulate()` with no
options) first, then lockstep and the per-wave scheduler (see _common.mode_options).
Compile and translation happen in a
warm-up launch and are excluded; each figure is the best of `--repeat` launches.
"""

from __future__ import annotations

import json

from _common import kernel_runner, machine, mode_options, modes, setup
from sanitizer_overhead import rmsnorm_call


def measure(call, m: int, mode: str, repeat: int) -> dict:
    records: list = []
    run = kernel_runner(call, m, records=records)(mode, False)
    run()  # warm-up: trace, lower, translate
    records.clear()
    for _ in range(repeat):
        run()
    rec = min((recs[0] for _mode, _san, recs in records), key=lambda r: r.seconds)
    return {
        "options": mode_options(mode, m),
        "workgroups": m,
        "launch_seconds": round(rec.seconds, 5),
        "seconds_per_workgroup": round(rec.seconds / m, 6),
        "wave_ops": rec.wave_ops,
        "lane_ops": rec.lane_ops,
        "lane_ops_per_second": round(rec.lane_ops / rec.seconds),
    }


def main() -> None:
    args, pinned = setup(__doc__, m=64, n=8192, repeat=3)
    call = rmsnorm_call(args.m, args.n)
    names = modes(args.m)
    out = {
        "benchmark": "emu_rmsnorm",
        "kernel": f"ldssan.kernels.rmsnorm {args.m}x{args.n} bf16, 8 waves/workgroup",
        "machine": machine(), "pinned_to_one_core": pinned, "modes_measured": names,
    }
    if "per_wave" not in names:
        out["per_wave"] = "the default mode"
    out.update({mode: measure(call, args.m, mode, args.repeat) for mode in names})
    out["target_lane_ops_per_second"] = 100_000_000
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
