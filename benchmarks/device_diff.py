"""The device runtime against the Python engine, case by case, on the virtual gfx1250.

Every case runs twice: once sanitized by the Python happens-before engine (`hook.sanitize`),
once with the device runtime's IR linked into the kernel and executed by the emulator like
kernel code (`ldssan.runtime.device.emulated`: no Python engine; shadow updates, checks and
records are the kernel's own LDS atomics and global stores). Both are decoded with the same
site table and compared per grouped key (rule, cause, this site, other site); the row also
says whether the wave and workgroup sets of each key agree, and the instance counts (the
device writes one record per lane and granule, the engine one per access).

    python benchmarks/device_diff.py [--quick] [--json out.json]

prints {"cases": n, "records_equal": k, "not_linked": m, "rows": [...]}; a case the device
runtime refuses to link (async/TDM copies: not in the device runtime yet) is a row with
`"status": "not linked"` and the named error, counted in `not_linked`, never as equal.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field

import torch

from ldssan import hook
from ldssan.decode import decode
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.device import DeviceLinkError, emulated
from ldssan.variants import Edit, load_variant


@dataclass
class Case:
    name: str
    module: object
    call: object  # call(module) launches the kernel(s)
    edits: list = field(default_factory=list)
    policy: str = "round-robin"
    resident: int = 1


def _line(module, text: str, nth: int = 1) -> int:
    """The `nth` line of the module's source whose stripped text is `text`."""
    hits = [i + 1 for i, ln in enumerate(open(module.__file__, encoding="utf-8").read().splitlines())
            if ln.strip() == text]
    if len(hits) < nth:
        raise LookupError(f"{module.__name__}: no line {nth} reading {text!r}")
    return hits[nth - 1]


def _rms_call(m: int, n: int, dtype):
    def call(mod):
        gen = torch.Generator().manual_seed(m * 7 + n)
        x = torch.randn(m, n, generator=gen).to(dtype)
        g = torch.randn(n, generator=gen).to(dtype)
        mod.rmsnorm(x, g)
    return call


def _gemm_call(mod):
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(64, 256, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(64, 256, generator=gen).to(torch.float8_e4m3fn)
    mod.gemm(a, b, waves=4, nb=3)


def _moe_call(mod):
    gen = torch.Generator().manual_seed(5)
    t, e, d, inter = 8, 4, 512, 256
    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    w1 = (torch.randn(e, 2 * inter, d, generator=gen) / d ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(e, d, inter, generator=gen) / inter ** 0.5).to(torch.bfloat16)
    mod.mega_moe(x, logits, w1, w2)


def rmsnorm_bugs() -> dict[str, list]:
    """RMSNorm's planted one-line bugs (as tests/sanitizer/test_rmsnorm_bugs.py plants them)."""
    b1 = _line(R, "fx.gpu.barrier()", 1)
    b2 = _line(R, "fx.gpu.barrier()", 2)
    load = _line(R, "p = fx.memref_load(partial, lane)")
    return {
        "a_no_barrier_1": [Edit(b1, None)],
        "b_no_barrier_2": [Edit(b2, None)],
        "c_raw_split_barrier": [Edit(b1, "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)")],
        "d_uninit_slot": [Edit(load, "p = fx.memref_load(total, 0)")],
    }


def cases(quick: bool = False) -> list[Case]:
    out = []
    shapes = [(2, 510, torch.bfloat16), (1, 4096, torch.float32)] if quick else [
        (2, 510, torch.bfloat16), (2, 4096, torch.float32), (2, 8190, torch.bfloat16), (1, 8192, torch.float32)]
    for m, n, dt in shapes:
        out.append(Case(f"rmsnorm_clean_{m}x{n}_{str(dt).split('.')[-1]}", R, _rms_call(m, n, dt)))
    policies = ["round-robin", "random(4)"] if quick else ["round-robin", "reverse", "random(4)"]
    for name, edits in rmsnorm_bugs().items():
        for pol in policies:
            out.append(Case(f"rmsnorm_{name}", R, _rms_call(2, 512, torch.float32), edits, pol))
    if not quick:
        out.append(Case("gemm_clean_fp8_64x64x256", G, _gemm_call))
        out.append(Case("mega_moe_clean_8tok", M, _moe_call, resident=4))
    return out


def _keys(violations) -> dict:
    out = {}
    for v in violations:
        if v.severity != "error":
            continue  # the static fence lint is not an executor's finding
        key = (v.code, int(v.cause), v.site.id, None if v.other_site is None else v.other_site.id)
        got = out.setdefault(key, {"waves": set(), "workgroups": set(), "count": 0})
        got["waves"] |= set(v.waves)
        got["workgroups"] |= set(v.workgroups)
        got["count"] += v.count
    return out


def run_case(case: Case) -> dict:
    mod = load_variant(case.module, case.edits, tag=f"dd_{case.name}") if case.edits else case.module
    row = {"case": case.name, "policy": case.policy}
    t0 = time.perf_counter()
    with hook.sanitize(case.policy, resident=case.resident) as col:
        case.call(mod)
    host = _keys(v for r in col.results for v in r.report.violations)
    t1 = time.perf_counter()
    try:
        with emulated(case.policy, resident=case.resident) as run:
            case.call(mod)
    except DeviceLinkError as e:
        row.update(status="not linked", reason=str(e), host=sorted(_fmt(k) for k in host))
        return row
    t2 = time.perf_counter()
    ring = run.ring()
    records = run.records()
    dev = {}
    for launch, sites in run.launches:
        mine = [r for r in records if r.launch == launch]
        dev.update(_keys(decode(mine, sites, dropped=ring.dropped, capacity=ring.capacity).violations))
    same = set(host) == set(dev)
    row.update(
        status="equal" if same else "different",
        keys=sorted(_fmt(k) for k in host),
        only_host=sorted(_fmt(k) for k in set(host) - set(dev)),
        only_device=sorted(_fmt(k) for k in set(dev) - set(host)),
        waves_equal=all(host[k]["waves"] == dev[k]["waves"] for k in set(host) & set(dev)),
        workgroups_equal=all(host[k]["workgroups"] == dev[k]["workgroups"] for k in set(host) & set(dev)),
        instances={"host": sum(h["count"] for h in host.values()), "device": len(records),
                   "device_retracted_lds030": len(ring.records()) - len(records)},
        dropped=ring.dropped,
        seconds={"engine": round(t1 - t0, 3), "device": round(t2 - t1, 3)},
    )
    return row


def _fmt(key) -> str:
    code, cause, site, other = key
    return f"{code}/{cause} site {site} other {other}"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and policies (what CI runs)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    rows = [run_case(c) for c in cases(args.quick)]
    out = {"cases": len(rows), "records_equal": sum(r["status"] == "equal" for r in rows),
           "not_linked": sum(r["status"] == "not linked" for r in rows), "rows": rows}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text)
    return out


if __name__ == "__main__":
    main()
