"""The fence-pairing lint (LDS040 missing-release, LDS041 missing-acquire): split barriers
must be bracketed by workgroup fences, on every path through the structured IR.

Each finding class has a buggy kernel (the rule and both lines: the access and the
barrier) and its fixed twin (no finding). Small MLIR kernels cover fences of every kind,
branches and loop back edges; RMSNorm variants cover FlyDSL's own spellings; the bundled
kernels give no finding."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ldssan import hook
from ldssan.decode import merge_reports
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels.mega_moe_reference import moe_inputs
from ldssan.kernels import rmsnorm as rms
from ldssan.passes.instrument import Instrumenter
from ldssan.report import render_text, to_json, to_sarif
from ldssan.variants import Edit, load_variant
from tests.kernels.protocol import rmsnorm_sites

from ..emu.test_ops import module
from .test_copies_e2e import PARAMS, sanitize_text

STORE = "llvm.store %t, %p : i32, !llvm.ptr<3>  // store"
SIGNAL = "rocdl.s.barrier.signal id = -1  // signal"
WAIT = "rocdl.s.barrier.wait id = -1  // wait"
LOAD = "%v = llvm.load %q : !llvm.ptr<3> -> i32  // load"
REL = 'llvm.fence syncscope("workgroup") release'
ACQ = 'llvm.fence syncscope("workgroup") acquire'

PROLOGUE = """
      %c63 = arith.constant 63 : i32
      %c16 = arith.constant 16 : i32
      %lt16 = arith.cmpi slt, %t, %c16 : i32
      %b = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %p = llvm.getelementptr %b[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r0 = arith.subi %c63, %t : i32
      %q = llvm.getelementptr %b[%r0] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32"""
EPILOGUE = """
      %o = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %v, %o : i32, !llvm.ptr<1>"""


def kernel(*lines: str) -> str:
    """A 64-lane kernel: each lane stores its id, the barrier, then reads lane 63-t's word."""
    return module(PROLOGUE + "".join(f"\n      {x}" for x in lines) + EPILOGUE, PARAMS, 512)


def line_of(text: str, tag: str) -> int:
    hits = [i for i, s in enumerate(text.splitlines(), 1) if s.rstrip().endswith(f"// {tag}")]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


def lint(text: str) -> set[tuple[str, int, int]]:
    """(code, access line, barrier line) of every finding the pass attaches to the module."""
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    with _create_mlir_context():
        mod = ir.Module.parse(text)
        Instrumenter(mod.operation).run()
        table = json.loads(str(mod.operation.attributes["ldssan.sites"].value))
    line = {s["id"]: s["line"] for s in table["sites"]}
    return {(f["code"], line[f["access"]], line[f["barrier"]]) for f in table["lint"]}


def expect(text: str, *pairs: tuple[str, str, str]) -> set:
    return {(code, line_of(text, a), line_of(text, b)) for code, a, b in pairs}


# -- which fences count: the release side (store -> signal) -----------------------------------

RELEASE_SIDE = {  # text between the store and the signal -> it orders the store
    "nothing": ("", False),
    "workgroup release": (REL, True),
    "agent release": ('llvm.fence syncscope("agent") release', True),
    "system seq_cst": ("llvm.fence seq_cst", True),
    "workgroup acq_rel": ('llvm.fence syncscope("workgroup") acq_rel', True),
    "s_wait_dscnt 0": ("rocdl.s.wait.dscnt 0", True),
    "s_wait_dscnt 1": ("rocdl.s.wait.dscnt 1", False),
    "workgroup acquire only": (ACQ, False),
    "wavefront release": ('llvm.fence syncscope("wavefront") release', False),
    "workgroup-one-as release": ('llvm.fence syncscope("workgroup-one-as") release', False),
    "one-as release": ('llvm.fence syncscope("one-as") release', False),
    "singlethread release": ('llvm.fence syncscope("singlethread") release', False),
}


@pytest.mark.parametrize("name", list(RELEASE_SIDE))
def test_release_side_fences(name):
    fence, orders = RELEASE_SIDE[name]
    text = kernel(STORE, fence, SIGNAL, WAIT, ACQ, LOAD)
    want = set() if orders else expect(text, ("LDS040", "store", "signal"))
    assert lint(text) == want


ACQUIRE_SIDE = {  # text between the wait and the load -> it orders the load
    "nothing": ("", False),
    "workgroup acquire": (ACQ, True),
    "agent acquire": ('llvm.fence syncscope("agent") acquire', True),
    "workgroup acq_rel": ('llvm.fence syncscope("workgroup") acq_rel', True),
    "system seq_cst": ("llvm.fence seq_cst", True),
    "workgroup release only": (REL, False),
    "s_wait_dscnt 0": ("rocdl.s.wait.dscnt 0", False),
    "wavefront acquire": ('llvm.fence syncscope("wavefront") acquire', False),
    "workgroup-one-as acquire": ('llvm.fence syncscope("workgroup-one-as") acquire', False),
    "singlethread acquire": ('llvm.fence syncscope("singlethread") acquire', False),
}


@pytest.mark.parametrize("name", list(ACQUIRE_SIDE))
def test_acquire_side_fences(name):
    fence, orders = ACQUIRE_SIDE[name]
    text = kernel(STORE, REL, SIGNAL, WAIT, fence, LOAD)
    want = set() if orders else expect(text, ("LDS041", "load", "wait"))
    assert lint(text) == want


def test_fenced_barrier_forms_need_no_fence():
    for form in ("gpu.barrier", "rocdl.barrier"):
        assert lint(kernel(STORE, form, LOAD)) == set(), form


def test_bare_s_barrier_misses_both_fences():
    text = kernel(STORE, "rocdl.s.barrier  // bar", LOAD)
    assert lint(text) == expect(text, ("LDS040", "store", "bar"), ("LDS041", "load", "bar"))


def test_atomic_is_both_a_store_and_a_load():
    atomic = "%a = llvm.atomicrmw add %p, %t monotonic : !llvm.ptr<3>, i32  // atomic"
    text = kernel(atomic, SIGNAL, WAIT, atomic.replace("%a =", "%a2 =").replace("// atomic", "// atomic2"), LOAD)
    assert lint(text) == expect(text, ("LDS040", "atomic", "signal"), ("LDS041", "atomic2", "wait"),
                                ("LDS041", "load", "wait"))


def test_a_store_after_the_signal_belongs_to_the_next_one():
    second = STORE.replace("// store", "// store2")
    text = kernel(STORE, REL, SIGNAL, second, WAIT, ACQ, LOAD, SIGNAL.replace("// signal", "// signal2"))
    assert lint(text) == expect(text, ("LDS040", "store2", "signal2"))


# -- paths: branches and loops ----------------------------------------------------------------

def test_store_on_one_branch_reaches_the_signal():
    text = kernel("scf.if %lt16 {", "  " + STORE, "}", SIGNAL, WAIT, ACQ, LOAD)
    assert lint(text) == expect(text, ("LDS040", "store", "signal"))


def test_release_fence_on_one_branch_leaves_the_other_path_open():
    text = kernel(STORE, "scf.if %lt16 {", "  " + REL, "}", SIGNAL, WAIT, ACQ, LOAD)
    assert lint(text) == expect(text, ("LDS040", "store", "signal"))


def test_release_fence_on_both_branches_is_fixed():
    text = kernel(STORE, "scf.if %lt16 {", "  " + REL, "} else {", "  rocdl.s.wait.dscnt 0", "}",
                  SIGNAL, WAIT, ACQ, LOAD)
    assert lint(text) == set()


def _loop(acquire: str) -> str:
    # The load at the top of the body follows the wait at the bottom of the previous iteration.
    return kernel(
        "%lb = arith.constant 0 : index", "%ub = arith.constant 4 : index", "%st = arith.constant 1 : index",
        "%v = scf.for %i = %lb to %ub step %st iter_args(%acc = %t) -> (i32) {",
        "  %x = llvm.load %q : !llvm.ptr<3> -> i32  // load",
        "  %y = arith.addi %acc, %x : i32",
        "  llvm.store %y, %p : i32, !llvm.ptr<3>  // store",
        "  " + REL, "  " + SIGNAL, "  " + WAIT, "  " + acquire,
        "  scf.yield %y : i32", "}")


def test_loop_back_edge_pairs_the_top_load_with_the_bottom_wait():
    text = _loop("")
    assert lint(text) == expect(text, ("LDS041", "load", "wait"), ("LDS041", "store", "wait"))


def test_a_store_after_the_wait_needs_the_acquire_too():
    # without it the store may move above the wait, past another wave's load before its signal
    text = kernel(LOAD, REL, SIGNAL, WAIT, STORE)
    assert lint(text) == expect(text, ("LDS041", "store", "wait"))
    assert lint(kernel(LOAD, REL, SIGNAL, WAIT, ACQ, STORE)) == set()


def test_loop_with_acquire_after_its_wait_is_fixed():
    assert lint(_loop(ACQ)) == set()


# -- as reported: severity, FLYDSL_LDSSAN_LINT, once per pair, text / JSON / SARIF -------------

ACQUIRE_BUG = kernel(STORE, REL, SIGNAL, WAIT, LOAD)
ACQUIRE_FIXED = kernel(STORE, REL, SIGNAL, WAIT, ACQ, LOAD)


@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(3)", "random(5)+random"])
def test_missing_acquire_is_a_warning_and_its_twin_is_clean(policy):
    report = sanitize_text(ACQUIRE_BUG, policy)
    # the engine sees no race (the load stays below the wait); only the lint speaks
    assert [(v.code, v.severity, v.site.line, v.other_site.line) for v in report.violations] == [
        ("LDS041", "warning", line_of(ACQUIRE_BUG, "load"), line_of(ACQUIRE_BUG, "wait"))]
    assert report.clean  # a warning does not fail
    fixed = sanitize_text(ACQUIRE_FIXED, policy)
    assert fixed.violations == () and fixed.clean


def test_lint_error_mode_fails_and_off_mode_is_silent(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_LINT", "error")
    report = sanitize_text(ACQUIRE_BUG)
    assert [(v.code, v.severity) for v in report.violations] == [("LDS041", "error")]
    assert not report.clean
    monkeypatch.setenv("FLYDSL_LDSSAN_LINT", "off")
    assert sanitize_text(ACQUIRE_BUG).violations == ()


def test_missing_release_is_also_a_race_the_engine_reports():
    text = kernel(STORE, SIGNAL, WAIT, ACQ, LOAD)
    report = sanitize_text(text)
    lint_found = {(v.code, v.site.line, v.other_site.line) for v in report.violations if v.severity == "warning"}
    assert lint_found == expect(text, ("LDS040", "store", "signal"))
    assert "LDS001" in {v.code for v in report.violations if v.severity == "error"}


def test_one_finding_per_site_pair_across_launches():
    merged = merge_reports(sanitize_text(ACQUIRE_BUG), sanitize_text(ACQUIRE_BUG))
    (v,) = merged.violations
    assert v.code == "LDS041" and v.count == 1 and len(v.launches) == 2


def test_findings_print_like_every_rule():
    report = sanitize_text(ACQUIRE_BUG)
    load, wait = line_of(ACQUIRE_BUG, "load"), line_of(ACQUIRE_BUG, "wait")
    text = render_text(report)
    assert "(LDS041)" in text and "missing-acquire" in text and "fx.memory_fence(" in text
    assert f":{load}:" in text and f":{wait}:" in text
    doc = to_json(report)
    assert "LDS041" in doc["rules"] and doc["violations"][0]["rule"] == "LDS041"
    sarif = to_sarif(report)
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "LDS041"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == load


# -- FlyDSL spellings: RMSNorm's first barrier as a split barrier -----------------------------

_S = rmsnorm_sites()
B1, STORE_PARTIAL, LOAD_PARTIAL = _S["publish_partials"], _S["store_partial"], _S["load_partial"]
STORE_TOTAL = _S["store_total"]
_REL = 'fx.memory_fence(syncscope="{}", ordering=fx.AtomicOrdering.Release)'
_ACQ = 'fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Acquire)'
_SPLIT = "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)"

RMS_VARIANTS = {  # B1 replaced by -> (lint findings, a dynamic race too)
    "raw_split": (_SPLIT, {"LDS040", "LDS041"}, True),
    "release_only": (f"{_REL.format('workgroup')}; {_SPLIT}", {"LDS041"}, False),
    "wavefront_release": (f"{_REL.format('wavefront')}; {_SPLIT}; {_ACQ}", {"LDS040"}, True),
    "fenced_split": (f"{_REL.format('workgroup')}; {_SPLIT}; {_ACQ}", set(), False),
}


@pytest.mark.parametrize("name", list(RMS_VARIANTS))
def test_rmsnorm_split_barrier_variants(name):
    line, codes, races = RMS_VARIANTS[name]
    mod = load_variant(rms, [Edit(B1, line)], tag=f"lint_{name}")
    gen = torch.Generator().manual_seed(1)
    x, g = torch.randn(2, 1024, generator=gen), torch.randn(1024, generator=gen)
    with hook.sanitize("round-robin") as col:
        mod.rmsnorm(x, g)
    warned = {(v.code, v.site.line, v.other_site.line) for v in col.warnings}
    pairs = {"LDS040": [STORE_PARTIAL], "LDS041": [LOAD_PARTIAL, STORE_TOTAL]}  # accesses after B1 in wave 0
    assert warned == {(c, line, B1) for c in codes for line in pairs[c]}
    assert all(v.site.file == mod.__file__ for v in col.violations + col.warnings)
    assert all(v.severity == "error" for v in col.violations)
    assert bool(col.violations) == races, col.violations


# -- the bundled kernels give no finding --------------------------------------------------------

def _no_lint(col, kernels: int):
    assert len(col.results) == kernels  # each launch was checked
    found = [(v.code, v.site.location) for v in col.violations + col.warnings if v.code in ("LDS040", "LDS041")]
    assert not found, found


def test_bundled_rmsnorm_and_gemm_have_no_lint_finding():
    with hook.sanitize("round-robin") as col:
        rms.rmsnorm(torch.randn(2, 1024), torch.randn(1024))
        gen = torch.Generator().manual_seed(3)
        a = torch.randn(64, 512, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(64, 512, generator=gen).to(torch.float8_e4m3fn)
        G.gemm(a, b, waves=4, nb=3)
    _no_lint(col, 2)


def test_bundled_mega_moe_has_no_lint_finding():
    x, logits, w1, w2 = moe_inputs(torch.Generator().manual_seed(5))
    with hook.sanitize("round-robin", resident=4) as col:
        out = M.mega_moe(x, logits, w1, w2)
    assert np.isfinite(out.float().numpy()).all()
    _no_lint(col, 4)  # route, two grouped GEMMs, combine


@pytest.mark.parametrize("bad, match", [
    ({"code": "LDS041", "access": 0}, "lint\\[0\\]: bad or missing field"),
    ({"code": "LDS999", "access": 0, "barrier": 1}, "lint\\[0\\]: bad or missing field"),
    ({"code": "LDS001", "access": 0, "barrier": 1}, "LDS001 is not a lint rule"),
    ({"code": "LDS050", "access": 0, "barrier": 1}, "LDS050 is not a lint rule"),  # an ISA finding
    ("LDS041", "lint\\[0\\]: bad or missing field"),
])
def test_a_malformed_lint_entry_is_a_named_error(bad, match):
    from ldssan.decode import SiteTable, SiteTableError
    from ldssan.session import lint_violations

    with pytest.raises(SiteTableError, match=match):
        lint_violations([bad], SiteTable(), kernel="k", launch=0)
    with pytest.raises(SiteTableError, match="not a list"):
        lint_violations({"code": "LDS041"}, SiteTable(), kernel="k", launch=0)
