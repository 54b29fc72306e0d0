"""Pure formatters over a decoded `Report`: console text (`ldssan.console`, re-exported
here), JSON, SARIF 2.1.0, and the atomic report file.

Nothing here decides anything about a violation; `ldssan.decode` did that.

JSON schema (`to_json`, "ldssan.report/1"; stable, additions only; the JSON Schema is
`tests/report/data/ldssan-report.schema.json`, described in docs/reports.md)::

    {"schema": "ldssan.report/1",
     "tool": {"name": "ldssan", "version": str},
     "summary": {"violations": int, "suppressed": int, "records": int, "dropped": int,
                 "capacity": int | null, "clean": bool},   # clean: no violation, nothing
                                                          # dropped, no error notification
     "kernels": [{"name": str, "build": str, "launches": int, "sites": int}],
     "rules": {"LDS001": {"name", "title", "explanation", "fix"}},   # rules that fired
     "violations": [{
        "rule": "LDS001", "rule_number": 1, "name": "raw-unpublished",
        "cause": "unpublished-ds-store", "cause_number": 2,
        "message": str,            # the cause line
        "fix": str, "kernel": str, "build": str, "severity": "error" | "warning",
        "count": int,              # instances grouped into this report
        "extra": int,
        "lds": {"offset": int, "range": [lo, hi], "buffer": BUFFER | null},
        "access": {"site": SITE, "wave": int|null, "lane": int|null,
                   "waves": [int], "lanes": [int]},
        "other":  {"site": SITE | null, "wave": ..., "lane": ..., "waves": [...], "lanes": [...]},
        "workgroup": int, "launch": int, "workgroups": [int], "launches": [int],
        "suppressed": bool,        # fails nothing: a suppressions-file entry or an inline
        "suppression": {"kind": "external" | "inSource", "where": "FILE:LINE", "text": str} | null}],
     "notifications": [{"level": "error" | "warning", "text": str}]}

SITE is the site-table object of `ldssan.sitetable` ({id, kind, op, file, line, col,
function, chain, text, buffer, bytes}); BUFFER is {name, offset, size, symbol, file, line}
(name: the Python variable the kernel allocated it into, symbol: the module's symbol).
A kernel is one build: its name and `build`, a digest of its site table, so two builds of
one name stay apart. `from_json` inverts `to_json` exactly; a document that is not this
shape is a `ReportFormatError` naming the field.

Columns: sites store FlyDSL's (Python `col_offset`, 0-based); the text and SARIF both
print them 1-based.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ldssan.passes.ir.errors import UsageError
from ldssan import rules
from ldssan.console import (  # re-exported: the console form of a report
    BANNER, _access_phrase, _header, dropped_line, render, render_text, summary_lines,
    violation_lines,
)
from ldssan.decode import STATIC_RULES, KernelInfo, LdsBuffer, Report, Site, Suppression, Violation, _as_enum
from ldssan.runtime.records import Cause, Rule
from ldssan.variants import original_path

__all__ = [
    "BANNER",
    "JSON_SCHEMA",
    "SARIF_SCHEMA",
    "render",
    "render_text",
    "violation_lines",
    "summary_lines",
    "dropped_line",
    "notifications",
    "to_json",
    "from_json",
    "ReportFormatError",
    "to_sarif",
    "write_report",
    "report_path_problem",
]

JSON_SCHEMA = "ldssan.report/1"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("ldssan")
    except (ImportError, PackageNotFoundError):
        return "0+unknown"


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
        "message": v.message, "fix": v.fix, "kernel": v.kernel, "build": v.build,
        "severity": v.severity, "count": v.count,
        "extra": v.extra,
        "lds": {"offset": v.lds_offset, "range": list(v.lds_range),
                "buffer": None if v.buffer is None else v.buffer.to_dict()},
        "access": _side(v.site, v.wave, v.lane, v.waves, v.lanes),
        "other": _side(v.other_site, v.other_wave, v.other_lane, v.other_waves, v.other_lanes),
        "workgroup": v.workgroup, "launch": v.launch,
        "workgroups": sorted(v.workgroups), "launches": sorted(v.launches),
        "suppressed": v.suppression is not None,
        "suppression": None if v.suppression is None else v.suppression.to_dict(),
    }


def to_json(report: Report, *, notes: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """The report as a JSON-ready dict (schema in the module docstring; `notes` as in
    `to_sarif`)."""
    fired: dict[str, dict[str, str]] = {}
    for v in report.violations:
        i = v.info
        fired.setdefault(i.code, {"name": i.name, "title": i.title,
                                  "explanation": i.explanation, "fix": i.fix})
    notes = notifications(report, notes)
    return {
        "schema": JSON_SCHEMA,
        "tool": {"name": "ldssan", "version": _version()},
        "summary": {"violations": len(report.violations),
                    "suppressed": sum(v.suppression is not None for v in report.violations),
                    "records": report.records,
                    "dropped": report.dropped, "capacity": report.capacity,
                    "clean": report.clean and not _failed_run(notes)},
        "kernels": [_kernel_json(k) for k in report.kernels],
        "rules": dict(sorted(fired.items())),
        "violations": [_violation_json(v) for v in report.violations],
        "notifications": notes,
    }


def _failed_run(notes: list[dict[str, str]]) -> bool:
    """An error notification (a launch that faulted, an ldssan internal error, a lost
    pytest-xdist worker) means something was not checked: the run is not clean (SARIF:
    executionSuccessful false)."""
    return any(n["level"] == "error" for n in notes)


def _kernel_json(k: KernelInfo) -> dict[str, Any]:
    return {"name": k.name, "build": k.build, "launches": k.launches, "sites": k.sites}


class ReportFormatError(UsageError, ValueError):
    """A report document that is not `ldssan.report/1`-shaped: names the field."""


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
        kernel=d["kernel"], build=str(d.get("build", "")),
        severity=str(d.get("severity", "error")),
        suppression=None if not d.get("suppression") else Suppression(**d["suppression"]),
    )


# What a wrong shape raises inside the readers: a missing key, a wrong type, a bad number.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError)


def _read(what: str, fn, *args):
    """`fn(*args)`, with a wrong-shape error renamed to say which field of the document."""
    try:
        return fn(*args)
    except ReportFormatError:
        raise
    except _SHAPE_ERRORS as e:
        detail = f"missing key {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise ReportFormatError(f"ldssan: malformed {JSON_SCHEMA} report: {what}: {detail}") from e


def from_json(data: dict[str, Any] | str) -> Report:
    """Inverse of `to_json` (accepts the dict or its JSON text)."""
    if isinstance(data, (str, bytes, bytearray)):
        data = _read("not valid JSON", json.loads, data)
    if not isinstance(data, dict):
        raise ReportFormatError(f"ldssan: not an {JSON_SCHEMA} report (a {type(data).__name__}, "
                                "not a JSON object)")
    schema = data.get("schema")
    if schema != JSON_SCHEMA:
        raise ReportFormatError(f"ldssan: not an {JSON_SCHEMA} report (schema={schema!r})")
    s = _read("summary", lambda: data["summary"])
    fields = _read("summary", lambda: (int(s["dropped"]), int(s["records"]),
                                       None if s["capacity"] is None else int(s["capacity"])))
    violations = _read("violations", lambda: list(data["violations"]))
    kernels = _read("kernels", lambda: tuple(KernelInfo(str(k["name"]), int(k["launches"]), int(k["sites"]),
                                                        str(k.get("build", "")))
                                             for k in data["kernels"]))
    return Report(
        violations=tuple(_read(f"violations[{i}]", _violation_from_json, v)
                         for i, v in enumerate(violations)),
        dropped=fields[0], records=fields[1], capacity=fields[2], kernels=kernels,
    )


# -- SARIF -----------------------------------------------------------------------------


SRCROOT = "%SRCROOT%"


def _artifact(file: str, root: Path) -> dict[str, str]:
    """A relative URI under %SRCROOT% (the same across checkouts and CI), or an absolute
    file URI for a file outside the source root (an installed package, say)."""
    p = Path(original_path(file))  # a variant's findings belong to the file it was made from
    if not p.is_absolute():
        return {"uri": p.as_posix(), "uriBaseId": SRCROOT}
    try:
        return {"uri": p.relative_to(root).as_posix(), "uriBaseId": SRCROOT}
    except ValueError:
        return {"uri": p.as_uri()}


def _information_uri() -> str | None:
    """The package's project URL if its metadata has one, else its README."""
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        meta = metadata("ldssan")
        urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or ()]
        urls += [meta["Home-page"]] if meta.get("Home-page") else []
        if urls:
            return urls[0]
    except (ImportError, PackageNotFoundError):
        pass
    readme = Path(__file__).resolve().parent.parent / "README.md"
    return readme.as_uri() if readme.is_file() else None


