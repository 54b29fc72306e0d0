"""ldssan.decode: site table, deduplication, counting, buffer naming, placeholders;
and the ldssan.rules catalogue it draws on."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ldssan import rules
from ldssan.decode import (
    Frame, KernelInfo, LdsBuffer, Report, Site, SiteTable, decode, decode_ring, merge_reports,
)
from ldssan.runtime.records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Ring, Rule



# -- site table ------------------------------------------------------------------------


def test_site_table_from_dict_list_and_text(sites, site_json):
    assert len(sites) == len(site_json["sites"])
    assert sites.kernel == "lds_neighbour"
    s = sites[0]
    assert (s.kind, s.file, s.line, s.col, s.function, s.bytes) == (
        "ds_write", "/src/kernels/k_lds.py", 14, 4, "lds_neighbour", 4)
    assert s.chain[1] == Frame("/src/kernels/k_lds.py", 22, 4, "launch")
    # callers drop the site's own frame
    assert s.callers == (Frame("/src/kernels/k_lds.py", 22, 4, "launch"),)
    from_list = SiteTable.from_json(site_json["sites"])
    assert dict(from_list) == dict(sites) and from_list.buffers == []
    assert SiteTable.from_json(json.dumps(site_json)) == sites


def test_site_table_json_round_trip(sites):
    again = SiteTable.from_json(sites.to_json())
    assert again == sites
    assert again.buffers == sites.buffers and again.kernel == sites.kernel


def test_site_table_rejects_duplicates_and_malformed_entries(site_json):
    site = site_json["sites"][0]
    with pytest.raises(ValueError, match="duplicate site id 0"):
        SiteTable.from_json([site, site])
    with pytest.raises(ValueError, match="malformed site table entry"):
        SiteTable.from_json([{"id": 3, "kind": "ds_read"}])  # no file/line
    with pytest.raises(TypeError):
        SiteTable.from_json("42")


def test_site_optional_fields_default():
    s = Site.from_dict({"id": 9, "kind": "fence", "file": "f.py", "line": 3})
    defaults = (s.op, s.col, s.function, s.chain, s.text, s.buffer, s.bytes)
    assert defaults == ("", 0, "", (), "", None, 0)
    assert s.known and not s.is_access and s.location == "f.py:3:1"  # printed 1-based


def test_unknown_site_resolves_to_placeholder(sites):
    ph = sites.resolve(17)
    assert not ph.known
    assert ph.location == "<unknown site 17>" == ph.short_location
    assert sites.resolve(NO_SITE).location == "<no site>"
    assert sites.resolve(1).known


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (0, "lds"),
        (255, "lds"),
        (256, "smem_a"),
        (256 + 4095, "smem_a"),
        (256 + 4096, "smem_a_stage1"),  # nested: smallest containing buffer wins
        (256 + 8191, "smem_a_stage1"),
        (256 + 8192, None),  # past every buffer
    ],
)
def test_buffer_at(sites, offset, expected):
    buf = sites.buffer_at(offset)
    assert (buf.name if buf else None) == expected


def test_open_ended_buffer_is_a_fallback():
    t = SiteTable(buffers=[LdsBuffer("static", 0, 64), LdsBuffer("dynamic", 64, 0)])
    assert t.buffer_at(10).name == "static"
    assert t.buffer_at(100000).name == "dynamic"


# -- decode ----------------------------------------------------------------------------


def test_dedup_merges_same_key_and_counts(sites, raw_records, site_json):
    rep = decode(raw_records, sites)
    assert len(rep.violations) == 1
    v = rep.violations[0]
    assert v.rule is Rule.RAW_UNPUBLISHED and v.cause is Cause.UNPUBLISHED_DS_STORE
    assert v.count == 64 and rep.records == 64
    assert v.site.id == 1 and v.other_site.id == 0
    assert v.waves == {0, 1} and v.other_waves == {0, 1}
    assert v.lanes == set(range(32)) and v.other_lanes == set(range(32))
    assert v.workgroups == {0} and v.launches == {0}
    # the first record is the example
    first = raw_records[0]
    assert (v.wave, v.lane, v.other_wave, v.other_lane) == (0, 0, 0, 1)
    assert v.lds_offset == first.lds_offset == 4
    assert v.lds_range == (0, 252)
    assert v.buffer == LdsBuffer("lds", 0, 256) and v.buffer_offset == "lds+0x4"
    assert rep.kernels == (KernelInfo("lds_neighbour", 1, len(site_json["sites"]), sites.build),)


def test_different_cause_or_other_site_are_separate(sites):
    recs = [
        Record(1, Cause.NO_BARRIER, 1, 0, wave=1, other_wave=0),
        Record(1, Cause.BARE_BARRIER, 1, 0, wave=1, other_wave=0),
        Record(1, Cause.NO_BARRIER, 1, 5, wave=1, other_wave=0),
        Record(1, Cause.NO_BARRIER, 1, 0, wave=1, other_wave=0, workgroup=3, launch=2),
    ]
    rep = decode(recs, sites)
    assert sorted(v.count for v in rep.violations) == [1, 1, 2]
    merged = next(v for v in rep.violations if v.count == 2)
    assert merged.workgroups == {0, 3} and merged.launches == {0, 2}
    assert merged.workgroup == 0 and merged.launch == 0
    assert rep.kernels[0].launches == 2


def test_sorted_by_rule_code_then_site_line(sites):
    recs = [
        Record(30, 0, 5),  # LDS030 at gemm.py:55
        Record(10, Cause.COPY_NOT_WAITED, 5, 3),  # LDS010 at gemm.py:55
        Record(1, Cause.NO_BARRIER, 1, 0),  # LDS001 at k_lds.py:17
        Record(1, Cause.NO_BARRIER, 0, 1),  # LDS001 at k_lds.py:14
        Record(2, Cause.NO_BARRIER, 0, 1),  # LDS002 at k_lds.py:14
    ]
    got = [(v.code, v.site.line) for v in decode(recs, sites).violations]
    assert got == [("LDS001", 14), ("LDS001", 17), ("LDS002", 14), ("LDS010", 55), ("LDS030", 55)]
    # deterministic regardless of record order
    assert decode(list(reversed(recs)), sites).violations == decode(recs, sites).violations


def test_sentinels_become_none(sites):
    v = decode([Record(13, Cause.WAVE_END, 3, NO_SITE, wave=2)], sites).violations[0]
    assert v.other_site is None
    assert v.lane is None and v.other_wave is None and v.other_lane is None
    assert v.wave == 2 and v.waves == {2} and v.lanes == frozenset()


def test_unknown_site_does_not_crash(sites):
    rep = decode([Record(1, 1, 17, 99, wave=1, other_wave=0)], sites)
    v = rep.violations[0]
    assert v.site.location == "<unknown site 17>"
    assert v.other_site.location == "<unknown site 99>"


def test_unknown_rule_and_cause_numbers_do_not_crash(sites):
    v = decode([Record(77, 99, 1)], sites).violations[0]
    assert v.rule == 77 and not isinstance(v.rule, Rule)
    assert v.code == "LDS077" and v.name == "unknown-rule"
    assert v.message == "unknown cause 99"


def test_buffer_unknown_offset_prints_hex(sites):
    v = decode([Record(31, 0, 1, lds_offset=0x9000)], sites).violations[0]
    assert v.buffer is None and v.buffer_offset == "0x9000"


def test_wait_too_weak_names_wait_and_sufficient_count(sites):
    # other_site is the wait, whose source text says tensor_wait(1)
    v = decode([Record(11, Cause.COPY_NOT_WAITED, 5, 4, extra=0)], sites).violations[0]
    assert v.message == "s_wait_tensorcnt 1 leaves the copy outstanding; 0 would suffice"


def test_wait_too_weak_without_wait_text_says_count_bound(sites):
    # other_site is the TDM copy (what the engine records): the counter from its kind, the
    # wait found among the table's waits of that counter (its count 1 is not above 2, so
    # the bound is given), and both lines named
    v = decode([Record(11, Cause.COPY_NOT_WAITED, 5, 3, extra=2)], sites).violations[0]
    assert v.message == (
        "s_wait_tensorcnt leaves the copy outstanding; a count of ≤ 2 would suffice "
        "(the wait: /src/kernels/gemm.py:50 `tdm_ops.tensor_wait(1)`; "
        "the copy: /src/kernels/gemm.py:40 `tdm_ops.tensor_load_2d(desc)`)")


def test_wait_too_weak_keeps_smallest_sufficient_count(sites):
    recs = [Record(11, 5, 5, 4, extra=1, wave=0), Record(11, 5, 5, 4, extra=0, wave=1)]
    v = decode(recs, sites).violations[0]
    assert v.extra == 0 and v.count == 2
    assert "0 would suffice" in v.message


def test_cause_none_uses_rule_default(sites):
    v = decode([Record(30, Cause.NONE, 5)], sites).violations[0]
    assert v.message == rules.info(Rule.UNINIT_READ).default_cause


def test_site_table_given_as_json_text(raw_records, site_json):
    rep = decode(raw_records, json.dumps(site_json))
    assert rep.violations[0].site.line == 17


def test_decode_ring_carries_dropped_and_capacity(sites, raw_records):
    ring = Ring(capacity=16)
    for r in raw_records:
        ring.push(r)
    rep = decode_ring(ring, sites)
    assert rep.records == 16 and rep.dropped == 48 and rep.capacity == 16
    assert not rep.clean
    assert rep.violations[0].count == 16


def test_empty_report_is_clean(sites):
    rep = decode([], sites)
    assert rep.clean and rep.violations == () and rep.records == 0
    assert rep.kernels == (KernelInfo("lds_neighbour", 0, len(sites), sites.build),)
    assert not decode([], sites, dropped=1).clean


def test_merge_reports_dedups_across_launches(sites, raw_records):
    a = decode(raw_records[:10], sites)
    b = decode([replace(r, launch=1) for r in raw_records[10:]], sites, dropped=2, capacity=8)
    m = merge_reports(a, b)
    assert len(m.violations) == 1
    v = m.violations[0]
    assert v.count == 64 and v.launches == {0, 1}
    assert m.records == 64 and m.dropped == 2 and m.capacity == 8
    assert m.kernels == (KernelInfo("lds_neighbour", 2, len(sites), sites.build),)
    assert a.merge(b) == m


# -- rules catalogue -------------------------------------------------------------------


def test_catalogue_covers_every_rule_with_unique_codes_and_names():
    assert set(rules.CATALOGUE) == set(Rule)
    codes = [i.code for i in rules.CATALOGUE.values()]
    names = [i.name for i in rules.CATALOGUE.values()]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    for rule, i in rules.CATALOGUE.items():
        assert i.code == rule.code and i.name == rules.rule_name(rule)
        assert i.title and "\n" not in i.title
        assert len(i.explanation) > 150, i.code
        assert any(api in i.fix for api in ("fx.", "tdm_ops.")) or rule is Rule.OOB, i.code
        assert i.default_cause


def test_catalogue_matches_architecture_names():
    # stable codes keep their names; new codes (ISA checks, ...) only add entries
    names = {i.code: i.name for i in rules.CATALOGUE.values()}
    assert len(set(names.values())) == len(names)
    assert names.items() >= {
        "LDS001": "raw-unpublished", "LDS002": "war-reuse", "LDS003": "waw",
        "LDS010": "dma-read-before-wait", "LDS011": "wait-too-weak", "LDS012": "dma-overlap",
        "LDS013": "dma-never-waited", "LDS020": "barrier-divergence", "LDS030": "uninit-read",
        "LDS031": "oob", "LDS040": "missing-release", "LDS041": "missing-acquire",
    }.items()


def test_lds001_is_grounded_in_the_gfx1250_model():
    i = rules.info(Rule.RAW_UNPUBLISHED)
    for needle in ("s_barrier_signal", "s_wait_dscnt", "release fence", "does not"):
        assert needle in i.explanation
    for needle in ("fx.gpu.barrier()", "fx.rocdl.s_wait_dscnt(0)", "fx.memory_fence("):
        assert needle in i.fix


def test_every_cause_has_text():
    for cause in Cause:
        text = rules.cause_text(cause, Rule.RAW_UNPUBLISHED)
        assert text and "\n" not in text
    assert rules.cause_text(Cause.NONE) == ""
    assert rules.cause_text(1234) == "unknown cause 1234"
    assert rules.cause_name(Cause.UNPUBLISHED_DS_STORE) == "unpublished-ds-store"


def test_fix_hint_specialises_by_cause():
    base = rules.fix_hint(Rule.RAW_UNPUBLISHED)
    window = rules.fix_hint(Rule.RAW_UNPUBLISHED, Cause.SIGNAL_WAIT_WINDOW)
    assert base == rules.info(Rule.RAW_UNPUBLISHED).fix
    assert window != base and "window" in window
    assert "asyncmark()" in rules.fix_hint(Rule.DMA_NEVER_WAITED, Cause.ASYNCMARK_UNMARKED)
    assert rules.fix_hint(99, 99) == rules.info(99).fix


@pytest.mark.parametrize("key", ["LDS001", "lds001", "raw-unpublished", "1"])
def test_lookup(key):
    assert rules.lookup(key) is Rule.RAW_UNPUBLISHED


def test_lookup_unknown_lists_known_rules():
    with pytest.raises(KeyError, match="LDS031 \\(oob\\)"):
        rules.lookup("LDS999")


def test_report_rules_property(sites):
    rep = decode([Record(30, 0, 5), Record(1, 1, 1, 0), Record(1, 2, 1, 0)], sites)
    assert rep.rules == ("LDS001", "LDS030")
    assert isinstance(rep, Report)

