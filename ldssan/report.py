"""Pure formatters over a decoded `Report`: rich console text, JSON, SARIF 2.1.0.

Nothing here decides anything about a violation; `ldssan.decode` did that. The console
shape follows ThreadSanitizer::

    ==================
    WARNING: ldssan: <title> (LDS001)
    Cause: <cause line>
    This access: read of 4 bytes at LDS smem+0x40 by wave 1 lane 0 (workgroup 0)
      at k.py:17:8 in lds_neighbour
        Out[tid] = lds[(tid + 1) % N]
      called from k.py:30:4 in launch
    Previous access: write of 4 bytes at LDS smem+0x40 by wave 0 lane 0 (workgroup 0)
      at k.py:14:4 in lds_neighbour
        lds[tid] = fx.Int32(tid) * 10
    Seen 32 times: waves 1, other waves 0, lanes 0-31, workgroup 0, launch 0

      <explanation paragraph>

      Fix: <hint>
    SUMMARY: ldssan: LDS001 raw-unpublished k.py:17
    ==================
    ldssan: reported 1 violation (32 records)

JSON schema (`to_json`, "ldssan.report/1"; stable, additions only)::

    {"schema": "ldssan.report/1",
     "tool": {"name": "ldssan", "version": str},
     "summary": {"violations": int, "records": int, "dropped": int,
                 "capacity": int | null, "clean": bool},
     "kernels": [{"name": str, "launches": int, "sites": int}],
     "rules": {"LDS001": {"name", "title", "explanation", "fix"}},   # rules that fired
     "violations": [{
        "rule": "LDS001", "rule_number": 1, "name": "raw-unpublished",
        "cause": "unpublished-ds-store", "cause_number": 2,
        "message": str,            # the cause line
        "fix": str, "kernel": str, "count": int, "extra": int,
        "lds": {"offset": int, "range": [lo, hi],
                "buffer": {"name", "offset", "size"} | null},
        "access": {"site": SITE, "wave": int|null, "lane": int|null,
                   "waves": [int], "lanes": [int]},
        "other":  {"site": SITE | null, "wave": ..., "lane": ..., "waves": [...], "lanes": [...]},
        "workgroup": int, "launch": int, "workgroups": [int], "launches": [int]}]}

SITE is the site-table object of `ldssan.decode` ({id, kind, op, file, line, col,
function, chain, text, buffer, bytes}). `from_json` inverts `to_json` exactly.

Site columns are FlyDSL's (Python `col_offset`, 0-based); SARIF columns are 1-based, so
`to_sarif` writes `startColumn = col + 1`.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ldssan import rules
from ldssan.decode import KernelInfo, LdsBuffer, Report, Site, Violation, _as_enum
from ldssan.runtime.records import Cause, Rule

__all__ = [
    "BANNER",
    "JSON_SCHEMA",
    "SARIF_SCHEMA",
    "render",
    "render_text",
    "violation_lines",
    "summary_lines",
    "dropped_line",
    "to_json",
    "from_json",
    "to_sarif",
    "write_report",
]

BANNER = "=" * 18
JSON_SCHEMA = "ldssan.report/1"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
RING_ENV = "FLYDSL_LDSSAN_RING"

_STYLE = {
    "banner": "dim",
    "warning": "bold red",
    "code": "bold",
    "header": "bold",
    "location": "cyan",
    "source": "yellow",
    "dim": "dim",
    "fix": "green",
    "summary": "bold",
    "dropped": "bold red",
}

# How a site kind reads in "This access: <verb> of N bytes ...".
_VERB = {
    "ds_read": "read",
    "ds_write": "write",
    "ds_atomic": "atomic write",
    "dma_to_lds": "async copy to LDS",
    "dma_from_lds": "async copy from LDS",
    "tdm_load": "TDM copy to LDS",
    "tdm_store": "TDM copy from LDS",
    "wait": "wait",
    "mark": "asyncmark",
    "barrier": "barrier",
    "fence": "fence",
}


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("ldssan")
    except (ImportError, PackageNotFoundError):
        return "0+unknown"


# -- console -----------------------------------------------------------------------------


def _int_set(values: Iterable[int]) -> str:
    """`0-3,7,9-10`."""
    vs = sorted(set(values))
    parts: list[str] = []
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        parts.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ",".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _access_phrase(site: Site, v: Violation, wave: int | None, lane: int | None) -> str:
    """`read of 4 bytes at LDS smem+0x40 by wave 1 lane 0 (workgroup 0)`."""
    if site.known:
        verb = _VERB.get(site.kind, site.kind)
        if not site.is_access and site.op:
            verb = site.op  # the header already says "barrier", "wait", ...
    else:
        verb = "access"
    parts = [verb]
    if site.is_access or not site.known:
        if site.bytes:
            parts.append(f"of {_plural(site.bytes, 'byte')}")
        parts.append(f"at LDS {v.buffer_offset}")
    if wave is not None:
        parts.append(f"by wave {wave}" + (f" lane {lane}" if lane is not None else ""))
    parts.append(f"(workgroup {v.workgroup})")
    return " ".join(parts)


def _header(v: Violation, site: Site, *, other: bool) -> str:
    """`This access:`, `Previous access:`, `In-flight access:`, `Wait:`, `Other barrier:`."""
    if site.is_access or not site.known:
        return f"{rules.other_access_label(v.rule)} access:" if other else "This access:"
    if other and site.kind == "wait":
        return "Wait:"
    return f"{'Other' if other else 'This'} {_VERB.get(site.kind, site.kind)}:"


def _site_lines(header: str, phrase: str, site: Site) -> list[Text]:
    out = [Text.assemble((header, _STYLE["header"]), " ", phrase)]
    if not site.known:
        out.append(Text.assemble("  at ", (site.location, _STYLE["location"])))
        out.append(Text("    [no site information; site table and records disagree]",
                        _STYLE["dim"]))
        return out
    where = Text.assemble("  at ", (site.location, _STYLE["location"]))
    if site.function:
        where.append(f" in {site.function}")
    out.append(where)
    if site.text.strip():
        out.append(Text("    " + site.text.strip(), _STYLE["source"]))
    for frame in site.callers:
        line = Text.assemble("  called from ", (frame.location, _STYLE["location"]))
        if frame.function:
            line.append(f" in {frame.function}")
        out.append(line)
    return out


def _seen_line(v: Violation) -> Text | None:
    if v.count <= 1:
        return None
    bits = []
    for label, values in (
        ("wave", v.waves), ("other wave", v.other_waves), ("lane", v.lanes),
        ("other lane", v.other_lanes), ("workgroup", v.workgroups), ("launch", v.launches),
    ):
        if values:
            bits.append(f"{label if len(values) == 1 else label + 's'} {_int_set(values)}")
    lo, hi = v.lds_range
    if hi != lo:
        buf = v.buffer
        if buf is not None and buf.contains(lo) and buf.contains(hi):
            bits.append(f"LDS {buf.name}+0x{lo - buf.offset:x}..0x{hi - buf.offset:x}")
        else:
            bits.append(f"LDS 0x{lo:04x}..0x{hi:04x}")
    return Text(f"Seen {v.count} times: " + ", ".join(bits), _STYLE["dim"])


def violation_lines(v: Violation, *, width: int = 100) -> list[Text]:
    """The TSan-shaped block for one violation, banner to banner."""
    info = v.info
    wrap = max(40, width - 2)
    lines = [
        Text(BANNER, _STYLE["banner"]),
        Text.assemble(("WARNING: ldssan: ", _STYLE["warning"]), info.title, " (",
                      (info.code, _STYLE["code"]), ")"),
        Text(f"Cause: {v.message}"),
    ]
    lines += _site_lines(_header(v, v.site, other=False),
                         _access_phrase(v.site, v, v.wave, v.lane), v.site)
    if v.other_site is not None:
        o = v.other_site
        lines += _site_lines(_header(v, o, other=True),
                             _access_phrase(o, v, v.other_wave, v.other_lane), o)
    seen = _seen_line(v)
    if seen is not None:
        lines.append(seen)
    lines.append(Text(""))
    for para in textwrap.wrap(info.explanation, wrap, initial_indent="  ", subsequent_indent="  "):
        lines.append(Text(para))
    lines.append(Text(""))
    for para in textwrap.wrap(v.fix, wrap, initial_indent="  Fix: ", subsequent_indent="       "):
        lines.append(Text(para, _STYLE["fix"]))
    lines.append(Text(f"SUMMARY: ldssan: {info.code} {info.name} {v.site.short_location}",
                      _STYLE["summary"]))
    lines.append(Text(BANNER, _STYLE["banner"]))
    return lines


def dropped_line(report: Report) -> Text | None:
    """The red overflow line, or None when nothing was dropped."""
    if report.dropped <= 0:
        return None
    cap = "unknown" if report.capacity is None else str(report.capacity)
    return Text(
        f"ldssan: {report.dropped} violation records were DROPPED (ring capacity {cap}) "
        f"— raise {RING_ENV}",
        _STYLE["dropped"],
    )


def summary_lines(report: Report, *, hidden: int = 0) -> list[Text]:
    """Closing lines: totals, kernels, hidden count, dropped banner."""
    n = len(report.violations)
    out = [Text(f"ldssan: reported {_plural(n, 'violation')} ({_plural(report.records, 'record')})",
                _STYLE["summary"] if n else "")]
    if hidden:
        out.append(Text(f"ldssan: {_plural(hidden, 'more violation')} not shown "
                        f"(the JSON/SARIF report has all of them)", _STYLE["dim"]))
    for k in report.kernels:
        if k.name:
            out.append(Text(f"ldssan:   kernel {k.name}: {_plural(k.launches, 'launch')}, "
                            f"{_plural(k.sites, 'instrumented site')}", _STYLE["dim"]))
    dropped = dropped_line(report)
    if dropped is not None:
        out.append(dropped)
    return out


def render(report: Report, console: Console | None = None, *, max_violations: int | None = None,
           width: int | None = None) -> None:
    """Print the report to `console` (default: stderr)."""
    console = console or Console(stderr=True, highlight=False)
    width = width or console.width or 100
    shown = report.violations if max_violations is None else report.violations[:max_violations]
    for v in shown:
        for line in violation_lines(v, width=width):
            console.print(line, soft_wrap=True, highlight=False)
    for line in summary_lines(report, hidden=len(report.violations) - len(shown)):
        console.print(line, soft_wrap=True, highlight=False)


def render_text(report: Report, *, width: int = 100, max_violations: int | None = None) -> str:
    """The console report as plain text (no terminal, no ANSI codes)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                      highlight=False, emoji=False, markup=False, soft_wrap=True)
    render(report, console, max_violations=max_violations, width=width)
    return buf.getvalue()


