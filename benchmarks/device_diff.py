"""The device runtime against the Python engine, case by case, on the virtual gfx1250.

Every case runs twice: once sanitized by the Python happens-before engine (`hook.sanitize`),
once with the device runtime's IR linked into the kernel and executed by the emulator like
kernel code (`ldssan.runtime.device.emulated`: no Python engine; shadow updates, checks and
records are the kernel's own LDS atomics and global stores). Both are decoded with the same
site table and compared per grouped key as the report groups them (rule, cause, where this
access and the other were written: line, column, call chain); the row also says whether
the wave and workgroup sets of each key agree, and the instance counts (the device writes
one record per lane of an access, the engine one per access).

Cases run under the `canonical` scheduler policy -- the waves execute in the order the
engine applies events (half-phase, wave, program order) -- because the device pairs each
access with the shadow entries present when it executes, the engine with those present
when it is applied: in the same order they meet the same partners. RMSNorm's bugs also run
under round-robin, reverse and random orders (its races have one partner each). On
hardware the order is the hardware's: a race is still found, with the same rule, but may
be paired with another conflicting access than the engine would name (DESIGN.md).

    python benchmarks/device_diff.py [--quick] [--only NAME_PART ...] [--policy P] [--json out.json]

prints {"cases": n, "records_equal": k, "not_linked": m, "code_objects_elf_amdgpu": c,
"overhead": {...}, "rows": [...]}; a case the device runtime refuses to link (asyncmark:
not in the device runtime yet) is a row with `"status": "not linked"` and the named error,
counted in `not_linked`, never as equal. Cases: RMSNorm (clean shapes, six planted bugs
under several schedules), the FP8 GEMM (TDM ring, async scale copies, dynamic LDS; clean
and its six planted bugs) and MegaMoE (route + persistent grouped GEMM, 4 workgroups
resident; clean and its four planted bugs). GEMM and MegaMoE shadows live in global
scratch (their LDS is dynamic). Every distinct kernel build
that links is also compiled for gfx1250 (compile-only, `ld.lld` from `ldssan.isa`), and
`overhead` compares the clean RMSNorm's code object metadata plain vs instrumented.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field, replace

import torch

from ldssan import hook
from ldssan.decode import decode
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels import rmsnorm as R
from ldssan.kernels.mega_moe_reference import moe_inputs
from ldssan.isa.capture import EM_AMDGPU, capture_builds, elf_machine
from ldssan.runtime.device import DeviceLinkError, emulated
from ldssan.runtime.device import layout
from ldssan.runtime.device.build import building
from ldssan.runtime.records import Rule
from ldssan.variants import Edit, load_variant


@dataclass
class Case:
    name: str
    module: object
    call: object  # call(module) launches the kernel(s)
    edits: list = field(default_factory=list)
    policy: str = "canonical"  # execution in the engine's canonical order (module docstring)
    resident: int = 1
    scratch: bool = False  # the shadow in global scratch even where LDS has room


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


def _gemm_call(k: int = 256):
    def call(mod):
        gen = torch.Generator().manual_seed(3)
        a = torch.randn(64, k, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(64, k, generator=gen).to(torch.float8_e4m3fn)
        mod.gemm(a, b, waves=4, nb=3)
    return call


def _moe_call(mod):
    mod.mega_moe(*moe_inputs(torch.Generator().manual_seed(5)))


def rmsnorm_bugs() -> dict[str, list]:
    """RMSNorm's planted one-line bugs: the four of tests/sanitizer/test_rmsnorm_bugs.py, and
    two more for the rules those do not reach (LDS003, LDS031)."""
    b1 = _line(R, "fx.gpu.barrier()", 1)
    b2 = _line(R, "fx.gpu.barrier()", 2)
    load = _line(R, "p = fx.memref_load(partial, lane)")
    store = _line(R, "fx.memref_store(w_sum, partial, wave)")
    return {
        "a_no_barrier_1": [Edit(b1, None)],
        "b_no_barrier_2": [Edit(b2, None)],
        "c_raw_split_barrier": [Edit(b1, "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)")],
        "d_uninit_slot": [Edit(load, "p = fx.memref_load(total, 0)")],
        # every wave publishes into slot 0: unordered writes (and slots 1..7 never written)
        "e_waw_slot": [Edit(store, "fx.memref_store(w_sum, partial, 0)")],
        # wave 0 reads 8 slots past the partials: beyond the workgroup's LDS
        "f_oob_read": [Edit(load, "p = fx.memref_load(partial, lane + 8)")],
    }


def gemm_bugs() -> dict[str, list]:
    """The GEMM's planted bugs of tests/sanitizer/test_gemm_bugs.py (one line each)."""
    wait = _line(G, "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))")  # steady_wait; the barrier follows
    return {
        "tensor_wait_deleted": [Edit(wait, None)],
        "wait_count_plus_one": [Edit(wait, "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2) + 1)")],
        "kstep_barrier_deleted": [Edit(wait + 1, None)],
        "prefetch_one_stage_early": [Edit(_line(G, "_issue_stage(kt + nb - 1)"), "_issue_stage(kt + nb)")],
        "pingpong_slot_swapped": [Edit(_line(G, "_compute(kt % nb)"), "_compute((kt + 1) % nb)")],
        "epilogue_reuse_barrier_deleted": [Edit(_line(G, "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)") + 1, None)],
    }


