"""Violation records + site table -> deduplicated, counted `Violation`s in a `Report`.

This is the "collect" half of collect-then-print: everything a report says is computed
here as plain frozen data; `ldssan.report` only formats it.

Site table (ARCHITECTURE.md "Site table"), as JSON::

    {"kernel": "gemm_kernel",                       # optional
     "sites": [{"id": 3, "kind": "ds_write", "op": "llvm.store",
                "file": "k.py", "line": 15, "col": 4, "function": "kernel",
                "chain": [{"file": "k.py", "line": 15, "col": 4, "function": "kernel"},
                          {"file": "k.py", "line": 40, "col": 8, "function": "launch"}],
                "text": "smem[tid] = x", "buffer": "smem", "bytes": 4}, ...],
     "buffers": [{"name": "smem", "offset": 0, "size": 1024}, ...]}

A bare list of site objects is accepted too. `chain` is innermost first; it may start with
the site's own location (then `Site.callers` skips it). `kind` is one of `SITE_KINDS`.

Deduplication key: (kernel, rule, cause, site, other_site). A `Violation` keeps the first
record's example (wave, lane, workgroup, launch, LDS offset) and the sets of everything the
merged records saw. Unknown site ids never raise: they resolve to a placeholder site whose
location reads `<unknown site 17>`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ldssan import rules
from ldssan.runtime.records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Ring, Rule

__all__ = [
    "ACCESS_KINDS",
    "SITE_KINDS",
    "Frame",
    "Site",
    "LdsBuffer",
    "SiteTable",
    "Violation",
    "KernelInfo",
    "Report",
    "decode",
    "decode_ring",
    "merge_reports",
]

# Site kinds that touch LDS bytes (they have a size and an LDS offset in a report).
ACCESS_KINDS = frozenset(
    {"ds_read", "ds_write", "ds_atomic", "dma_to_lds", "dma_from_lds", "tdm_load", "tdm_store"}
)
# Every kind the instrumentation pass emits; other strings are kept, printed as-is.
SITE_KINDS = ACCESS_KINDS | {"wait", "mark", "barrier", "fence"}
# Kind of the placeholder site that stands in for an unknown id.
UNKNOWN_KIND = "unknown"


# -- site table ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python source frame of a site's call chain."""

    file: str
    line: int
    col: int = 0
    function: str = ""

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "col": self.col, "function": self.function}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Frame":
        return cls(str(d["file"]), int(d["line"]), int(d.get("col", 0)), str(d.get("function", "")))


@dataclass(frozen=True, slots=True)
class Site:
    """An instrumented op: what it is and where the user wrote it (innermost user frame)."""

    id: int
    kind: str  # one of SITE_KINDS, or UNKNOWN_KIND for a placeholder
    op: str  # MLIR op name, e.g. "llvm.store", "rocdl.s.wait.tensorcnt"
    file: str
    line: int
    col: int = 0
    function: str = ""
    chain: tuple[Frame, ...] = ()  # innermost first
    text: str = ""  # the source line
    buffer: str | None = None  # LDS buffer the pass attributed the op to, if known
    bytes: int = 0  # bytes per lane (ds/dma) or footprint (tdm); 0 = unknown

    @classmethod
    def placeholder(cls, site_id: int) -> "Site":
        """Stand-in for an id the table does not have; prints as `<unknown site N>`."""
        label = "<no site>" if site_id == NO_SITE else f"<unknown site {site_id}>"
        return cls(site_id, UNKNOWN_KIND, "", label, 0)

    @property
    def known(self) -> bool:
        return self.kind != UNKNOWN_KIND

    @property
    def is_access(self) -> bool:
        return self.kind in ACCESS_KINDS

    @property
    def location(self) -> str:
        """`file:line:col`, or the placeholder label for an unknown site."""
        if not self.known:
            return self.file
        return f"{self.file}:{self.line}:{self.col}"

    @property
    def short_location(self) -> str:
        """`file:line` (the SUMMARY form)."""
        return self.file if not self.known else f"{self.file}:{self.line}"

    @property
    def callers(self) -> tuple[Frame, ...]:
        """The call chain without the site's own frame: callers only, innermost first."""
        chain = self.chain
        own = (self.file, self.line, self.col)
        if chain and (chain[0].file, chain[0].line, chain[0].col) == own:
            chain = chain[1:]
        return chain

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "op": self.op, "file": self.file,
            "line": self.line, "col": self.col, "function": self.function,
            "chain": [f.to_dict() for f in self.chain], "text": self.text,
            "buffer": self.buffer, "bytes": self.bytes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Site":
        try:
            buf = d.get("buffer")
            return cls(
                id=int(d["id"]), kind=str(d["kind"]), op=str(d.get("op", "")),
                file=str(d["file"]), line=int(d["line"]), col=int(d.get("col", 0)),
                function=str(d.get("function", "")),
                chain=tuple(Frame.from_dict(f) for f in d.get("chain") or ()),
                text=str(d.get("text") or ""), buffer=None if buf is None else str(buf),
                bytes=int(d.get("bytes") or 0),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"ldssan: malformed site table entry {dict(d)!r}: {e!r}") from e


