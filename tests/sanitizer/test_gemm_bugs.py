"""Six one-line synchronisation bugs in the bundled GEMM, each reported on a single launch
with the right rule and both source lines (the access and the other access, each with its
call chain through the kernel's protocol lines)."""

from __future__ import annotations

import pytest
import torch

from ldssan import hook
from ldssan.kernels import gemm as G
from ldssan.variants import Edit, load_variant
from tests.kernels.protocol import gemm_sites

S = gemm_sites()
COMPUTE = {S["steady_compute"], S["drain_compute"]}
TDM_ISSUE = {S["prologue_issue"], S["prefetch_issue"]}

# name: (edit, shape, rule, this access passes through, other access passes through)
BUGS = {
    "tensor_wait_deleted": (Edit(S["steady_wait"], None), (128, 128, 640), "LDS010", COMPUTE, TDM_ISSUE),
    "wait_count_plus_one": (Edit(S["steady_wait"], "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2) + 1)"),
                            (128, 128, 640), "LDS011", COMPUTE, TDM_ISSUE),
    # each wave still waits for its stage; only the barrier publishing it is gone: LDS001
    "kstep_barrier_deleted": (Edit(S["steady_barrier"], None), (128, 128, 640), "LDS001", COMPUTE, TDM_ISSUE),
    "prefetch_one_stage_early": (Edit(S["prefetch_issue"], "_issue_stage(kt + nb)"), (128, 128, 640),
                                 "LDS002", {S["prefetch_issue"]}, COMPUTE),
    "pingpong_slot_swapped": (Edit(S["steady_compute"], "_compute((kt + 1) % nb)"), (128, 128, 640),
                              "LDS011", COMPUTE, TDM_ISSUE),
    # K = 512: the last k-tile is read from slot 0, which the C staging tile then overwrites
    "epilogue_reuse_barrier_deleted": (Edit(S["epilogue_barrier"], None), (128, 128, 512), "LDS002",
                                       set(), COMPUTE),
}

def _lines(site, file: str) -> set[int]:
    """Lines of `file` on the access's call chain (the kernel's own lines, not its helpers')."""
    return {f.line for f in site.chain if f.file == file} | ({site.line} if site.file == file else set())


@pytest.mark.parametrize("name", list(BUGS))
def test_gemm_bug_is_reported_with_rule_and_both_lines(name):
    edit, (m, n, k), code, this_via, other_via = BUGS[name]
    mod = load_variant(G, [edit], tag=name)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    with hook.sanitize("round-robin") as col:
        mod.gemm(a, b, waves=4, nb=3)  # the verdict is the sanitizer's; values are not checked
    found = [v for v in col.violations if v.code == code]
    assert found, f"{name}: expected {code}, got {sorted({v.code for v in col.violations})}"
    # where the edit moved an access (prefetch, slot), that access's line is one of the two
    edited = {edit.line} if name in ("prefetch_one_stage_early", "pingpong_slot_swapped") else set()
    f = mod.__file__
    ok = [v for v in found
          if (not this_via or _lines(v.site, f) & this_via) and v.other_site is not None
          and (not other_via or _lines(v.other_site, f) & other_via)
          and edited <= _lines(v.site, f) | _lines(v.other_site, f)]
    assert ok, [(v.code, sorted(_lines(v.site, f)), sorted(_lines(v.other_site, f)) if v.other_site else None)
                for v in found]