def mega_moe_bugs() -> dict[str, list]:
    """MegaMoE's planted bugs of tests/sanitizer/test_mega_moe_bugs.py."""
    wait, read = "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)", "rows = _read_rowmap()"
    return {
        "tile_read_barrier_deleted": [Edit(_line(M, "tile = _read_tile()") + 4, None)],
        "tile_word_in_a_ring_slot": [Edit(_line(M, "tile_word = lds_addr + cfg.tile_word_off"),
                                          "tile_word = lds_addr")],
        "count_barrier_deleted": [Edit(_line(M, "fx.gpu.barrier()", 2), None)],
        "rowmap_read_before_its_wait": [Edit(_line(M, wait), read), Edit(_line(M, read), wait)],
    }


# CI's: two plain ones, and the two whose naming settle.py completes (a copy completed in
# its half-phase, a withdrawn LDS030; a §6a pair turned WAR, a cause settled later)
QUICK_GEMM_BUGS = ("wait_count_plus_one", "pingpong_slot_swapped", "kstep_barrier_deleted",
                   "epilogue_reuse_barrier_deleted")


def cases(quick: bool = False) -> list[Case]:
    out = []
    shapes = [(2, 510, torch.bfloat16), (1, 4096, torch.float32)] if quick else [
        (2, 510, torch.bfloat16), (2, 4096, torch.float32), (2, 8190, torch.bfloat16), (1, 8192, torch.float32)]
    for m, n, dt in shapes:
        out.append(Case(f"rmsnorm_clean_{m}x{n}_{str(dt).split('.')[-1]}", R, _rms_call(m, n, dt)))
    policies = ["canonical", "random(4)"] if quick else ["canonical", "round-robin", "reverse", "random(4)"]
    for name, edits in rmsnorm_bugs().items():
        for pol in policies:
            out.append(Case(f"rmsnorm_{name}", R, _rms_call(2, 512, torch.float32), edits, pol))
    # the GEMM at 64 x 64 (one workgroup, 4 waves); its bugs at K = 512, the smallest K whose
    # steady loop runs. --quick keeps the clean GEMM and two bugs (what CI runs)
    out.append(Case("gemm_clean_fp8_64x64x256", G, _gemm_call(256)))
    for name, edits in gemm_bugs().items():
        if not quick or name in QUICK_GEMM_BUGS:
            out.append(Case(f"gemm_{name}", G, _gemm_call(512), edits))
    if not quick:
        out.append(Case("gemm_clean_fp8_64x64x512", G, _gemm_call(512)))
        out.append(Case("mega_moe_clean", M, _moe_call, resident=4))
        for name, edits in mega_moe_bugs().items():
            out.append(Case(f"mega_moe_{name}", M, _moe_call, edits, resident=4))
    return out


def _where(site) -> tuple | None:
    """A site as the report groups it: where it was written (line, column, call chain).
    The unrolled copies of one source op are distinct site ids, and which of them names a
    reported group depends on the order its records arrive in -- not a difference."""
    if site is None:
        return None
    if not site.known:
        return ("?", site.id)
    return (site.line, site.col, tuple((f.line, f.col) for f in site.chain))


def _keys(violations) -> dict:
    out = {}
    for v in violations:
        if v.severity != "error":
            continue  # the static fence lint is not an executor's finding
        key = (v.code, int(v.cause), _where(v.site), _where(v.other_site))
        got = out.setdefault(key, {"waves": set(), "workgroups": set(), "count": 0})
        got["waves"] |= set(v.waves)
        got["workgroups"] |= set(v.workgroups)
        got["count"] += v.count
    return out