@dataclass(frozen=True, slots=True)
class LdsBuffer:
    """A named LDS region of the workgroup's allocation. size 0 = extent unknown."""

    name: str
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size

    def contains(self, lds_offset: int) -> bool:
        return self.offset <= lds_offset < self.end

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "offset": self.offset, "size": self.size}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LdsBuffer":
        return cls(str(d["name"]), int(d["offset"]), int(d.get("size") or 0))


class SiteTable(Mapping[int, Site]):
    """Site id -> `Site`, plus the kernel's LDS buffers and (optionally) its name."""

    __slots__ = ("_sites", "buffers", "kernel")

    def __init__(self, sites: Iterable[Site] = (), buffers: Iterable[LdsBuffer] = (),
                 kernel: str = ""):
        self._sites: dict[int, Site] = {}
        for s in sites:
            if s.id in self._sites:
                raise ValueError(f"ldssan: duplicate site id {s.id} in the site table")
            self._sites[s.id] = s
        self.buffers: list[LdsBuffer] = list(buffers)
        self.kernel = kernel

    # Mapping protocol
    def __getitem__(self, site_id: int) -> Site:
        return self._sites[site_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SiteTable):
            return NotImplemented
        mine = (self._sites, self.buffers, self.kernel)
        return mine == (other._sites, other.buffers, other.kernel)

    __hash__ = None  # type: ignore[assignment]  # mutable buffers list

    def __repr__(self) -> str:
        return f"SiteTable(kernel={self.kernel!r}, sites={len(self)}, buffers={len(self.buffers)})"

    def resolve(self, site_id: int) -> Site:
        """The site with this id, or a `<unknown site N>` placeholder; never raises."""
        site = self._sites.get(site_id)
        return site if site is not None else Site.placeholder(site_id)

    def buffer_at(self, lds_offset: int) -> LdsBuffer | None:
        """The smallest buffer containing the offset (buffers may nest, e.g. struct fields);
        failing that, the open-ended (size 0) buffer starting closest below it."""
        sized = [b for b in self.buffers if b.size > 0 and b.contains(lds_offset)]
        if sized:
            return min(sized, key=lambda b: b.size)
        open_ended = [b for b in self.buffers if b.size == 0 and b.offset <= lds_offset]
        return max(open_ended, key=lambda b: b.offset) if open_ended else None

    # JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "sites": [s.to_dict() for s in self._sites.values()],
            "buffers": [b.to_dict() for b in self.buffers],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, data: str | bytes | list | dict) -> "SiteTable":
        """Parse JSON text, a list of site objects, or the `{kernel, sites, buffers}` dict."""
        if isinstance(data, (str, bytes, bytearray)):
            data = json.loads(data)
        if isinstance(data, list):
            return cls(Site.from_dict(d) for d in data)
        if isinstance(data, dict):
            return cls(
                (Site.from_dict(d) for d in data.get("sites") or ()),
                (LdsBuffer.from_dict(b) for b in data.get("buffers") or ()),
                kernel=str(data.get("kernel") or ""),
            )
        raise TypeError(f"ldssan: a site table is a JSON list or object, got {type(data).__name__}")


