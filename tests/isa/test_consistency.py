"""The ISA check next to the sanitizer (issue #18, item 3): the classification of one case
(agree / ISA-only / IR-only, with the reason), and the clean bundled GEMM and MegaMoE giving
no ISA finding and no wait that leaves outstanding what its IR wait retires (RMSNorm's
is in test_build.py). The full table over every planted bug is
`python -m tests.isa.consistency` (tests/isa/consistency.json)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ldssan.isa.asm import parse_kernel
from ldssan.isa.capture import capture_builds
from ldssan.isa.check import check_build, check_kernel
from ldssan.isa.compare import compare
from ldssan.isa.findings import KernelResult
from ldssan.isa.intent import gaps, kernel_intent
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels.mega_moe_reference import moe_inputs
from ldssan.runtime.records import Cause, Rule
from tests.isa.test_counters import kernel


def _result(*body: str) -> list[KernelResult]:
    findings, notes = check_kernel(parse_kernel(kernel(*body), "k"))
    return [KernelResult("k", len(body), None, tuple(findings), tuple(notes))]


def _violation(rule: Rule, cause: Cause = Cause.NONE, other_line: int | None = None, *, site_line: int = 99):
    return SimpleNamespace(rule=rule, cause=cause, code=rule.code, site=SimpleNamespace(line=site_line),
                           other_site=None if other_line is None else SimpleNamespace(line=other_line))


RAW = ("ds_store_b32 v0, v1", "s_barrier_signal -1")  # store on line 1
WAITED = ("ds_store_b32 v0, v1", "s_wait_dscnt 0x0", "s_barrier_signal -1")


def test_classification():
    assert compare(_result(*WAITED), [])["verdict"] == "agree"
    row = compare(_result(*RAW), [_violation(Rule.MISSING_RELEASE, other_line=2, site_line=1)])
    assert (row["verdict"], row["reason"]) == ("agree", "both report the store left unpublished at the barrier")
    row = compare(_result(*RAW), [_violation(Rule.RAW_UNPUBLISHED, Cause.UNPUBLISHED_DS_STORE, 7)])
    assert row["verdict"] == "agree" and "store lines differ" in row["reason"]
    row = compare(_result(*RAW), [_violation(Rule.WAW, Cause.BARE_BARRIER, 1)])  # the race another wave ran into
    assert row["verdict"] == "agree" and row["ir_release_other_lines"] == [1]
    assert compare(_result(*RAW), [_violation(Rule.WAW, Cause.NO_BARRIER, 1)])["verdict"] == "ISA-only"
    assert compare(_result(*RAW), [])["verdict"] == "ISA-only"
    row = compare(_result(*WAITED), [_violation(Rule.MISSING_RELEASE, other_line=2, site_line=1)])
    assert row["verdict"] == "IR-only" and "backend" in row["reason"]
    row = compare(_result(*WAITED), [_violation(Rule.DMA_READ_BEFORE_WAIT, other_line=3)])
    assert row["verdict"] == "IR-only" and row["reason"].startswith("LDS010:")
    row = compare(_result("ds_load_b32 v1, v0", "v_mov_b32_e32 v3, v1"), [])
    assert row["verdict"] == "ISA-only" and row["reason"].startswith("LDS052 at /src/k.py:2:4")


def test_clean_bundled_gemm_and_mega_moe_have_no_isa_finding():
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(128, 256, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(128, 256, generator=gen).to(torch.float8_e4m3fn)
    x, logits, w1, w2 = moe_inputs(gen)

    def both():
        G.gemm(a, b, waves=4, nb=3)
        M.mega_moe(x, logits, w1, w2)

    builds = capture_builds(both)
    results = [check_build(b, offsets=False) for b in builds]
    assert len(results) == 5  # gemm + route, 2 grouped GEMMs, combine
    assert [(r.kernel, f.rule.code, f.this.where()) for r in results for f in r.findings] == []
    assert [r.notes for r in results] == [()] * 5
    # every hand-written wait does in the compiled code what it does in the IR (LDS051's analysis)
    tables = {b.kernel: kernel_intent(b.ir, b.kernel) for b in builds}
    assert {(c, n) for k in ("gemm_kernel_0", "moe_gemm_kernel_0") for (_f, _l, c, n) in tables[k]} == \
        {("tensorcnt", 0), ("asynccnt", 0)}
    assert [(b.kernel, g.wait.where(), g.op.where()) for b in builds
            for g in gaps(parse_kernel(b.isa, b.kernel), tables[b.kernel])] == []