def _sarif_location(site: Site, root: Path, message: str | None = None,
                    loc_id: int | None = None) -> dict[str, Any]:
    loc: dict[str, Any] = {}
    if loc_id is not None:
        loc["id"] = loc_id
    if site.known:
        region: dict[str, Any] = {"startLine": max(1, site.line), "startColumn": site.col + 1}
        if site.text.strip():
            region["snippet"] = {"text": site.text.strip()}
        loc["physicalLocation"] = {"artifactLocation": _artifact(site.file, root), "region": region}
        if site.function:
            loc["logicalLocations"] = [{"name": site.function, "kind": "function"}]
    text = message if message is not None else (None if site.known else site.location)
    if text is not None:
        loc["message"] = {"text": text}
    return loc


def _sarif_stack(site: Site, root: Path) -> dict[str, Any]:
    frames = [{"location": _sarif_location(site, root)}]
    for f in site.callers:
        loc: dict[str, Any] = {"physicalLocation": {
            "artifactLocation": _artifact(f.file, root),
            "region": {"startLine": max(1, f.line), "startColumn": f.col + 1},
        }}
        if f.function:
            loc["logicalLocations"] = [{"name": f.function, "kind": "function"}]
        frames.append({"location": loc})
    return {"message": {"text": f"call chain of site {site.id}"}, "frames": frames}


