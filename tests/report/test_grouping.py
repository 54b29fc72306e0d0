"""One report per bug: violations group by (rule, cause, this line, other line) with the
instance count and the wave, lane, workgroup and offset sets of all instances; a session's
ring deduplicates as it records, so one bug does not overflow it."""

from __future__ import annotations

from dataclasses import replace

import torch

from ldssan import hook
from ldssan.decode import Site, SiteTable, decode, decode_ring
from ldssan.kernels import gemm as G
from ldssan.report import render_text
from ldssan.runtime.records import VERBATIM_PER_KEY, Cause, Record, Ring, Rule
from ldssan.variants import Edit, load_variant
from tests.kernels.protocol import gemm_sites

F = "/src/k.py"


def _unrolled_table(copies: int) -> SiteTable:
    """`copies` unrolled loads of one source line (distinct site ids, one location) and
    the store they race with."""
    loads = [Site(i, "ds_read", "llvm.load", F, 20, 8, "k", text="y = smem[i]", bytes=4)
             for i in range(copies)]
    store = Site(100, "ds_write", "llvm.store", F, 12, 4, "k", text="smem[tid] = x", bytes=4)
    return SiteTable(loads + [store], kernel="k")


def _bug(copies=16, waves=8, lanes=32, groups=4, launches=1):
    """Every lane of every wave of every workgroup reads, in each unrolled copy, bytes
    another wave stored without a barrier: one bug, many records."""
    for launch in range(launches):
        for wg in range(groups):
            for w in range(waves):
                for u in range(copies):
                    for lane in range(lanes):
                        yield Record(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, u, 100,
                                     lds_offset=4 * lane + 128 * u, wave=w, other_wave=(w + 1) % waves,
                                     lane=lane, other_lane=lane, workgroup=wg, launch=launch)


def test_unrolled_copies_of_one_line_are_one_report():
    table = _unrolled_table(16)
    rep = decode(_bug(), table)
    (v,) = rep.violations
    assert v.count == rep.records == 16 * 8 * 32 * 4
    assert v.waves == set(range(8)) and v.lanes == set(range(32)) and v.workgroups == set(range(4))
    assert v.lds_range == (0, 4 * 31 + 128 * 15)


def test_different_lines_stay_apart():
    table = _unrolled_table(2)
    moved = replace(table[1], line=21)  # the second load written on another line
    table = SiteTable([table[0], moved, table[100]], kernel="k")
    rep = decode(_bug(copies=2, waves=2, lanes=2, groups=1), table)
    assert sorted(v.site.line for v in rep.violations) == [20, 21]


def test_grouped_text_gives_sets_and_instances_not_one_lane():
    text = render_text(decode(_bug(copies=2, waves=2, groups=1), _unrolled_table(2)))
    assert "by waves 0-1 lanes 0-31 (workgroup 0)" in text
    assert "Seen 128 times:" in text
    assert "lane 0," not in text and "other lane 0" not in text


def test_session_ring_keeps_one_bug_without_overflow_and_exact_sets():
    table = _unrolled_table(16)
    raw = Ring(4096)  # a plain ring, as a device buffer: one bug overflows it
    ring = Ring(4096, verbatim=VERBATIM_PER_KEY)
    for r in _bug(launches=2):
        raw.push(r)
        ring.push(r)
    assert raw.dropped > 0
    assert ring.dropped == 0 and len(ring) < 4096 // 4
    assert len(ring) + ring.merged == raw.written
    want = decode(_bug(launches=2), table)
    got = decode_ring(ring, table)
    (w,), (g,) = want.violations, got.violations
    assert g.count == w.count and got.records == want.records
    for field in ("waves", "lanes", "other_waves", "other_lanes", "workgroups", "launches",
                  "lds_range"):
        assert getattr(g, field) == getattr(w, field), field


def test_session_ring_keeps_the_smallest_sufficient_wait_count():
    ring = Ring(64, verbatim=1)
    for extra in (3, 3, 2, 3, 0, 1):
        ring.push(Record(Rule.WAIT_TOO_WEAK, 0, 1, 2, extra=extra))
    assert [r.extra for r in ring.records()] == [3, 2, 0]
    assert ring.merged == 3


def test_a_plain_ring_keeps_every_record():
    ring = Ring(8)
    for _ in range(5):
        ring.push(Record(1, 1, 0))
    assert len(ring) == 5 and ring.merged == 0


def test_gemm_with_one_bug_is_one_report_per_line_pair_with_nothing_dropped():
    """The bundled GEMM with its steady-state tensor_wait count one too high (the planted
    bug of tests/sanitizer/test_gemm_bugs.py), on the default ring."""
    s = gemm_sites()
    mod = load_variant(G, [Edit(s["steady_wait"], "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2) + 1)")],
                       tag="grouping")
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(128, 640, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(128, 640, generator=gen).to(torch.float8_e4m3fn)
    with hook.sanitize("round-robin") as col:
        mod.gemm(a, b, waves=4, nb=3)
    (res,) = col.results
    rep = res.report
    assert rep.dropped == 0 and rep.violations
    assert {v.code for v in rep.violations} == {"LDS011"}

    def where(site):
        return (site.location, tuple(f.location for f in site.callers))

    pairs = [(v.cause, where(v.site), where(v.other_site)) for v in rep.violations]
    assert len(pairs) == len(set(pairs))  # no two reports for one line pair
    # the unrolled loads (many sites) were grouped: fewer reports than distinct site pairs
    assert len(rep.violations) < len({s.id for s in res.sites.values() if s.kind == "ds_read"})
    assert sum(v.count for v in rep.violations) == rep.records
    for v in rep.violations:
        assert v.count > 1 and len(v.waves) == 4 and len(v.workgroups) > 1