# -- violations ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    """One deduplicated violation: every record with the same (kernel, rule, cause, site,
    other_site), with the first record as the example and the sets of what all saw.

    Waves and lanes are None where the record had none (NO_WAVE / NO_LANE);
    `other_site` is None when the rule has no other access (LDS013, LDS030, LDS031).
    """

    rule: Rule | int  # int only for a number no Rule has
    cause: Cause | int
    site: Site  # this access
    other_site: Site | None  # the other access
    count: int  # records merged
    message: str  # the cause line, computed from rule, cause, extra and the sites
    lds_offset: int  # first record's first conflicting LDS byte
    lds_range: tuple[int, int]  # lowest and highest offset over merged records
    buffer: LdsBuffer | None  # buffer containing lds_offset
    wave: int | None
    lane: int | None
    other_wave: int | None
    other_lane: int | None
    workgroup: int
    launch: int
    extra: int  # LDS011: the smallest sufficient wait count seen; else first record's
    waves: frozenset[int] = frozenset()
    lanes: frozenset[int] = frozenset()
    other_waves: frozenset[int] = frozenset()
    other_lanes: frozenset[int] = frozenset()
    workgroups: frozenset[int] = frozenset()
    launches: frozenset[int] = frozenset()
    kernel: str = ""

    @property
    def info(self) -> rules.RuleInfo:
        return rules.info(self.rule)

    @property
    def code(self) -> str:
        return self.info.code

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def title(self) -> str:
        return self.info.title

    @property
    def fix(self) -> str:
        return rules.fix_hint(self.rule, self.cause)

    @property
    def key(self) -> tuple[str, int, int, int, int]:
        other = self.other_site.id if self.other_site is not None else NO_SITE
        return (self.kernel, int(self.rule), int(self.cause), self.site.id, other)

    @property
    def sort_key(self) -> tuple:
        o = self.other_site
        return (
            self.code, self.site.line, self.site.file, self.site.col, self.kernel,
            int(self.cause), o.line if o else -1, o.file if o else "", self.site.id,
            o.id if o else NO_SITE,
        )

    @property
    def buffer_offset(self) -> str:
        """`smem+0x40` (offset into the named buffer) or `0x0440` when no buffer is known."""
        if self.buffer is None:
            return f"0x{self.lds_offset:04x}"
        return f"{self.buffer.name}+0x{self.lds_offset - self.buffer.offset:x}"


@dataclass(frozen=True, slots=True)
class KernelInfo:
    name: str
    launches: int  # launches decoded (distinct launch ids, unless the caller said)
    sites: int  # instrumented sites in the table


@dataclass(frozen=True, slots=True)
class Report:
    """Everything one sanitizer run found. `records` counts records decoded (kept ones);
    `dropped` counts records the ring lost; `capacity` is that ring's size, if known."""

    violations: tuple[Violation, ...] = ()
    dropped: int = 0
    records: int = 0
    capacity: int | None = None
    kernels: tuple[KernelInfo, ...] = ()

    @property
    def clean(self) -> bool:
        """No violation and nothing dropped (a dropped record is an unseen violation)."""
        return not self.violations and self.dropped == 0

    @property
    def rules(self) -> tuple[str, ...]:
        """Codes of the rules that fired, sorted."""
        return tuple(sorted({v.code for v in self.violations}))

    def merge(self, *others: "Report") -> "Report":
        return merge_reports(self, *others)


# -- decoding --------------------------------------------------------------------------