def _sarif_rule(info: rules.RuleInfo, info_uri: str | None) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.title},
        "fullDescription": {"text": info.explanation},
        "help": {"text": f"{info.explanation}\n\nFix: {info.fix}",
                 "markdown": f"{info.explanation}\n\n**Fix:** {info.fix}"},
        # the static fence-pairing lint warns by default (FLYDSL_LDSSAN_LINT=warn)
        "defaultConfiguration": {"level": "warning" if info.rule in STATIC_RULES else "error"},
        "properties": {"tags": ["concurrency", "lds", "gfx1250"]},
    }
    if info_uri:
        rule["helpUri"] = info_uri
    return rule


def _sarif_result(v: Violation, rule_index: int, root: Path) -> dict[str, Any]:
    this = _access_phrase(v.site, v, v.wave, v.lane)
    text = f"{v.title}: {v.message}. {_header(v, v.site, other=False)} {this} at {v.site.location}."
    related = []
    if v.other_site is not None:
        o = v.other_site
        other = (f"{_header(v, o, other=True)} "
                 f"{_access_phrase(o, v, v.other_wave, v.other_lane, other=True)}")
        text += f" {other} at {o.location}."
        related.append(_sarif_location(o, root, other, loc_id=1))
    result: dict[str, Any] = {
        "ruleId": v.code,
        "ruleIndex": rule_index,
        "level": "warning" if v.severity == "warning" else "error",
        "message": {"text": text},
        "locations": [_sarif_location(v.site, root)],
        "partialFingerprints": {  # relative paths: the same in every checkout
            "ldssanSite/v1": ":".join(str(x) for x in (
                v.code, int(v.cause), _fingerprint_where(v.site, root),
                _fingerprint_where(v.other_site, root) if v.other_site else "-")),
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
    if v.suppression is not None:  # SARIF viewers list it as suppressed, not as an open result
        s = v.suppression
        result["suppressions"] = [{"kind": s.kind, "status": "accepted",
                                   "justification": f"ldssan suppression at {s.where}: {s.text}"}]
    stacks = [_sarif_stack(s, root) for s in (v.site, v.other_site)
              if s is not None and s.known and s.callers]
    if stacks:
        result["stacks"] = stacks
    return result


def _fingerprint_where(site: Site, root: Path) -> str:
    if not site.known:
        return site.location
    return f"{_artifact(site.file, root)['uri']}:{site.line}:{site.col + 1}"


def notifications(report: Report, notes: Iterable[tuple[str, str]] = ()) -> list[dict[str, str]]:
    """What went wrong running the tool, as (level, text): the caller's `notes` (a
    deadlock, a spin timeout), dropped records, and a run in which no kernel ran."""
    out = [{"level": level, "text": text} for level, text in notes]
    line = dropped_line(report)
    if line is not None:
        out.append({"level": "error", "text": line.plain})
    if not report.kernels:
        # with error notes (launches that faulted, a lost worker) a launch may have run, unchecked
        why = "no FlyDSL launch was checked to its end" if _failed_run(out) else "no FlyDSL kernel was launched"
        out.append({"level": "warning", "text": f"ldssan: NOTHING WAS CHECKED: {why}"})
    return out


def to_sarif(report: Report, *, notes: Iterable[tuple[str, str]] = (),
             srcroot: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log with one run. Every catalogue rule is listed in
    tool.driver.rules (so rule indices are stable); each violation is a result. Paths
    under `srcroot` (default: the working directory) are relative to %SRCROOT%; `notes`
    and dropped records are tool execution notifications (an error one makes the
    invocation unsuccessful)."""
    root = Path(srcroot if srcroot is not None else os.getcwd()).resolve()
    info_uri = _information_uri()
    infos = list(rules.CATALOGUE.values())
    index = {i.code: n for n, i in enumerate(infos)}
    for v in report.violations:  # numbers no Rule has still get a descriptor
        if v.code not in index:
            index[v.code] = len(infos)
            infos.append(v.info)
    notes = notifications(report, notes)
    invocation: dict[str, Any] = {
        "executionSuccessful": not _failed_run(notes)}
    if notes:
        invocation["toolExecutionNotifications"] = [
            {"level": n["level"], "message": {"text": n["text"]}} for n in notes]
    driver: dict[str, Any] = {"name": "ldssan", "version": _version()}
    if info_uri:
        driver["informationUri"] = info_uri
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {**driver, "rules": [_sarif_rule(i, info_uri) for i in infos]}},
            "originalUriBaseIds": {SRCROOT: {"uri": root.as_uri() + "/"}},
            "invocations": [invocation],
            "results": [_sarif_result(v, index[v.code], root) for v in report.violations],
            "properties": {
                "records": report.records, "dropped": report.dropped,
                "capacity": report.capacity,
                "kernels": [_kernel_json(k) for k in report.kernels],
            },
        }],
    }


# -- files -----------------------------------------------------------------------------


def _is_sarif(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(".sarif") or name.endswith(".sarif.json")


def _blank(path) -> bool:
    """An empty path, or one whose last part is only spaces: a quoting slip, never meant."""
    name = Path(path).name
    return not str(path).strip() or (name != "" and not name.strip())


def report_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a report could not be written to `path` (checked before a run, so a bad path is
    a usage error then, not a traceback after every test ran), or None."""
    if _blank(path):
        return f"path {str(path)!r} names no file (it is empty or only spaces)"
    p = Path(path)
    if p.is_dir():
        return f"path {str(p)!r} is a directory"
    return _writable_parent_problem(p)


def output_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why files could not be written into the directory `path` (created with its missing
    parents when absent), or None: checked before the work that fills it."""
    if _blank(path):
        return f"path {str(path)!r} names no directory (it is empty or only spaces)"
    p = Path(path)
    if p.exists() and not p.is_dir():
        return f"path {str(p)!r} exists and is not a directory"
    if p.is_dir():
        return None if os.access(p, os.W_OK | os.X_OK) else f"directory {str(p)!r} is not writable"
    return _writable_parent_problem(p)


def _writable_parent_problem(p: Path) -> str | None:
    """Why the missing directories above `p` could not be created, or None."""
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent  # write_report creates the missing directories below it
    if not parent.is_dir():
        return f"path {str(p)!r}: {str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"path {str(p)!r}: directory {str(parent)!r} is not writable"
    return None


def write_report(report: Report, path: str | os.PathLike[str], *,
                 format: str | None = None, extra: dict[str, Any] | None = None,
                 notes: Iterable[tuple[str, str]] = ()) -> Path:
    """Write JSON, or SARIF when the name ends in `.sarif` (or `format="sarif"`).
    `extra` adds top-level keys to the JSON document (SARIF: to the run's properties);
    `notes` are (level, text) execution notifications (see `to_sarif`).

    Atomic: the document is serialized fully in memory, written to a temporary file in the
    same directory and renamed over `path`; on any error an existing file is left intact
    and the temporary file removed.
    """
    path = Path(path)
    fmt = format or ("sarif" if _is_sarif(path) else "json")
    if fmt not in ("json", "sarif"):
        raise ValueError(f"ldssan: unknown report format {fmt!r}; choose 'json' or 'sarif'")
    doc = to_sarif(report, notes=notes) if fmt == "sarif" else to_json(report, notes=notes)
    if extra:
        (doc["runs"][0]["properties"] if fmt == "sarif" else doc).update(extra)
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
