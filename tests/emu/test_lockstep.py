"""The `lockstep` policy: the waves of a workgroup (and of `batch` workgroups) run as one
lane array. The sanitizer's grouped reports are the same as under the per-wave scheduler,
field for field, on the bundled RMSNorm and GEMM (clean and with their planted bugs) and on
the copy kernels; outputs of clean kernels are the per-wave ones; kernels lockstep cannot
run (barriers in wave-divergent control flow, spin-waits, atomics steering control flow)
are refused from the IR and run per wave, with the same outcome."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ldssan import hook
from ldssan.kernels import gemm as G
from ldssan.kernels import rmsnorm as rms
from ldssan.runtime.emu import BarrierDivergenceError, Policy, emulate, frontend
from ldssan.runtime.emu.launch import AUTO, parse_module, run_kernel
from ldssan.runtime.emu.uniformity import lockstep_refusal
from ldssan.variants import load_variant

from ..sanitizer.test_copies_e2e import PARAMS, sanitize_text
from ..sanitizer.test_gemm_bugs import BUGS as GEMM_BUGS
from ..sanitizer.test_rmsnorm_bugs import VARIANTS as RMS_BUGS
from ..sanitizer.test_rmsnorm_bugs import _inputs as rms_inputs
from .test_copies_wmma import ASYNC_KERNEL, _tdm_body
from .test_faults_barriers import BRANCH, DOUBLE_SIGNAL, EARLY_EXIT, EXTRA, LOOPED, PARTIAL
from .test_ops import module


def _key(v):
    """Everything a grouped report says, but the launch number."""
    return (int(v.rule), int(v.cause), v.site.id, v.other_site.id if v.other_site else None, v.count,
            v.message, v.lds_offset, v.lds_range, v.wave, v.lane, v.other_wave, v.other_lane, v.workgroup,
            v.extra, v.waves, v.lanes, v.other_waves, v.other_lanes, v.workgroups, v.severity)


def _reports(violations):
    return sorted((_key(v) for v in violations), key=repr)


def _sanitized(policy, launch, batch=1):
    """The grouped reports of `launch()` sanitized under `policy`; asserts the launches ran
    under that policy (lockstep was not refused)."""
    with hook.sanitize(policy, batch=batch) as col:
        launch()
        ran = {r.policy for r in frontend.current().launches}
    assert ran == {policy}, ran
    return _reports(col.violations), col.violations


def test_lockstep_is_a_policy():
    p = Policy.parse("lockstep")
    assert p.lockstep and str(p) == "lockstep" and not p.delays_ds_stores
    assert not p.per_wave.lockstep and str(p.per_wave) == "round-robin"
    assert Policy.parse(str(p)) == p


@pytest.mark.parametrize("name", ["clean", *RMS_BUGS])
def test_rmsnorm_reports_are_the_per_wave_reports(name):
    mod = rms if name == "clean" else load_variant(rms, RMS_BUGS[name][0], tag=name)
    x, g = rms_inputs()
    got = {p: _sanitized(p, lambda: mod.rmsnorm(x, g))[0] for p in ("round-robin", "lockstep")}
    assert got["lockstep"] == got["round-robin"]
    assert bool(got["lockstep"]) == (name != "clean")


def test_rmsnorm_batched_lockstep_reports_every_workgroup():
    edits, code, this_line, other_line = RMS_BUGS["b_no_barrier_2"]
    mod = load_variant(rms, edits, tag="b_no_barrier_2")
    x, g = rms_inputs()
    per_wave, _ = _sanitized("round-robin", lambda: mod.rmsnorm(x, g))
    lock, violations = _sanitized("lockstep", lambda: mod.rmsnorm(x, g), batch=4)
    assert lock == per_wave
    assert set(violations[0].workgroups) == {0, 1, 2, 3}


@pytest.mark.parametrize("batch", [1, 3])
def test_rmsnorm_lockstep_output_is_the_per_wave_output(batch):
    x, g = rms_inputs()
    with emulate("round-robin") as cfg:
        want = rms.rmsnorm(x, g)
    with emulate("lockstep", batch=batch) as cfg:
        got = rms.rmsnorm(x, g)
    assert [r.policy for r in cfg.launches] == ["lockstep"]
    assert torch.equal(got, want)


def _gemm_operands(m, n, k):
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    return a, b


@pytest.mark.parametrize("name", ["clean", *GEMM_BUGS])
def test_gemm_reports_are_the_per_wave_reports(name):
    if name == "clean":
        mod, shape = G, (128, 128, 640)
    else:
        edit, shape, *_ = GEMM_BUGS[name]
        mod = load_variant(G, [edit], tag=name)
    a, b = _gemm_operands(*shape)
    got = {p: _sanitized(p, lambda: mod.gemm(a, b, waves=4, nb=3))[0] for p in ("round-robin", "lockstep")}
    assert got["lockstep"] == got["round-robin"]
    assert bool(got["lockstep"]) == (name != "clean")


def test_gemm_lockstep_output_is_the_per_wave_output():
    a, b = _gemm_operands(128, 256, 256)
    with emulate("round-robin"):
        want = G.gemm(a, b, waves=4, nb=3)
    with emulate("lockstep") as cfg:
        got = G.gemm(a, b, waves=4, nb=3)
    assert [r.policy for r in cfg.launches] == ["lockstep"]
    assert torch.equal(got, want)
    ref = a.float() @ b.float().T
    assert torch.allclose(got.float(), ref, rtol=1e-2, atol=1e-2)


COPY_KERNELS = {
    "tdm_read_before_wait": module(_tdm_body(False), PARAMS, 512),
    "tdm_waited": module(_tdm_body(True), PARAMS, 512),
    "async_waited": module(ASYNC_KERNEL, PARAMS, 512),
    "async_never_waited": module(ASYNC_KERNEL.replace("rocdl.s.wait.asynccnt 0", ""), PARAMS, 512),
}


@pytest.mark.parametrize("name", list(COPY_KERNELS))
def test_copy_kernel_reports_are_the_per_wave_reports(name):
    text = COPY_KERNELS[name]
    assert lockstep_refusal(parse_module(text).functions["kern"].body) is None
    per_wave = sanitize_text(text, "round-robin")
    lock = sanitize_text(text, "lockstep")
    assert _reports(lock.violations) == _reports(per_wave.violations)
    outs = {}
    for policy in ("round-robin", "lockstep"):
        out, src = np.zeros(64, np.int32), np.arange(100, 164, dtype=np.int32)
        launcher = run_kernel(parse_module(text), "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[out, src],
                              policy=policy)
        assert launcher.records[0].policy == policy
        outs[policy] = out
    if "waited" in name and "never" not in name:  # race-free: one answer under every schedule
        np.testing.assert_array_equal(outs["lockstep"], outs["round-robin"])


# -- what lockstep refuses, and runs per wave ------------------------------------------------

# wave 0 spins on an LDS flag that wave 1 sets after the loop in program order: lockstep
# would never run wave 1's store
WAVE_SPIN = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c32 = arith.constant 32 : i32
      %w = arith.divsi %t, %c32 : i32
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %is0 = arith.cmpi eq, %w, %c0 : i32
      scf.if %is0 {
        %r = scf.while (%x = %c0) : (i32) -> (i32) {
          %f = llvm.load volatile %lds : !llvm.ptr<3> -> i32
          %go = arith.cmpi eq, %f, %c0 : i32
          scf.condition(%go) %x : i32
        } do {
        ^bb0(%y: i32):
          scf.yield %y : i32
        }
      }
      %is1 = arith.cmpi eq, %w, %c1 : i32
      scf.if %is1 {
        llvm.store %c1, %lds : i32, !llvm.ptr<3>
      }
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %w, %p : i32, !llvm.ptr<1>"""