# A count in the wait site's source text: `tensor_wait(1)`, `s_wait_asynccnt(n=2)`,
# `wait_asyncmark(0)`, or MLIR's `rocdl.s.wait.tensorcnt 1`.
_WAIT_CALL = re.compile(r"wait\w*\s*\(\s*(?:\w+\s*=\s*)?(\d+)\s*\)")
_WAIT_MLIR = re.compile(r"wait[.\w]*cnt\s+(\d+)\b")


def _wait_count(site: Site | None) -> int | None:
    """The literal count of a wait site, if its source text states exactly one."""
    if site is None or not site.text:
        return None
    found = {int(m) for rx in (_WAIT_CALL, _WAIT_MLIR) for m in rx.findall(site.text)}
    return found.pop() if len(found) == 1 else None


def _counter_name(wait: Site | None, copy: Site | None) -> str:
    """`s_wait_tensorcnt` etc., from the wait's op, else from the copy's kind."""
    if wait is not None and wait.op:
        if wait.op.startswith("rocdl.s.wait."):
            return "s_wait_" + wait.op.removeprefix("rocdl.s.wait.")
        if wait.op == "rocdl.wait.asyncmark":
            return "wait.asyncmark"
    if copy is not None and copy.kind.startswith("tdm_"):
        return "s_wait_tensorcnt"
    if copy is not None and copy.kind.startswith("dma_"):
        return "s_wait_asynccnt"
    return "the wait"


def _message(rule: Rule | int, cause: Cause | int, extra: int, site: Site,
             other: Site | None) -> str:
    """The cause line. LDS011 names the wait and the count that would suffice."""
    if rule != Rule.WAIT_TOO_WEAK:
        return rules.cause_text(cause, rule)
    candidates = [s for s in (site, other) if s is not None]
    wait = next((s for s in candidates if s.kind == "wait"), None)
    copy = next((s for s in candidates if s.kind.startswith(("tdm_", "dma_"))), None)
    counter = _counter_name(wait, copy)
    have = _wait_count(wait)
    if have is not None and have > extra:
        return f"{counter} {have} leaves the copy outstanding; {extra} would suffice"
    return f"{counter} leaves the copy outstanding; a count of ≤ {extra} would suffice"


def _opt(value: int, none: int) -> int | None:
    return None if value == none else value


@dataclass
class _Group:
    """Mutable accumulator for one dedup key."""

    first: Record
    count: int = 0
    extra: int = 0
    lo: int = 0
    hi: int = 0
    waves: set[int] = field(default_factory=set)
    lanes: set[int] = field(default_factory=set)
    other_waves: set[int] = field(default_factory=set)
    other_lanes: set[int] = field(default_factory=set)
    workgroups: set[int] = field(default_factory=set)
    launches: set[int] = field(default_factory=set)

    def add(self, r: Record) -> None:
        if self.count == 0:
            self.extra, self.lo, self.hi = r.extra, r.lds_offset, r.lds_offset
        else:
            if r.rule == Rule.WAIT_TOO_WEAK:
                self.extra = min(self.extra, r.extra)
            self.lo, self.hi = min(self.lo, r.lds_offset), max(self.hi, r.lds_offset)
        self.count += 1
        for value, none, into in (
            (r.wave, NO_WAVE, self.waves), (r.lane, NO_LANE, self.lanes),
            (r.other_wave, NO_WAVE, self.other_waves), (r.other_lane, NO_LANE, self.other_lanes),
        ):
            if value != none:
                into.add(value)
        self.workgroups.add(r.workgroup)
        self.launches.add(r.launch)


def _as_enum(enum_type, value: int):
    try:
        return enum_type(value)
    except ValueError:
        return int(value)


