"""The sanitizer on the bundled RMSNorm: clean runs report nothing under every policy, and
four one-line bugs are each reported on a single launch with the right rule and both lines.

Alongside, each buggy launch's output is compared with the reference (what a unit test
would do); how many of the four bugs that single-launch output check catches is printed in
the session summary ("ldssan planted bugs")."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from ldssan import hook
from ldssan.kernels import rmsnorm as rms
from ldssan.runtime.emu import ALL_POLICIES
from ldssan.variants import Edit, load_variant
from tests.kernels.protocol import rmsnorm_sites

OUTPUT_CHECKS: dict[str, dict[str, bool]] = {}


_S = rmsnorm_sites()
B1, B2 = _S["publish_partials"], _S["publish_total"]
STORE_PARTIAL, LOAD_PARTIAL = _S["store_partial"], _S["load_partial"]
STORE_TOTAL, LOAD_TOTAL = _S["store_total"], _S["load_total"]

VARIANTS = {
    # (a) the barrier publishing the per-wave partials is gone
    "a_no_barrier_1": ([Edit(B1, None)], "LDS001", LOAD_PARTIAL, STORE_PARTIAL),
    # (b) the barrier publishing the total is gone
    "b_no_barrier_2": ([Edit(B2, None)], "LDS001", LOAD_TOTAL, STORE_TOTAL),
    # (c) aiter #6344: raw split barrier, no fences, no dscnt wait
    "c_raw_split_barrier": ([Edit(B1, "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)")],
                            "LDS001", LOAD_PARTIAL, STORE_PARTIAL),
    # (d) wave 0 reads the total slot instead of the partials: LDS nobody has written yet
    "d_uninit_slot": ([Edit(LOAD_PARTIAL, "p = fx.memref_load(total, 0)")], "LDS030", LOAD_PARTIAL, None),
}


def _inputs():
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 4096, generator=gen) * torch.logspace(-2, 2, 4).reshape(4, 1)).to(torch.bfloat16)
    g = torch.randn(4096, generator=gen).to(torch.bfloat16)
    return x, g


def _reference(x, g):
    return rms.rmsnorm_reference(x.float().numpy().astype(ml_dtypes.bfloat16),
                                 g.float().numpy().astype(ml_dtypes.bfloat16), 1e-6).astype(np.float32)


@pytest.mark.parametrize("policy", [str(p) for p in ALL_POLICIES])
@pytest.mark.parametrize("m, n, dtype", [(2, 510, torch.bfloat16), (2, 4096, torch.float32),
                                         (2, 8190, torch.bfloat16), (1, 8192, torch.float32),
                                         (1, 32768, torch.bfloat16)])
def test_clean_rmsnorm_reports_nothing(m, n, dtype, policy):
    x = torch.randn(m, n).to(dtype)
    g = torch.randn(n).to(dtype)
    with hook.sanitize(policy) as col:
        rms.rmsnorm(x, g)
    assert len(col.results) == 1
    assert col.results[0].report.clean, col.results[0].report.violations
    assert not col.results[0].report.dropped


@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(4)"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_planted_bug_is_reported_with_rule_and_both_lines(name, policy):
    edits, code, this_line, other_line = VARIANTS[name]
    mod = load_variant(rms, edits, tag=name)
    x, g = _inputs()
    with hook.sanitize(policy) as col:
        y = mod.rmsnorm(x, g)
    found = [v for v in col.violations if v.code == code]
    OUTPUT_CHECKS.setdefault(name, {})[policy] = (bool(found), not np.allclose(
        y.float().numpy(), _reference(x, g), rtol=2 ** -7, atol=1e-3))
    assert found, f"{name}: expected {code}, got {[v.code for v in col.violations]}"
    v = found[0]
    assert v.site.line == this_line and v.site.file == mod.__file__, v.site
    if other_line is None:
        assert v.other_site is None
    else:
        assert v.other_site is not None and v.other_site.line == other_line, v.other_site
    if name == "c_raw_split_barrier":
        assert v.cause.name in ("BARE_BARRIER", "UNPUBLISHED_DS_STORE"), v.cause
    # nothing unrelated: every report is about the two accesses of the planted race
    # (a racy read of never-written bytes may add an LDS030 for the same read)
    involved = {this_line, other_line}
    for other in col.violations:
        assert other.site.line in involved, (other.code, other.site)


def summary_lines() -> list[str]:
    if not OUTPUT_CHECKS:
        return []
    lines = ["ldssan planted bugs (RMSNorm 4x4096 bf16): sanitizer vs a one-launch output check"]
    for policy in ("round-robin", "reverse", "random(4)"):
        runs = [v[policy] for v in OUTPUT_CHECKS.values() if policy in v]
        san = sum(1 for s, _o in runs if s)
        out = sum(1 for _s, o in runs if o)
        lines.append(f"  policy {policy:<12}: sanitizer reported {san}/{len(runs)}, "
                     f"output check caught {out}/{len(runs)}")
    return lines


@pytest.mark.parametrize("batch", [1, 4])
def test_batched_workgroups_report_the_same_violations(batch):
    edits, code, this_line, other_line = VARIANTS["b_no_barrier_2"]
    mod = load_variant(rms, edits, tag="b_no_barrier_2")
    x, g = _inputs()
    with hook.sanitize("round-robin", batch=batch) as col:
        mod.rmsnorm(x, g)
    keys = {(v.code, v.site.line, v.other_site.line if v.other_site else None) for v in col.violations}
    assert keys == {(code, this_line, other_line)}
    assert set(col.violations[0].workgroups) == {0, 1, 2, 3}