# a global atomic's old value decides who stores (a ticket)
TICKET = """
      %c1 = arith.constant 1 : i32
      %c0 = arith.constant 0 : i32
      %old = llvm.atomicrmw add %out, %c1 monotonic : !llvm.ptr<1>, i32
      %first = arith.cmpi eq, %old, %c0 : i32
      scf.if %first {
        %p = llvm.getelementptr %out[%c1] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %t, %p : i32, !llvm.ptr<1>
      }"""


@pytest.mark.parametrize("body, why", [
    (BRANCH, "barrier under control flow"), (EXTRA, "barrier under control flow"),
    (EARLY_EXIT, "barrier under control flow"), (PARTIAL, "barrier under control flow"),
    (WAVE_SPIN, "while loop"), (TICKET, "atomic's result"),
], ids=["branch", "extra", "early-exit", "partial", "spin", "ticket"])
def test_unsafe_kernels_are_refused_from_the_ir(body, why):
    refusal = lockstep_refusal(parse_module(module(body)).functions["kern"].body)
    assert refusal is not None and why in refusal, refusal


@pytest.mark.parametrize("body", [LOOPED, DOUBLE_SIGNAL, ASYNC_KERNEL, _tdm_body(True)],
                         ids=["looped", "double-signal", "async", "tdm"])
