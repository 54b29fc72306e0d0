"""How the virtual gfx1250's cost grows with work, in the default mode (`emulate()` /
`hook.sanitize()` with no options): GEMM FP8 256³ and 512³ (1024³ with `--large`), RMSNorm
64 and 1024 rows of 8192 bf16 (4096 rows with `--large`). Prints JSON.

All sizes of one kernel are one specialization (sizes are run-time arguments), so one
warm-up launch at the smallest size takes compile and translation out of every figure; each
size then runs plain and sanitized alternately `--rounds` times (medians). Per size: the
wave-ops executed, seconds, the sanitized/plain ratio, microseconds per wave-op, and the
growth of work and of time against the smallest size. Pinned to one core.
"""

from __future__ import annotations

import json

from _common import kernel_runner, machine, plain_vs_sanitized, setup
from emu_gemm import gemm_call
from sanitizer_overhead import rmsnorm_call


def series(calls: list[tuple[str, object, int]], rounds: int) -> list[dict]:
    rows = []
    for i, (label, call, groups) in enumerate(calls):
        records: list = []
        measure = kernel_runner(call, groups, records=records)
        got = plain_vs_sanitized(measure, ["default"], rounds, warm_up=(i == 0))["default"]
        ops = [recs for _mode, san, recs in records if not san][-1][-1].wave_ops  # the plain run's
        rows.append({"size": label, "wave_ops": ops, **got,
                     "sanitized_us_per_wave_op": round(got["sanitized_seconds"] / ops * 1e6, 3)})
    first = rows[0]
    for row in rows:
        row["work_growth"] = round(row["wave_ops"] / first["wave_ops"], 2)
        row["sanitized_time_growth"] = round(row["sanitized_seconds"] / first["sanitized_seconds"], 2)
    return rows


def main() -> None:
    args, pinned = setup(__doc__, ("large", "add GEMM 1024³ and RMSNorm 4096 rows (minutes)"), rounds=1, waves=8,
                         nb=3)
    gemm_sizes = [256, 512] + ([1024] if args.large else [])
    rows = [64, 1024] + ([4096] if args.large else [])
    n = 8192
    out = {
        "benchmark": "scaling", "mode": "default", "machine": machine(), "pinned_to_one_core": pinned,
        "median_of_rounds": args.rounds,
        "gemm": {"kernel": f"ldssan.kernels.gemm FP8 NxNxN, {args.waves} waves, nb={args.nb}",
                 "sizes": series([(f"{s}^3", gemm_call(s, args.waves, args.nb), 1) for s in gemm_sizes],
                                 args.rounds)},
        "rmsnorm": {"kernel": f"ldssan.kernels.rmsnorm M x {n} bf16, 8 waves/workgroup",
                    "sizes": series([(f"{m}x{n}", rmsnorm_call(m, n), m) for m in rows], args.rounds)},
        "targets": {"gemm_512_sanitized_seconds": 0.435, "gemm_1024_sanitized_seconds": 3.0,
                    "rmsnorm_4096_sanitized_seconds": 5.0},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
