"""Four one-line synchronisation bugs in the bundled MegaMoE, each reported on a single
sanitized launch with the right rule and both source lines (the access and the other access,
each through its call chain in kernels/mega_moe.py):

* the barrier after the tile-index broadcast read deleted: thread 0 stores the *next* index
  while a lagging wave has not read the current one (aiter #6127 class) -> LDS002;
* the tile-index word placed inside the A ring slot (offset 0): the stage-0 TDM load writes
  the bytes thread 0 just stored -> LDS012;
* the COUNT -> RESERVE barrier deleted: RESERVE reads per-expert counts that other waves' LDS
  atomics have not published -> LDS001;
* the rowmap read moved above its copy's wait: the epilogue reads rowmap words the async copy
  is still writing -> LDS010.
"""

from __future__ import annotations

import pytest
import torch

from ldssan import hook
from ldssan.kernels import mega_moe as M
from ldssan.kernels.mega_moe_reference import moe_inputs
from ldssan.variants import Edit, load_variant
from tests.kernels.protocol import mega_moe_sites

S = mega_moe_sites()
READ = "rows = _read_rowmap()"
WAIT = "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)"

# name: (edits, rule, lines on this access's chain, lines on the other access's chain)
BUGS = {
    "tile_read_barrier_deleted": (
        [Edit(S["tile_read_barrier"], None)], "LDS002",
        {S["tile_fetch"]}, {S["tile_read_first"], S["tile_read"]}),
    "tile_word_in_a_ring_slot": (
        [Edit(S["tile_word"], "tile_word = lds_addr")], "LDS012",
        {S["prologue_issue"]}, {S["tile_fetch"]}),
    "count_barrier_deleted": (
        [Edit(S["count_barrier"], None)], "LDS001",
        {S["reserve_count_read"]}, {S["count_atomic"]}),
    # one line moved: the read takes the wait's place, the wait goes below the barrier
    "rowmap_read_before_its_wait": (
        [Edit(S["rowmap_wait"], READ), Edit(S["rowmap_read"], WAIT)], "LDS010",
        {S["rowmap_wait"]}, {S["rowmap_issue"], S["rowmap_copy"]}),
}

def _lines(site, path: str) -> set[int]:
    """Lines of ``path`` (the variant's file) on a site and its call chain."""
    own = {site.line} if site.file == path else set()
    return own | {f.line for f in site.chain if f.file == path}


def _inputs():
    return moe_inputs(torch.Generator().manual_seed(5))


def test_the_edits_are_the_planted_lines():
    lines = open(M.__file__, encoding="utf-8").read().splitlines()
    assert lines[S["tile_read_barrier"] - 1].strip() == "fx.gpu.barrier()"
    assert lines[S["count_barrier"] - 1].strip() == "fx.gpu.barrier()"
    assert lines[S["rowmap_wait"] - 1].strip() == WAIT
    assert lines[S["rowmap_read"] - 1].strip() == READ
    assert S["rowmap_wait"] < S["epilogue_barrier"] < S["rowmap_read"]


@pytest.mark.parametrize("policy", ["round-robin", "lockstep"])  # lockstep: the work loop batched
@pytest.mark.parametrize("name", list(BUGS))
def test_mega_moe_bug_is_reported_with_rule_and_both_lines(name, policy):
    edits, code, this_via, other_via = BUGS[name]
    mod = load_variant(M, edits, tag=name)
    x, logits, w1, w2 = _inputs()
    with hook.sanitize(policy, resident=4) as col:
        mod.mega_moe(x, logits, w1, w2)  # the verdict is the sanitizer's; values are not checked
    found = [v for v in col.violations if v.code == code]
    assert found, f"{name}: expected {code}, got {sorted({v.code for v in col.violations})}"
    path = mod.__file__
    ok = [v for v in found if _lines(v.site, path) & this_via
          and v.other_site is not None and _lines(v.other_site, path) & other_via]
    assert ok, [(v.code, sorted(_lines(v.site, path)), sorted(_lines(v.other_site, path)) if v.other_site else None)
                for v in found]
