"""Malformed site tables and report JSON are named errors (`SiteTableError`,
`ReportFormatError`, both ValueErrors) that say which entry or field is wrong; before, a
few shapes escaped as raw AttributeError / KeyError from deep inside the loaders."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldssan import report as rpt
from ldssan.decode import SiteTable, SiteTableError, decode
from ldssan.runtime.records import Record

GOOD_SITE = {"id": 1, "kind": "ds_read", "op": "llvm.load", "file": "k.py", "line": 17, "col": 8,
             "chain": [{"file": "k.py", "line": 30}], "text": "x = lds[i]", "buffer": "lds", "bytes": 4}

BAD_TABLES = [
    ("not JSON", "{sites:", "not valid JSON"),
    ("a number", "42", "JSON list or object"),
    ("site is a number", [1], "a site entry is a int"),
    ("sites is a string", {"sites": "abc"}, "sites is a str"),
    ("buffers is an object", {"sites": [], "buffers": {"a": 1}}, "buffers is a dict"),
    ("buffer is a string", {"sites": [], "buffers": ["lds"]}, "a buffer entry is a str"),
    ("buffer without offset", {"sites": [], "buffers": [{"name": "lds"}]}, "malformed LDS buffer entry"),
    ("chain is a number", [dict(GOOD_SITE, chain=7)], "chain is a int"),
    ("chain frame is a list", [dict(GOOD_SITE, chain=[[1]])], "a chain frame is a list"),
    ("chain frame without line", [dict(GOOD_SITE, chain=[{"file": "k.py"}])], "malformed site table entry"),
    ("line is not a number", [dict(GOOD_SITE, line="seventeen")], "malformed site table entry"),
    ("line is infinite", [dict(GOOD_SITE, line=float("inf"))], "malformed site table entry"),
    ("negative id", [dict(GOOD_SITE, id=-1)], "outside 0.."),
    ("id is the no-site sentinel", [dict(GOOD_SITE, id=0xFFFFFFFF)], "outside 0.."),
]


@pytest.mark.parametrize("data, needle", [b[1:] for b in BAD_TABLES], ids=[b[0] for b in BAD_TABLES])
def test_malformed_site_table_is_a_named_error(data, needle):
    with pytest.raises(SiteTableError, match=needle):
        SiteTable.from_json(data)
    with pytest.raises(ValueError):  # what callers catch
        decode([Record(1, 1, 1)], data)


def _doc():
    table = SiteTable.from_json([GOOD_SITE])
    return rpt.to_json(decode([Record(1, 1, 1, 1, wave=1, other_wave=0)], table))


def _without(path):
    doc = _doc()
    *head, last = path
    node = doc
    for k in head:
        node = node[k]
    del node[last]
    return doc


BAD_REPORTS = [
    ("text that is not JSON", "{", "not valid JSON"),
    ("a JSON list", [], "not a JSON object"),
    ("no summary", _without(["summary"]), "summary: missing key 'summary'"),
    ("summary without dropped", _without(["summary", "dropped"]), "summary: missing key 'dropped'"),
    ("violations is a number", dict(_doc(), violations=3), "violations: TypeError"),
    ("violation without access", _without(["violations", 0, "access"]), r"violations\[0\]: missing key 'access'"),
    ("violation whose site is a string", None, r"violations\[0\]: SiteTableError"),
    ("kernels entry is a string", dict(_doc(), kernels=["k"]), "kernels: TypeError"),
]


@pytest.mark.parametrize("data, needle", [b[1:] for b in BAD_REPORTS], ids=[b[0] for b in BAD_REPORTS])
def test_malformed_report_json_is_a_named_error(data, needle):
    if data is None:
        data = _doc()
        data["violations"][0]["access"]["site"] = "k.py:17"
    with pytest.raises(rpt.ReportFormatError, match=needle):
        rpt.from_json(data)


def test_a_good_report_still_round_trips():
    doc = _doc()
    assert rpt.to_json(rpt.from_json(json.dumps(doc))) == doc


# -- fuzz: any JSON value either loads or is a SiteTableError --------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
FIELDS = ("id", "kind", "op", "file", "line", "col", "function", "chain", "text", "buffer", "bytes")
site_like = st.fixed_dictionaries({}, optional={k: json_values for k in FIELDS}) | st.just(GOOD_SITE)
tables = (st.lists(site_like, max_size=4)
          | st.fixed_dictionaries({}, optional={"sites": st.lists(site_like, max_size=3) | json_values,
                                                "buffers": json_values, "kernel": json_values})
          | json_values)


@settings(max_examples=400, deadline=None, database=None)
@given(tables)
def test_fuzz_site_table_loader_fails_closed(data):
    try:
        table = SiteTable.from_json(data)
    except SiteTableError:
        return
    for site in table.values():  # what loaded is usable by the decoder and the printer
        assert 0 <= site.id < 0xFFFFFFFF and isinstance(site.line, int)
        decode([Record(1, 1, site.id)], table)


@settings(max_examples=200, deadline=None, database=None)
@given(st.sampled_from(["summary", "violations", "kernels"]), json_values)
def test_fuzz_report_loader_fails_closed(field, value):
    doc = _doc()
    doc[field] = value
    try:
        rpt.from_json(doc)
    except rpt.ReportFormatError:
        pass