# -- JSON ------------------------------------------------------------------------------


def _side(site: Site | None, wave, lane, waves, lanes) -> dict[str, Any]:
    return {
        "site": None if site is None else site.to_dict(),
        "wave": wave, "lane": lane, "waves": sorted(waves), "lanes": sorted(lanes),
    }


def _violation_json(v: Violation) -> dict[str, Any]:
    return {
        "rule": v.code, "rule_number": int(v.rule), "name": v.name,
        "cause": rules.cause_name(v.cause), "cause_number": int(v.cause),
        "message": v.message, "fix": v.fix, "kernel": v.kernel, "count": v.count,
        "extra": v.extra,
        "lds": {"offset": v.lds_offset, "range": list(v.lds_range),
                "buffer": None if v.buffer is None else v.buffer.to_dict()},
        "access": _side(v.site, v.wave, v.lane, v.waves, v.lanes),
        "other": _side(v.other_site, v.other_wave, v.other_lane, v.other_waves, v.other_lanes),
        "workgroup": v.workgroup, "launch": v.launch,
        "workgroups": sorted(v.workgroups), "launches": sorted(v.launches),
    }


def to_json(report: Report) -> dict[str, Any]:
    """The report as a JSON-ready dict (schema in the module docstring)."""
    fired: dict[str, dict[str, str]] = {}
    for v in report.violations:
        i = v.info
        fired.setdefault(i.code, {"name": i.name, "title": i.title,
                                  "explanation": i.explanation, "fix": i.fix})
    return {
        "schema": JSON_SCHEMA,
        "tool": {"name": "ldssan", "version": _version()},
        "summary": {"violations": len(report.violations), "records": report.records,
                    "dropped": report.dropped, "capacity": report.capacity,
                    "clean": report.clean},
        "kernels": [{"name": k.name, "launches": k.launches, "sites": k.sites}
                    for k in report.kernels],
        "rules": dict(sorted(fired.items())),
        "violations": [_violation_json(v) for v in report.violations],
    }


