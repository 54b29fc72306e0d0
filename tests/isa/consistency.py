"""The ISA check against the IR-level sanitizer on every bundled kernel and planted bug
(issue #18, item 3): one row per case, agree / ISA-only / IR-only with the reason.

    python -m tests.isa.consistency --json tests/isa/consistency.json

Each case is compiled once for gfx1250 (compile-only, ldssan's linker) and checked at the
ISA level, then launched once under the sanitizer on the virtual gfx1250. The planted bugs
are the ones tests/sanitizer/test_*_bugs.py define, plus the mutation campaign's "fenced
barrier -> raw split barrier" on barriers of GEMM and MegaMoE (the shape LDS050 is about),
and the LDS051 pair of tests/isa/intent_kernels.py (a wait the backend's merged loads
defeat, and its twin).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from ldssan import hook
from ldssan.isa.compare import compare
from ldssan.isa.run import isa_check
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels import rmsnorm as R
from ldssan.variants import Edit, load_variant
from tests.kernels.protocol import gemm_sites, mega_moe_sites

RAW_SPLIT = "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)"
GEMM_RAW = ("steady_barrier", "drain_barrier", "epilogue_barrier", "c_publish_barrier")
MOE_RAW = ("init_barrier", "count_barrier", "tile_publish_barrier", "epilogue_barrier")


def _rmsnorm_cases():
    from tests.sanitizer.test_rmsnorm_bugs import VARIANTS, _inputs

    x, g = _inputs()
    yield "rmsnorm", "clean", R, [], lambda m: m.rmsnorm(x, g), 1
    for name, (edits, *_rest) in VARIANTS.items():
        yield "rmsnorm", name, R, edits, lambda m: m.rmsnorm(x, g), 1


def _gemm_cases():
    from tests.sanitizer.test_gemm_bugs import BUGS

    def call(shape):
        m, n, k = shape
        gen = torch.Generator().manual_seed(3)
        a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
        return lambda mod: mod.gemm(a, b, waves=4, nb=3)

    yield "gemm", "clean", G, [], call((128, 128, 640)), 1
    for name, (edit, shape, *_rest) in BUGS.items():
        yield "gemm", name, G, [edit], call(shape), 1
    for site in GEMM_RAW:
        yield "gemm", f"raw_split:{site}", G, [Edit(gemm_sites()[site], RAW_SPLIT)], call((128, 128, 512)), 1


def _mega_moe_cases():
    from tests.sanitizer.test_mega_moe_bugs import BUGS, _inputs

    x, logits, w1, w2 = _inputs()
    yield "mega_moe", "clean", M, [], lambda m: m.mega_moe(x, logits, w1, w2), 4
    for name, (edits, *_rest) in BUGS.items():
        yield "mega_moe", name, M, edits, lambda m: m.mega_moe(x, logits, w1, w2), 4
    for site in MOE_RAW:
        yield ("mega_moe", f"raw_split:{site}", M, [Edit(mega_moe_sites()[site], RAW_SPLIT)],
               lambda m: m.mega_moe(x, logits, w1, w2), 4)


def _intent_cases():
    from tests.isa import intent_kernels as I

    yield "intent", "merged_wait", I, [], lambda m: m.launch_merged(), 1
    yield "intent", "split_wait", I, [], lambda m: m.launch_split(), 1


def run(kernels: list[str]) -> list[dict]:
    sources = {"rmsnorm": _rmsnorm_cases, "gemm": _gemm_cases, "mega_moe": _mega_moe_cases,
               "intent": _intent_cases}
    rows = []
    for kernel in kernels:
        for kname, case, base, edits, call, resident in sources[kernel]():
            mod = load_variant(base, edits, tag=f"isacmp_{case.replace(':', '_')}")
            t0 = time.perf_counter()
            isa = isa_check(lambda: call(mod))
            with hook.sanitize("round-robin", resident=resident) as col:
                call(mod)
            # errors and the fence lint's warnings (LDS040/041): the whole IR-level verdict
            ir = col.violations + col.warnings
            row = {"kernel": kname, "case": case, "builds": len(isa), **compare(isa, ir),
                   "seconds": round(time.perf_counter() - t0, 1)}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the table here")
    ap.add_argument("--kernels", default="rmsnorm,gemm,mega_moe,intent")
    args = ap.parse_args(argv)
    rows = run(args.kernels.split(","))
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("agree", "ISA-only", "IR-only")}
    doc = {"schema": "ldssan.isa-consistency/1", "summary": counts, "rows": rows}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