def decode(records: Iterable[Record], sites: SiteTable | str | list | dict, *,
           dropped: int = 0, capacity: int | None = None, launches: int | None = None,
           kernel: str | None = None) -> Report:
    """Deduplicate `records` against `sites` into a `Report`.

    `dropped`/`capacity` come from the ring header; `launches` overrides the launch count
    (default: distinct launch ids among the records); `kernel` overrides the table's name.
    """
    table = sites if isinstance(sites, SiteTable) else SiteTable.from_json(sites)
    kname = table.kernel if kernel is None else kernel
    groups: dict[tuple[int, int, int, int], _Group] = {}
    seen_launches: set[int] = set()
    n = 0
    for r in records:
        n += 1
        seen_launches.add(r.launch)
        key = (r.rule, r.cause, r.site, r.other_site)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(r)
        g.add(r)

    out = []
    for (rule_n, cause_n, site_id, other_id), g in groups.items():
        rule, cause = _as_enum(Rule, rule_n), _as_enum(Cause, cause_n)
        site = table.resolve(site_id)
        other = None if other_id == NO_SITE else table.resolve(other_id)
        f = g.first
        out.append(Violation(
            rule=rule, cause=cause, site=site, other_site=other, count=g.count,
            message=_message(rule, cause, g.extra, site, other),
            lds_offset=f.lds_offset, lds_range=(g.lo, g.hi), buffer=table.buffer_at(f.lds_offset),
            wave=_opt(f.wave, NO_WAVE), lane=_opt(f.lane, NO_LANE),
            other_wave=_opt(f.other_wave, NO_WAVE), other_lane=_opt(f.other_lane, NO_LANE),
            workgroup=f.workgroup, launch=f.launch, extra=g.extra,
            waves=frozenset(g.waves), lanes=frozenset(g.lanes),
            other_waves=frozenset(g.other_waves), other_lanes=frozenset(g.other_lanes),
            workgroups=frozenset(g.workgroups), launches=frozenset(g.launches), kernel=kname,
        ))
    out.sort(key=lambda v: v.sort_key)
    info = KernelInfo(kname, len(seen_launches) if launches is None else launches, len(table))
    return Report(tuple(out), dropped=dropped, records=n, capacity=capacity, kernels=(info,))


def decode_ring(ring: Ring, sites: SiteTable | str | list | dict, **kw: Any) -> Report:
    """`decode` over a ring's kept records, with its dropped count and capacity."""
    return decode(ring.records(), sites, dropped=ring.dropped, capacity=ring.capacity, **kw)


def _merge_two(a: Violation, b: Violation) -> Violation:
    extra = min(a.extra, b.extra) if a.rule == Rule.WAIT_TOO_WEAK else a.extra
    msg = a.message
    if extra != a.extra:
        msg = _message(a.rule, a.cause, extra, a.site, a.other_site)
    return replace(
        a, count=a.count + b.count, extra=extra, message=msg,
        lds_range=(min(a.lds_range[0], b.lds_range[0]), max(a.lds_range[1], b.lds_range[1])),
        waves=a.waves | b.waves, lanes=a.lanes | b.lanes,
        other_waves=a.other_waves | b.other_waves, other_lanes=a.other_lanes | b.other_lanes,
        workgroups=a.workgroups | b.workgroups, launches=a.launches | b.launches,
    )


def merge_reports(*reports: Report) -> Report:
    """Combine reports (e.g. one per launch or per kernel) into one.

    Violations with the same key merge (counts add, sets union, first example kept);
    kernels with the same name merge (launches add, sites = max); counts add; the
    capacity is the largest known one.
    """
    merged: dict[tuple, Violation] = {}
    kernels: dict[str, KernelInfo] = {}
    for rep in reports:
        for v in rep.violations:
            merged[v.key] = _merge_two(merged[v.key], v) if v.key in merged else v
        for k in rep.kernels:
            old = kernels.get(k.name)
            kernels[k.name] = k if old is None else KernelInfo(
                k.name, old.launches + k.launches, max(old.sites, k.sites))
    caps = [r.capacity for r in reports if r.capacity is not None]
    return Report(
        tuple(sorted(merged.values(), key=lambda v: v.sort_key)),
        dropped=sum(r.dropped for r in reports), records=sum(r.records for r in reports),
        capacity=max(caps) if caps else None, kernels=tuple(kernels.values()),
    )