def _violation_from_json(d: dict[str, Any]) -> Violation:
    acc, oth, lds = d["access"], d["other"], d["lds"]
    return Violation(
        rule=_as_enum(Rule, d["rule_number"]), cause=_as_enum(Cause, d["cause_number"]),
        site=Site.from_dict(acc["site"]),
        other_site=None if oth["site"] is None else Site.from_dict(oth["site"]),
        count=d["count"], message=d["message"], lds_offset=lds["offset"],
        lds_range=tuple(lds["range"]),
        buffer=None if lds["buffer"] is None else LdsBuffer.from_dict(lds["buffer"]),
        wave=acc["wave"], lane=acc["lane"], other_wave=oth["wave"], other_lane=oth["lane"],
        workgroup=d["workgroup"], launch=d["launch"], extra=d["extra"],
        waves=frozenset(acc["waves"]), lanes=frozenset(acc["lanes"]),
        other_waves=frozenset(oth["waves"]), other_lanes=frozenset(oth["lanes"]),
        workgroups=frozenset(d["workgroups"]), launches=frozenset(d["launches"]),
        kernel=d["kernel"],
    )


def from_json(data: dict[str, Any] | str) -> Report:
    """Inverse of `to_json` (accepts the dict or its JSON text)."""
    if isinstance(data, str):
        data = json.loads(data)
    schema = data.get("schema")
    if schema != JSON_SCHEMA:
        raise ValueError(f"ldssan: not an {JSON_SCHEMA} report (schema={schema!r})")
    s = data["summary"]
    return Report(
        violations=tuple(_violation_from_json(v) for v in data["violations"]),
        dropped=s["dropped"], records=s["records"], capacity=s["capacity"],
        kernels=tuple(KernelInfo(k["name"], k["launches"], k["sites"]) for k in data["kernels"]),
    )