def test_safe_kernels_run_in_lockstep(body):
    assert lockstep_refusal(parse_module(module(body, PARAMS)).functions["kern"].body) is None


def _outcome(body: str, policy: str, n_out: int = 64):
    """(output or error type and the launch's policy and refusal) of a plain run."""
    view = parse_module(module(body))
    out = np.zeros(n_out, np.int32)
    try:
        launcher = run_kernel(view, "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[out], policy=policy)
    except BarrierDivergenceError:
        return "BarrierDivergenceError", None, None
    rec = launcher.records[0]
    return out.tolist(), rec.policy, rec.stats.get("lockstep_refused")


@pytest.mark.parametrize("body", [WAVE_SPIN, EARLY_EXIT, BRANCH, EXTRA], ids=["spin", "early-exit", "branch", "extra"])
def test_refused_kernels_run_per_wave_with_the_per_wave_outcome(body):
    want = _outcome(body, "round-robin")
    got = _outcome(body, "lockstep")
    assert got[0] == want[0]
    if want[1] is not None:
        assert got[1] == "round-robin" and got[2], got


@pytest.mark.parametrize("body", [BRANCH, EXTRA, EARLY_EXIT, LOOPED, DOUBLE_SIGNAL, PARTIAL],
                         ids=["branch", "extra", "early-exit", "looped", "double-signal", "partial"])
def test_barrier_verdicts_are_the_per_wave_verdicts(body):
    text = module(body, PARAMS, 512)
    assert _reports(sanitize_text(text, "lockstep").violations) == \
        _reports(sanitize_text(text, "round-robin").violations)


# per-wave values (wave id, readfirstlane, ballot) are per lane under lockstep
PER_WAVE_VALUES = """
      %c32 = arith.constant 32 : i32
      %c4 = arith.constant 4 : i32
      %c1000 = arith.constant 1000 : i32
      %wid = rocdl.wave.id : i32
      %w = arith.divsi %t, %c32 : i32
      %lane = arith.remsi %t, %c32 : i32
      %odd = arith.remsi %lane, %c4 : i32
      %c0 = arith.constant 0 : i32
      %sel = arith.cmpi eq, %odd, %c0 : i32
      %b = rocdl.ballot %sel : i32
      %off = arith.muli %w, %c4 : i32
      %x = arith.addi %t, %off : i32
      %f = rocdl.readfirstlane %x : i32
      %wk = arith.muli %wid, %c1000 : i32
      %s0 = arith.addi %f, %wk : i32
      %r = arith.addi %s0, %b : i32""" + """
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""


def test_per_wave_values_are_kept_per_wave():
    want, _, _ = _outcome(PER_WAVE_VALUES, "round-robin")
    got, policy, _ = _outcome(PER_WAVE_VALUES, "lockstep")
    assert policy == "lockstep"
    assert got == want
    assert want[0] != want[32]  # the two waves do differ


def test_mega_moe_runs_batched_in_lockstep_with_the_per_wave_reports():
    from ldssan.kernels import mega_moe as M

    from ..sanitizer.test_mega_moe_bugs import BUGS as MOE_BUGS
    from ..sanitizer.test_mega_moe_bugs import _inputs as moe_inputs

    mod = load_variant(M, MOE_BUGS["tile_read_barrier_deleted"][0], tag="tile_read_barrier_deleted")
    args = moe_inputs()
    got = {}
    for policy in ("round-robin", "lockstep"):
        with hook.sanitize(policy, resident=4) as col:
            mod.mega_moe(*args)
            records = list(frontend.current().launches)
        got[policy] = _reports(col.violations)
    assert got["lockstep"] == got["round-robin"] and got["lockstep"]
    # the persistent kernels loop over work items (scf.while) taken from an atomic ticket;
    # nothing after the loop writes global memory, so their workgroups are batched too
    assert [r.policy for r in records] == ["lockstep"] * len(records), records
    assert not any("lockstep_batch_refused" in r.stats or "lockstep_refused" in r.stats for r in records)
    assert all(r.batch == r.grid[0] for r in records if r.kernel.startswith("moe_gemm")), records


# -- persistent kernels: not batched, but each workgroup one lockstep context -----------------

# a persistent work loop: thread 0 takes the next item from a global ticket into LDS, every
# lane reads it back after a barrier; item y marks out[1 + y]; a ticket >= 16 ends the loop
WORK_LOOP = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c16 = arith.constant 16 : i32
      %lds = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %lead = arith.cmpi eq, %t, %c0 : i32
      scf.if %lead {
        %old = llvm.atomicrmw add %out, %c1 monotonic : !llvm.ptr<1>, i32
        llvm.store %old, %lds : i32, !llvm.ptr<3>
      }
      gpu.barrier
      %v0 = llvm.load %lds : !llvm.ptr<3> -> i32
      %first = rocdl.readfirstlane %v0 : i32
      %r = scf.while (%x = %first) : (i32) -> (i32) {
        %go = arith.cmpi slt, %x, %c16 : i32
        scf.condition(%go) %x : i32
      } do {
      ^bb0(%y: i32):
        gpu.barrier
        scf.if %lead {
          %at = arith.addi %y, %c1 : i32
          %p = llvm.getelementptr %out[%at] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
          llvm.store %c1, %p : i32, !llvm.ptr<1>
          %old = llvm.atomicrmw add %out, %c1 monotonic : !llvm.ptr<1>, i32
          llvm.store %old, %lds : i32, !llvm.ptr<3>
        }
        gpu.barrier
        %v = llvm.load %lds : !llvm.ptr<3> -> i32
        %nxt = rocdl.readfirstlane %v : i32
        scf.yield %nxt : i32
      }"""


@pytest.mark.parametrize("grid", [3, 4], ids=["uneven", "even"])
def test_a_work_loop_runs_batched_in_lockstep(grid):
    blocks = parse_module(module(WORK_LOOP)).functions["kern"].body
    assert lockstep_refusal(blocks, batched=True) is None
    assert lockstep_refusal(blocks, batched=False) is None
    # a spin whose exit differs across the waves of one workgroup stays refused
    assert "while loop" in lockstep_refusal(parse_module(module(WAVE_SPIN)).functions["kern"].body, batched=False)
    outs = {}
    for policy in ("round-robin", "lockstep"):
        out = np.zeros(32, np.int32)
        launcher = run_kernel(parse_module(module(WORK_LOOP)), "kern", grid=(grid, 1, 1), block=(64, 1, 1),
                              args=[out], policy=policy, resident=grid, batch=AUTO)
        rec = launcher.records[0]
        assert rec.policy == policy and rec.batch == (grid if policy == "lockstep" else 1), rec
        assert "lockstep_batch_refused" not in rec.stats
        outs[policy] = out
    # every item done once, one ticket past the end per workgroup, under either schedule (with
    # 3 workgroups one of them takes one item more: the batch's barriers part in the last round)
    want = np.zeros(32, np.int32)
    want[0], want[1:17] = 16 + grid, 1
    for out in outs.values():
        np.testing.assert_array_equal(out, want)
    text = module(WORK_LOOP, PARAMS, 512)
    assert _reports(sanitize_text(text, "lockstep").violations) == \
        _reports(sanitize_text(text, "round-robin").violations) == []
