"""Suppressions (ldssan/suppress.py) on decoded reports: each entry form, inline comments,
stale entries, malformed lines naming themselves, and how a suppressed report reads in JSON
(it round-trips and validates) and SARIF (result.suppressions, valid SARIF 2.1.0)."""

from __future__ import annotations

from collections import Counter

import pytest

from ldssan import report as rpt
from ldssan import suppress
from ldssan.decode import decode
from ldssan.runtime.records import Cause, Record

from .test_schemas import _errors, json_validator, sarif_validator  # noqa: F401  (fixtures)

SOURCE = """\
N = 64
def neighbour(Out):
    lds[tid] = tid * 10{store}
    Out[tid] = lds[(tid + 1) % N]{load}
"""


def _report(tmp_path, store: str = "", load: str = ""):
    """LDS001 (store at line 3, load at line 4 of a real file) and LDS030 at the load."""
    path = tmp_path / "kern.py"
    path.write_text(SOURCE.format(store=store, load=load))
    site = {"file": str(path), "col": 4, "function": "neighbour"}
    table = {"sites": [{"id": 0, "kind": "ds_write", "op": "llvm.store", "line": 3, **site},
                       {"id": 1, "kind": "ds_read", "op": "llvm.load", "line": 4, **site}]}
    records = [Record(1, Cause.UNPUBLISHED_DS_STORE, 1, 0, lds_offset=4, wave=0, other_wave=1),
               Record(30, Cause.NONE, 1, 0xFFFF, lds_offset=0x9000, wave=0, lane=3)]
    return decode(records, table, kernel="neighbour_0")


def _entries(tmp_path, text: str):
    f = tmp_path / "supp.txt"
    f.write_text(text)
    return suppress.load(str(f))


def _marked(report, entries):
    hits = Counter()
    out = suppress.mark(report, entries, hits)
    return {v.code: v.suppression for v in out.violations}, hits, out


@pytest.mark.parametrize("entry, covered", [
    ("LDS001:neighbour", {"LDS001"}),            # the kernel's Python name
    ("lds001:neighbour_0", {"LDS001"}),          # its symbol; codes in any case
    ("*:neigh*", {"LDS001", "LDS030"}),          # every rule
    ("LDS001:kern.py", {"LDS001"}),              # either side's file
    ("*:kern.py:3", {"LDS001"}),                 # the store's line: only LDS001 has that side
    ("*:*/kern.py:4", {"LDS001", "LDS030"}),     # the load's line, a path pattern
    ("LDS001:other_kernel", set()),
    ("LDS001:kern.py:5", set()),
])
def test_file_entry_forms(tmp_path, entry, covered):
    entries = _entries(tmp_path, f"# a comment\n\n{entry}   # why\n")
    got, hits, _ = _marked(_report(tmp_path), entries)
    assert {code for code, s in got.items() if s is not None} == covered
    for code in covered:
        assert (got[code].kind, got[code].where, got[code].text) == ("external", f"{tmp_path}/supp.txt:3", entry)
    assert suppress.stale(entries, hits) == ([] if covered else list(entries))


@pytest.mark.parametrize("store, load, covered", [
    ("  # ldssan: ignore[LDS001]", "", {"LDS001"}),       # on the other access's line
    ("", "  # ldssan: ignore", {"LDS001", "LDS030"}),      # no list: every rule
    ("", "  #ldssan: ignore[LDS030, lds001]", {"LDS001", "LDS030"}),
    ("", "  # ldssan: ignore[LDS011]", set()),            # another rule only
])
def test_inline_comments(tmp_path, store, load, covered):
    got, hits, _ = _marked(_report(tmp_path, store, load), ())
    assert {code for code, s in got.items() if s is not None} == covered
    for code in covered:
        assert got[code].kind == "inSource" and got[code].where.startswith(f"{tmp_path}/kern.py:")
    assert sum(hits.values()) == len(covered)


def test_inline_comment_wins_over_a_file_entry_which_is_then_stale(tmp_path):
    entries = _entries(tmp_path, "LDS030:neighbour\n")
    got, hits, _ = _marked(_report(tmp_path, load="  # ldssan: ignore[LDS030]"), entries)
    assert got["LDS030"].kind == "inSource" and got["LDS001"] is None
    assert [e.text for e in suppress.stale(entries, hits)] == ["LDS030:neighbour"]


@pytest.mark.parametrize("line, problem", [
    ("LDS001", "expected RULE:PATTERN"),
    ("LDS999:neighbour", "unknown rule 'LDS999'"),
    ("LDS001:", "expected RULE:PATTERN"),
    ("LDS001:kern.py:x", "line 'x' of 'kern.py' is not a line number"),
    ("*:kern.py:0", "is not a line number"),
])
def test_malformed_entry_names_file_and_line(tmp_path, line, problem):
    with pytest.raises(suppress.SuppressionError, match=rf"supp\.txt:2: .*{problem}"):
        _entries(tmp_path, f"LDS001:ok\n{line}\n")


def test_missing_file_and_malformed_inline_comment(tmp_path):
    with pytest.raises(suppress.SuppressionError, match="no-such.txt"):
        suppress.load(str(tmp_path / "no-such.txt"))
    with pytest.raises(suppress.SuppressionError, match=r"kern\.py:4: .*unknown rule 'LDS0X'"):
        _marked(_report(tmp_path, load="  # ldssan: ignore[LDS0X]"), ())


def test_suppressed_report_in_json_and_sarif(tmp_path, json_validator, sarif_validator):  # noqa: F811
    entries = _entries(tmp_path, "LDS030:neighbour\n")
    _, _, report = _marked(_report(tmp_path, store="  # ldssan: ignore[LDS001]"), entries)
    assert report.clean  # every violation suppressed
    doc = rpt.to_json(report)
    assert _errors(json_validator, doc) == []
    assert doc["summary"]["suppressed"] == 2 and doc["summary"]["clean"]
    marks = {v["rule"]: (v["suppressed"], v["suppression"]["kind"]) for v in doc["violations"]}
    assert marks == {"LDS001": (True, "inSource"), "LDS030": (True, "external")}
    assert rpt.to_json(rpt.from_json(doc)) == doc
    sarif = rpt.to_sarif(report, srcroot=tmp_path)
    assert _errors(sarif_validator, sarif) == []
    kinds = {r["ruleId"]: [s["kind"] for s in r["suppressions"]] for r in sarif["runs"][0]["results"]}
    assert kinds == {"LDS001": ["inSource"], "LDS030": ["external"]}
    # unsuppressed: no mark, and the report is not clean
    plain = rpt.to_json(_report(tmp_path))
    assert plain["summary"]["suppressed"] == 0 and not plain["summary"]["clean"]
    assert all(not v["suppressed"] and v["suppression"] is None for v in plain["violations"])