def run_case(case: Case) -> dict:
    mod = load_variant(case.module, case.edits, tag=f"dd_{case.name}") if case.edits else case.module
    row = {"case": case.name, "policy": case.policy, "shadow": "global scratch" if case.scratch else "auto"}
    t0 = time.perf_counter()
    with hook.sanitize(case.policy, resident=case.resident) as col:
        case.call(mod)
    host = _keys(v for r in col.results for v in r.report.violations)
    t1 = time.perf_counter()
    try:
        with emulated(case.policy, resident=case.resident, scratch=case.scratch) as run:
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
        device_waves_subset=all(dev[k]["waves"] <= host[k]["waves"] for k in set(host) & set(dev)),
        workgroups_equal=all(host[k]["workgroups"] == dev[k]["workgroups"] for k in set(host) & set(dev)),
        instances={"host": sum(h["count"] for h in host.values()), "device": len(records),
                   **_settled(ring.records(), records)},
        dropped=ring.dropped,
        seconds={"engine": round(t1 - t0, 3), "device": round(t2 - t1, 3)},
    )
    return row


def _settled(raw, records) -> dict:
    """What settle.py took out of the device buffer: its internal records, withdrawn LDS030s."""
    def uninit(rs):
        return sum(r.rule == Rule.UNINIT_READ for r in rs)

    return {"device_internal": sum(r.rule in layout.INTERNAL_RULES for r in raw),
            "device_withdrawn_lds030": uninit(raw) - uninit(records)}


_METADATA = (".vgpr_count", ".sgpr_count", ".group_segment_fixed_size", ".private_segment_fixed_size")


def _metadata(isa: str) -> dict:
    out = {}
    for line in isa.splitlines():
        key, _, value = line.strip().partition(":")
        if key in _METADATA and value.strip().isdigit():
            out[key.lstrip(".")] = int(value)
    return out


def code_object(case: Case, *, device: bool) -> dict:
    """A compile-only gfx1250 build of the case's kernel(s) (device runtime linked in, or
    plain): ELF machine, size and the register / LDS / scratch metadata of each kernel."""
    mod = load_variant(case.module, case.edits, tag=f"dd_{case.name}") if case.edits else case.module
    if device:
        with building():
            builds = capture_builds(case.call, mod)
    else:
        builds = capture_builds(case.call, mod)
    return {b.kernel: {"elf_amdgpu": elf_machine(b.elf) == EM_AMDGPU, "elf_bytes": len(b.elf), **_metadata(b.isa)}
            for b in builds}


def _fmt(key) -> str:
    code, cause, site, other = key
    return f"{code}/{cause} at {_loc(site)} other {_loc(other)}"


def _loc(where) -> str:
    if where is None:
        return "none"
    if where[0] == "?":
        return f"site {where[1]}"
    line, col, chain = where
    return f"line {line}:{col}" + "".join(f" <- {ln}" for ln, _c in chain)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and policies (what CI runs)")
    ap.add_argument("--json", help="also write the result here")
    ap.add_argument("--only", action="append", default=[],
                    help="run only the cases whose name contains this (repeatable)")
    ap.add_argument("--policy", help="run every case under this scheduler policy instead (e.g. round-robin: "
                                     "how far execution order, not canonical order, changes the pairs)")
    args = ap.parse_args(argv)
    todo = [c for c in cases(args.quick) if not args.only or any(s in c.name for s in args.only)]
    if args.policy:
        todo = list({c.name: replace(c, policy=args.policy) for c in todo}.values())  # one row per case
    if not todo:
        raise SystemExit(f"no case matches {args.only}")
    rows = [run_case(c) for c in todo]
    # one code object per distinct kernel build (a bug's policies share it)
    objects, built = 0, {}
    for case, row in zip(todo, rows):
        key = (case.module.__name__, tuple(case.edits))
        if row["status"] == "not linked":
            continue
        if key not in built:
            try:
                built[key] = code_object(case, device=True)
            except Exception as e:  # reported in the row, not counted: the comparison still stands
                built[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            objects += sum(k["elf_amdgpu"] for k in built[key].values() if isinstance(k, dict))
        row["code_object"] = built[key]
    base = todo[0]  # the clean RMSNorm: what the instrumentation costs per kernel
    overhead = {"case": base.name, "plain": code_object(base, device=False), "device": rows[0].get("code_object")}
    out = {"cases": len(rows), "records_equal": sum(r["status"] == "equal" for r in rows),
           "not_linked": sum(r["status"] == "not linked" for r in rows), "code_objects_elf_amdgpu": objects,
           "overhead": overhead, "rows": rows}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text)
    return out


if __name__ == "__main__":
    main()