# -- SARIF -----------------------------------------------------------------------------


def _uri(file: str) -> str:
    p = Path(file)
    return p.as_uri() if p.is_absolute() else p.as_posix()


def _sarif_location(site: Site, message: str | None = None,
                    loc_id: int | None = None) -> dict[str, Any]:
    loc: dict[str, Any] = {}
    if loc_id is not None:
        loc["id"] = loc_id
    if site.known:
        region: dict[str, Any] = {"startLine": max(1, site.line), "startColumn": site.col + 1}
        if site.text.strip():
            region["snippet"] = {"text": site.text.strip()}
        loc["physicalLocation"] = {"artifactLocation": {"uri": _uri(site.file)}, "region": region}
        if site.function:
            loc["logicalLocations"] = [{"name": site.function, "kind": "function"}]
    text = message if message is not None else (None if site.known else site.location)
    if text is not None:
        loc["message"] = {"text": text}
    return loc


def _sarif_stack(site: Site) -> dict[str, Any]:
    frames = [{"location": _sarif_location(site)}]
    for f in site.callers:
        loc: dict[str, Any] = {"physicalLocation": {
            "artifactLocation": {"uri": _uri(f.file)},
            "region": {"startLine": max(1, f.line), "startColumn": f.col + 1},
        }}
        if f.function:
            loc["logicalLocations"] = [{"name": f.function, "kind": "function"}]
        frames.append({"location": loc})
    return {"message": {"text": f"call chain of site {site.id}"}, "frames": frames}


