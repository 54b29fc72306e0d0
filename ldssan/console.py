"""The console report: a ThreadSanitizer-shaped block per violation, plain data in,
rich `Text` out (`ldssan.report` re-exports it with the JSON and SARIF forms).

One report per (rule, cause, this line, other line), with the sets of waves,
lanes and workgroups of all its instances; columns 1-based. The shape::

    ==================
    WARNING: ldssan: <title> (LDS001)
    Cause: <cause line>
    This access: read of 4 bytes at LDS partial+0x0..0x7c by wave 1 lanes 0-31 (workgroup 0)
      at k.py:17:9 in lds_neighbour
        Out[tid] = partial[(tid + 1) % N]
      called from k.py:30:5 in launch
    Previous access: write of 4 bytes at LDS partial+0x0..0x7c by wave 0 lanes 0-31 (workgroup 0)
      at k.py:14:5 in lds_neighbour
        partial[tid] = fx.Int32(tid) * 10
    Seen 32 times: wave 1, other wave 0, lanes 0-31, workgroup 0, launch 0, LDS partial+0x0..0x7c
    LDS buffer: partial (256 bytes at 0x0, __shared_alloc_0), allocated at k.py:9: partial = ...
    Variant of k.py: line 15: `fx.gpu.barrier()` -> (deleted)      (a kernel variant only)

      <explanation paragraph>

      Fix: <hint>
    SUMMARY: ldssan: LDS001 raw-unpublished k.py:17
    ==================
    ldssan: reported 1 violation (32 records)
"""

from __future__ import annotations

import io
import linecache
import textwrap
from collections.abc import Iterable

from rich.console import Console
from rich.text import Text

from ldssan import rules
from ldssan.decode import STATIC_RULES, Report, Site, Violation
from ldssan.runtime.records import Rule

__all__ = ["BANNER", "render", "render_text", "violation_lines", "summary_lines", "dropped_line"]

BANNER = "=" * 18
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


def plural(word: str) -> str:
    """English plural of the nouns ldssan prints: launch -> launches, byte -> bytes."""
    return word + ("es" if word.endswith(("s", "sh", "ch", "x", "z")) else "s")


def counted(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural(word)}"


def _actors(word: str, values: frozenset[int], example: int | None) -> str | None:
    """`wave 1`, or `waves 0-3` when the grouped records saw several."""
    if len(values) > 1:
        return f"{plural(word)} {_int_set(values)}"
    return None if example is None else f"{word} {example}"


def _access_phrase(site: Site, v: Violation, wave: int | None, lane: int | None,
                   *, other: bool = False) -> str:
    """`read of 4 bytes at LDS smem+0x40 by waves 0-1 lanes 0-31 (workgroup 0)`: the
    wave and lane sets of every instance of this side, not one example."""
    if site.known:
        verb = _VERB.get(site.kind, site.kind)
        if not site.is_access and site.op:
            verb = site.op  # the header already says "barrier", "wait", ...
    else:
        verb = "access"
    parts = [verb]
    static = v.rule in STATIC_RULES  # found in the IR: no LDS offset, wave or workgroup ran it
    if site.is_access or not site.known:
        if site.bytes:
            parts.append(f"of {counted(site.bytes, 'byte')}")
        if not static:
            parts.append(f"at LDS {_lds_where(v)}")
    waves, lanes = (v.other_waves, v.other_lanes) if other else (v.waves, v.lanes)
    who = [x for x in (_actors("wave", waves, wave), _actors("lane", lanes, lane)) if x]
    if who and (wave is not None or len(waves) > 1):
        parts.append("by " + " ".join(who))
    if not static:
        where = _actors('workgroup', v.workgroups, v.workgroup)
        if other and v.rule == Rule.CLUSTER_COPY_UNORDERED:  # the copy's issuer is another workgroup
            where = f"issued by a cluster peer of {where}"
        parts.append(f"({where})")
    return " ".join(parts)


def _lds_where(v: Violation) -> str:
    """`smem+0x40`, or the range `smem+0x0..0xfc` of a grouped violation."""
    lo, hi = v.lds_range
    buf = v.buffer
    if hi == lo or v.count <= 1:
        return v.buffer_offset
    if buf is not None and buf.contains(lo) and buf.contains(hi):
        return f"{buf.name}+0x{lo - buf.offset:x}..0x{hi - buf.offset:x}"
    return f"0x{lo:04x}..0x{hi:04x}"


def _buffer_line(v: Violation) -> Text | None:
    """`LDS buffer: partial (256 bytes at 0x0, __shared_alloc_0), allocated at k.py:12`."""
    b = v.buffer
    if b is None:
        return None
    what = [f"{b.size} bytes at 0x{b.offset:x}" if b.size else f"at 0x{b.offset:x}"]
    if b.symbol and b.symbol != b.name:
        what.append(b.symbol)
    line = f"LDS buffer: {b.name} ({', '.join(what)})"
    if b.allocated_at:
        line += f", allocated at {b.allocated_at}"
        src = linecache.getline(b.file, b.line).strip()
        if src:
            line += f": {src}"
    return Text(line, _STYLE["dim"])


def _variant_line(v: Violation) -> Text | None:
    """`Variant of k.py: line 57: `old` -> `new``: the edit a report on a kernel variant is
    about (its locations already name the original file and line)."""
    sites = [s for s in (v.site, v.other_site) if s is not None]
    origins = dict.fromkeys(o for s in sites for o in s.origins)
    if not origins:
        return None
    said = [f"{o.path}: " + ("; ".join(o.describe()) or "unchanged") for o in origins]
    return Text("Variant of " + "; variant of ".join(said), _STYLE["dim"])


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
                             _access_phrase(o, v, v.other_wave, v.other_lane, other=True), o)
    for extra_line in (_seen_line(v), _buffer_line(v), _variant_line(v)):
        if extra_line is not None:
            lines.append(extra_line)
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
    out = [Text(f"ldssan: reported {counted(n, 'violation')} ({counted(report.records, 'record')})",
                _STYLE["summary"] if n else "")]
    if hidden:
        out.append(Text(f"ldssan: {counted(hidden, 'more violation')} not shown "
                        f"(the JSON/SARIF report has all of them)", _STYLE["dim"]))
    for k in report.kernels:
        if k.name:
            out.append(Text(f"ldssan:   kernel {k.name}: {counted(k.launches, 'launch')}, "
                            f"{counted(k.sites, 'instrumented site')}", _STYLE["dim"]))
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
