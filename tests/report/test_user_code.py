"""Reports point at the user's code: LDS buffers by the variable they were allocated into,
1-based columns everywhere, and builds of one kernel name kept apart."""

from __future__ import annotations

import json
import textwrap

from ldssan import report as rpt
from ldssan.decode import LdsBuffer, Site, SiteTable, decode, merge_reports
from ldssan.runtime.records import Cause, Record, Rule
from ldssan.sitetable import allocation_target

KERNEL = textwrap.dedent('''\
    def kernel(Out):
        tid = fx.thread_idx.x
        alloc = fx.SharedAllocator()
        partial = alloc.allocate(fx.Array[fx.Int32, 64]).peek()
        self.stage: fx.Ptr = alloc.allocate(
            fx.Array[fx.Int32, 32]).peek()
        a, b = alloc.allocate(fx.Int32), alloc.allocate(fx.Int32)
        partial[tid] = tid
        Out[tid] = partial[(tid + 32) % 64]
''')


def _table(path: str) -> SiteTable:
    """A site table as the runtime hands it over: buffers by module symbol, with the
    allocation's file and line."""
    return SiteTable.from_json({
        "kernel": "kernel_0",
        "sites": [
            {"id": 0, "kind": "ds_write", "op": "llvm.store", "file": path, "line": 8, "col": 4,
             "function": "kernel", "text": "    partial[tid] = tid", "bytes": 4},
            {"id": 1, "kind": "ds_read", "op": "llvm.load", "file": path, "line": 9, "col": 15,
             "function": "kernel", "text": "    Out[tid] = partial[(tid + 32) % 64]", "bytes": 4},
        ],
        "buffers": [
            {"name": "__shared_alloc_0", "offset": 0, "size": 256, "file": path, "line": 4},
            {"name": "__shared_alloc_1", "offset": 256, "size": 128, "file": path, "line": 6},
            {"name": "__shared_alloc_2", "offset": 384, "size": 4, "file": path, "line": 7},
            {"name": "__shared_alloc_3", "offset": 388, "size": 4, "file": None, "line": None},
        ],
    })


def test_allocation_target_reads_the_assignment(tmp_path):
    path = str(tmp_path / "k.py")
    (tmp_path / "k.py").write_text(KERNEL)
    assert allocation_target(path, 4) == "partial"
    assert allocation_target(path, 6) == "self.stage"  # second line of a two-line statement
    assert allocation_target(path, 7) is None  # a tuple target names no one buffer
    assert allocation_target(path, 2) == "tid"
    assert allocation_target(path, 99) is None
    assert allocation_target(str(tmp_path / "missing.py"), 4) is None
    assert allocation_target(None, 4) is None


def test_buffers_are_named_by_their_variable_with_the_allocation_line(tmp_path):
    path = str(tmp_path / "k.py")
    (tmp_path / "k.py").write_text(KERNEL)
    table = _table(path)
    assert [(b.name, b.symbol) for b in table.buffers] == [
        ("partial", "__shared_alloc_0"), ("self.stage", "__shared_alloc_1"),
        ("__shared_alloc_2", ""), ("__shared_alloc_3", "")]
    rep = decode([Record(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, 1, 0, lds_offset=4 * lane + 128,
                         wave=1, other_wave=0, lane=lane, other_lane=lane) for lane in range(32)], table)
    text = rpt.render_text(rep)
    assert "This access: read of 4 bytes at LDS partial+0x80..0xfc by wave 1 lanes 0-31" in text
    assert (f"LDS buffer: partial (256 bytes at 0x0, __shared_alloc_0), allocated at {path}:4: "
            "partial = alloc.allocate(fx.Array[fx.Int32, 64]).peek()") in text
    assert "__shared_alloc_0 (" not in text
    # the name survives the JSON round trip without re-reading the source
    doc = rpt.to_json(rep)
    assert doc["violations"][0]["lds"]["buffer"] == {
        "name": "partial", "offset": 0, "size": 256, "symbol": "__shared_alloc_0", "file": path, "line": 4}
    assert rpt.from_json(json.dumps(doc)) == rep


def test_columns_are_one_based_in_text_and_sarif_alike(tmp_path):
    path = str(tmp_path / "k.py")
    (tmp_path / "k.py").write_text(KERNEL)
    rep = decode([Record(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, 1, 0, wave=1, other_wave=0)], _table(path))
    text = rpt.render_text(rep)
    assert f"  at {path}:9:16 in kernel" in text and f"  at {path}:8:5 in kernel" in text
    (res,) = rpt.to_sarif(rep)["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["region"]["startColumn"] == 16
    assert res["relatedLocations"][0]["physicalLocation"]["region"]["startColumn"] == 5
    line = KERNEL.splitlines()[8]
    assert line[16 - 1:].startswith("partial[")  # column 16 is where the read is written


def test_two_builds_of_one_kernel_name_stay_apart():
    site = Site(0, "ds_read", "llvm.load", "k.py", 9, 4, "k", bytes=4)
    build_a = SiteTable([site, Site(1, "ds_write", "llvm.store", "k.py", 8, 4, "k")], kernel="k_0")
    build_b = SiteTable([site, Site(1, "ds_write", "llvm.store", "k.py", 30, 4, "k")], kernel="k_0")
    assert build_a.build != build_b.build
    rec = Record(Rule.RAW_UNPUBLISHED, Cause.NO_BARRIER, 0, 1, wave=1, other_wave=0)
    m = merge_reports(decode([rec], build_a), decode([rec], build_b), decode([rec], build_a))
    assert sorted((k.name, k.launches) for k in m.kernels) == [("k_0", 1), ("k_0", 2)]
    assert sorted(v.other_site.line for v in m.violations) == [8, 30]  # site 1 differs per build
    doc = rpt.to_json(m)
    assert len({(k["name"], k["build"]) for k in doc["kernels"]}) == 2
    assert rpt.from_json(doc) == m


def test_lds_buffer_without_allocation_line_prints_its_extent_only(sites, raw_records):
    v = decode(raw_records, sites).violations[0]
    assert v.buffer == LdsBuffer("lds", 0, 256)
    assert "LDS buffer: lds (256 bytes at 0x0)\n" in rpt.render_text(decode(raw_records, sites))
