"""ldssan.report: console text (TSan shape), JSON round trip, SARIF 2.1.0, atomic writes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from ldssan import report as rpt
from ldssan import rules
from ldssan.decode import decode
from ldssan.runtime.records import Record, Rule

from .conftest import mixed_records


@pytest.fixture
def lds001(sites, raw_records):
    return decode(raw_records, sites)


@pytest.fixture
def mixed(sites, raw_records):
    return decode(raw_records + mixed_records(), sites, dropped=0, capacity=64)


# -- console ---------------------------------------------------------------------------


def test_text_has_tsan_shape(lds001, match_lines):
    text = rpt.render_text(lds001)
    match_lines(text, [
        "==================",
        "WARNING: ldssan: read of LDS bytes another wave wrote* (LDS001)",
        "Cause: the writer's ds store was not dscnt-complete at its s_barrier_signal*",
        # every instance's waves and lanes and the offset range, not one example lane
        "This access: read of 4 bytes at LDS lds+0x0..0xfc by waves 0-1 lanes 0-31 (workgroup 0)",
        "  at /src/kernels/k_lds.py:17:9 in lds_neighbour",  # columns 1-based, as in SARIF
        "    Out[tid] = lds[(tid + 1) % N]",
        "Previous access: write of 4 bytes at LDS lds+0x0..0xfc by waves 0-1 lanes 0-31 "
        "(workgroup 0)",
        "  at /src/kernels/k_lds.py:14:5 in lds_neighbour",
        "    lds[tid] = fx.Int32(tid) * 10",
        "  called from /src/kernels/k_lds.py:22:5 in launch",
        "Seen 64 times: waves 0-1, other waves 0-1, lanes 0-31, other lanes 0-31, "
        "workgroup 0, launch 0*",
        "LDS buffer: lds (256 bytes at 0x0)",
        "  On gfx1250 a barrier only synchronizes execution*",
        "  Fix: *fx.rocdl.s_wait_dscnt(0)*",
        "SUMMARY: ldssan: LDS001 raw-unpublished /src/kernels/k_lds.py:17",
        "==================",
        "ldssan: reported 1 violation (64 records)",
        "ldssan:   kernel lds_neighbour: 1 launch, 6 instrumented sites",
    ])


def test_text_contains_code_both_locations_and_both_sources(lds001):
    text = rpt.render_text(lds001)
    for needle in ("LDS001", "k_lds.py:17:9", "k_lds.py:14:5",
                   "Out[tid] = lds[(tid + 1) % N]", "lds[tid] = fx.Int32(tid) * 10"):
        assert needle in text


def test_text_is_plain_and_not_wrapped(lds001):
    text = rpt.render_text(lds001, width=60)
    assert "\x1b[" not in text
    # the long cause line stays one line even on a narrow console
    assert any(line.startswith("Cause: ") and len(line) > 60 for line in text.splitlines())
    # prose is wrapped to the width
    prose = [l for l in text.splitlines() if l.startswith("  On gfx1250")]
    assert prose and len(prose[0]) <= 60


def test_source_text_is_not_rich_markup(sites):
    from ldssan.decode import Site, SiteTable

    s = Site(1, "ds_read", "llvm.load", "k.py", 3, 0, "k", text="x = smem[bold][i]", bytes=4)
    text = rpt.render_text(decode([Record(30, 0, 1)], SiteTable([s])))
    assert "x = smem[bold][i]" in text


def test_dropped_banner_only_when_dropped(sites, raw_records):
    clean_text = rpt.render_text(decode(raw_records, sites))
    assert "DROPPED" not in clean_text
    text = rpt.render_text(decode(raw_records, sites, dropped=7, capacity=64))
    assert ("ldssan: 7 violation records were DROPPED (ring capacity 64) — raise "
            "FLYDSL_LDSSAN_RING") in text
    unknown_cap = rpt.render_text(decode([], sites, dropped=1))
    assert "DROPPED (ring capacity unknown)" in unknown_cap


def test_dropped_banner_is_red(sites):
    console = Console(record=True, width=120, file=io.StringIO(), force_terminal=True,
                      color_system="standard")
    rpt.render(decode([], sites, dropped=3, capacity=8), console)
    html = console.export_html(inline_styles=True, clear=False)
    assert "DROPPED" in html and ("color: #800000" in html or "color: #ff0000" in html)
    assert "DROPPED" in console.export_text()


def test_render_to_recording_console(lds001):
    console = Console(record=True, width=100, file=io.StringIO())
    rpt.render(lds001, console)
    assert console.export_text() == rpt.render_text(lds001, width=100)


def test_unknown_site_renders_placeholder(mixed):
    text = rpt.render_text(mixed)
    assert "  at <unknown site 17>" in text
    assert "SUMMARY: ldssan: LDS030 uninit-read <unknown site 17>" in text
    assert "This access: access at LDS 0x9000 by wave 0 lane 3 (workgroup 0)" in text


def test_other_kinds_render(mixed, match_lines):
    text = rpt.render_text(mixed)
    match_lines(text, [
        "WARNING: ldssan: * (LDS011)",
        "Cause: s_wait_tensorcnt 1 leaves the copy outstanding; 0 would suffice",
        "This access: read of 16 bytes at LDS smem_a+0x10 by wave 1 (workgroup 0)",
        "Wait: rocdl.s.wait.tensorcnt by wave 1 (workgroup 0)",
        "  at /src/kernels/gemm.py:50:9 in gemm",
        "    tdm_ops.tensor_wait(1)",
        "WARNING: ldssan: async/TDM copies never completed (LDS013)",
        "This access: TDM copy to LDS of 4096 bytes at LDS smem_a+0x0 by wave 3 (workgroup 0)",
        "WARNING: ldssan: * (LDS020)",
        "This barrier: rocdl.s.barrier.signal by wave 0 (workgroup 0)",
        "Other barrier: rocdl.s.barrier.signal by wave 1 (workgroup 0)",
    ])
    # LDS013 has no other access
    block = text[text.index("(LDS013)"):text.index("(LDS020)")]
    assert "Previous" not in block and "In-flight" not in block and "Other" not in block
    assert text.count("==================") == 2 * len(mixed.violations)


def test_max_violations_hides_the_rest(mixed):
    text = rpt.render_text(mixed, max_violations=1)
    assert text.count("WARNING: ldssan:") == 1
    assert f"ldssan: {len(mixed.violations) - 1} more violations not shown" in text
    assert f"reported {len(mixed.violations)} violations" in text


def test_empty_report_text(sites):
    text = rpt.render_text(decode([], sites))
    assert "WARNING" not in text
    assert "ldssan: reported 0 violations (0 records)" in text


# -- JSON ------------------------------------------------------------------------------


def test_json_round_trip(mixed):
    doc = rpt.to_json(mixed)
    text = json.dumps(doc)  # JSON-serializable as is
    assert rpt.from_json(text) == mixed
    assert rpt.from_json(json.loads(text)) == mixed
    assert rpt.to_json(rpt.from_json(doc)) == doc


def test_json_schema_fields(mixed):
    doc = rpt.to_json(mixed)
    assert doc["schema"] == rpt.JSON_SCHEMA
    assert doc["summary"] == {"violations": len(mixed.violations), "suppressed": 0, "records": mixed.records,
                              "dropped": 0, "capacity": 64, "clean": False}
    assert set(doc["rules"]) == {"LDS001", "LDS011", "LDS013", "LDS020", "LDS030"}
    v = doc["violations"][0]
    assert (v["rule"], v["name"], v["cause"], v["count"]) == (
        "LDS001", "raw-unpublished", "unpublished-ds-store", 64)
    assert v["access"]["site"]["line"] == 17 and v["other"]["site"]["line"] == 14
    assert v["lds"]["buffer"]["name"] == "lds"
    lds013 = next(x for x in doc["violations"] if x["rule"] == "LDS013")
    assert lds013["other"]["site"] is None


def test_from_json_rejects_other_documents():
    with pytest.raises(ValueError, match="ldssan.report/1"):
        rpt.from_json({"schema": "something/else"})


# -- SARIF -----------------------------------------------------------------------------


def test_sarif_required_keys(mixed):
    doc = rpt.to_sarif(mixed)
    json.dumps(doc)
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ldssan"
    ids = [r["id"] for r in driver["rules"]]
    assert ids[: len(Rule)] == [r.code for r in Rule]
    for r in driver["rules"]:
        assert {"id", "name", "shortDescription", "fullDescription", "help"} <= set(r)
        assert r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["text"]
    assert len(run["results"]) == len(mixed.violations)
    for res in run["results"]:
        assert res["level"] == "error"
        assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["message"]["text"]
        assert res["locations"]


def test_sarif_locations_and_related_location(lds001):
    (res,) = rpt.to_sarif(lds001)["runs"][0]["results"]
    assert res["ruleId"] == "LDS001"
    phys = res["locations"][0]["physicalLocation"]
    assert phys["artifactLocation"]["uri"] == "file:///src/kernels/k_lds.py"
    assert phys["region"]["startLine"] == 17 and phys["region"]["startColumn"] == 9
    (rel,) = res["relatedLocations"]
    assert rel["physicalLocation"]["region"]["startLine"] == 14
    assert rel["message"]["text"].startswith("Previous access: write of 4 bytes")
    assert res["occurrenceCount"] == 64
    # the other access's caller frame is kept as a stack
    frames = res["stacks"][0]["frames"]
    assert [f["location"]["physicalLocation"]["region"]["startLine"] for f in frames] == [14, 22]


def test_sarif_unknown_site_and_dropped(sites):
    doc = rpt.to_sarif(decode([Record(30, 0, 17)], sites, dropped=4, capacity=32))
    (res,) = doc["runs"][0]["results"]
    assert res["locations"] == [{"message": {"text": "<unknown site 17>"}}]
    (note,) = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert "4 violation records were DROPPED" in note["message"]["text"]


def test_sarif_unknown_rule_gets_descriptor(sites):
    doc = rpt.to_sarif(decode([Record(77, 0, 1)], sites))
    driver = doc["runs"][0]["tool"]["driver"]
    (res,) = doc["runs"][0]["results"]
    assert driver["rules"][res["ruleIndex"]]["id"] == "LDS077"


# -- files -----------------------------------------------------------------------------


def test_write_report_picks_format_by_suffix(tmp_path, lds001):
    j = rpt.write_report(lds001, tmp_path / "out" / "r.json")
    s = rpt.write_report(lds001, tmp_path / "r.sarif")
    assert json.loads(j.read_text())["schema"] == rpt.JSON_SCHEMA
    assert json.loads(s.read_text())["version"] == "2.1.0"
    other = rpt.write_report(lds001, tmp_path / "r.txt")
    assert rpt.from_json(other.read_text()) == lds001
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "r.sarif", "r.txt"]


def test_write_report_leaves_existing_file_when_serialization_fails(tmp_path, lds001, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("previous report\n")

    def boom(report, **kw):
        raise RuntimeError("serialization failed")

    monkeypatch.setattr(rpt, "to_json", boom)
    with pytest.raises(RuntimeError, match="serialization failed"):
        rpt.write_report(lds001, path)
    assert path.read_text() == "previous report\n"
    assert os.listdir(tmp_path) == ["r.json"]


def test_write_report_leaves_existing_file_when_rename_fails(tmp_path, lds001, monkeypatch):
    path = tmp_path / "r.sarif"
    path.write_text("previous report\n")

    def fail_replace(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(rpt.os, "replace", fail_replace)
    with pytest.raises(OSError, match="disk on fire"):
        rpt.write_report(lds001, path)
    assert path.read_text() == "previous report\n"
    assert os.listdir(tmp_path) == ["r.sarif"]  # the temporary file is gone


def test_write_report_replaces_existing_file(tmp_path, lds001):
    path = tmp_path / "r.json"
    path.write_text("old")
    rpt.write_report(lds001, path)
    assert rpt.from_json(path.read_text()) == lds001


def test_write_report_rejects_unknown_format(tmp_path, lds001):
    with pytest.raises(ValueError, match="unknown report format"):
        rpt.write_report(lds001, tmp_path / "r.json", format="xml")


def test_every_rule_renders(sites):
    recs = [Record(int(rule), 0, 1, 0, wave=1, other_wave=0) for rule in Rule]
    text = rpt.render_text(decode(recs, sites))
    for info in rules.CATALOGUE.values():
        assert f"({info.code})" in text
        assert f"SUMMARY: ldssan: {info.code} {info.name} " in text


def test_write_report_adds_extra_keys(tmp_path, lds001):
    rpt.write_report(lds001, tmp_path / "r.json", extra={"tests": {"t::a": 1}})
    rpt.write_report(lds001, tmp_path / "r.sarif", extra={"tests": {"t::a": 1}})
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["tests"] == {"t::a": 1} and rpt.from_json(doc) == lds001
    assert json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["properties"]["tests"] == {"t::a": 1}