def _sarif_rule(info: rules.RuleInfo) -> dict[str, Any]:
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.title},
        "fullDescription": {"text": info.explanation},
        "help": {"text": info.fix},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["concurrency", "lds", "gfx1250"]},
    }


def _sarif_result(v: Violation, rule_index: int) -> dict[str, Any]:
    this = _access_phrase(v.site, v, v.wave, v.lane)
    text = f"{v.title}: {v.message}. {_header(v, v.site, other=False)} {this} at {v.site.location}."
    related = []
    if v.other_site is not None:
        o = v.other_site
        other = f"{_header(v, o, other=True)} {_access_phrase(o, v, v.other_wave, v.other_lane)}"
        text += f" {other} at {o.location}."
        related.append(_sarif_location(o, other, loc_id=1))
    result: dict[str, Any] = {
        "ruleId": v.code,
        "ruleIndex": rule_index,
        "level": "error",
        "message": {"text": text},
        "locations": [_sarif_location(v.site)],
        "partialFingerprints": {
            "ldssanSite/v1": ":".join(str(x) for x in (
                v.code, int(v.cause), v.site.location,
                v.other_site.location if v.other_site else "-")),
        },
        "occurrenceCount": v.count,
        "properties": {
            "cause": rules.cause_name(v.cause), "fix": v.fix, "kernel": v.kernel,
            "count": v.count, "extra": v.extra, "ldsOffset": v.lds_offset,
            "ldsRange": list(v.lds_range),
            "buffer": None if v.buffer is None else v.buffer.to_dict(),
            "waves": sorted(v.waves), "lanes": sorted(v.lanes),
            "otherWaves": sorted(v.other_waves), "otherLanes": sorted(v.other_lanes),
            "workgroups": sorted(v.workgroups), "launches": sorted(v.launches),
        },
    }
    if related:
        result["relatedLocations"] = related
    stacks = [_sarif_stack(s) for s in (v.site, v.other_site)
              if s is not None and s.known and s.callers]
    if stacks:
        result["stacks"] = stacks
    return result


def to_sarif(report: Report) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log with one run. Every catalogue rule is listed in
    tool.driver.rules (so rule indices are stable); each violation is an "error" result."""
    infos = list(rules.CATALOGUE.values())
    index = {i.code: n for n, i in enumerate(infos)}
    for v in report.violations:  # numbers no Rule has still get a descriptor
        if v.code not in index:
            index[v.code] = len(infos)
            infos.append(v.info)
    notifications = []
    line = dropped_line(report)
    if line is not None:
        notifications.append({"level": "error", "message": {"text": line.plain}})
    invocation: dict[str, Any] = {"executionSuccessful": True}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": "ldssan",
                "version": _version(),
                "rules": [_sarif_rule(i) for i in infos],
            }},
            "invocations": [invocation],
            "results": [_sarif_result(v, index[v.code]) for v in report.violations],
            "properties": {
                "records": report.records, "dropped": report.dropped,
                "capacity": report.capacity,
                "kernels": [{"name": k.name, "launches": k.launches, "sites": k.sites}
                            for k in report.kernels],
            },
        }],
    }


# -- files -----------------------------------------------------------------------------


def _is_sarif(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".sarif") or name.endswith(".sarif.json")


def write_report(report: Report, path: str | os.PathLike[str], *,
                 format: str | None = None) -> Path:
    """Write JSON, or SARIF when the name ends in `.sarif` (or `format="sarif"`).

    Atomic: the document is serialized fully in memory, written to a temporary file in the
    same directory and renamed over `path`; on any error an existing file is left intact
    and the temporary file removed.
    """
    path = Path(path)
    fmt = format or ("sarif" if _is_sarif(path) else "json")
    if fmt not in ("json", "sarif"):
        raise ValueError(f"ldssan: unknown report format {fmt!r}; choose 'json' or 'sarif'")
    doc = to_sarif(report) if fmt == "sarif" else to_json(report)
    payload = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
