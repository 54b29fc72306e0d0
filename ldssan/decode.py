"""Violation records + site table -> deduplicated, counted `Violation`s in a `Report`.

This is the "collect" half of collect-then-print: everything a report says is computed
here as plain frozen data; `ldssan.report` only formats it.

Site table (built by the pass, `passes/sites.py`; docs/architecture.md), as JSON::

    {"kernel": "gemm_kernel",                       # optional
     "sites": [{"id": 3, "kind": "ds_write", "op": "llvm.store",
                "file": "k.py", "line": 15, "col": 4, "function": "kernel",
                "chain": [{"file": "k.py", "line": 15, "col": 4, "function": "kernel"},
                          {"file": "k.py", "line": 40, "col": 8, "function": "launch"}],
                "text": "smem[tid] = x", "buffer": "smem", "bytes": 4}, ...],
     "buffers": [{"name": "__shared_alloc_0", "offset": 0, "size": 1024,
                  "file": "k.py", "line": 9}, ...]}      # file/line: the allocation

A bare list of site objects is accepted too. `chain` is innermost first; it may start with
the site's own location (then `Site.callers` skips it). `kind` is one of `SITE_KINDS`.
A buffer is named by the variable its allocation line assigns (`ldssan.sitetable`).

Grouping key: (kernel, build, rule, cause, this line, other line) -- a line is a site's
source location with its call chain, so the unrolled copies of one op are one report. A
`Violation` keeps the first record's example (wave, lane, workgroup, launch, LDS offset) and the sets of everything the
merged records saw. Unknown site ids never raise: they resolve to a placeholder site whose
location reads `<unknown site 17>`. A table that is not this shape is a `SiteTableError`
naming the entry and field; a ring buffer that is not well formed is a `RecordFormatError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ldssan import rules
from ldssan.runtime.records import (NO_LANE, NO_SITE, NO_WAVE, WARNING_RULES, Cause, Record, RecordFormatError, Ring,
                                    Rule)
from ldssan.sitetable import (  # re-exported: the site table is part of decoding's API
    ACCESS_KINDS, SITE_KINDS, UNKNOWN_KIND, Frame, LdsBuffer, Site, SiteTable, SiteTableError,
)

__all__ = [
    "ACCESS_KINDS",
    "SITE_KINDS",
    "Frame",
    "Site",
    "LdsBuffer",
    "SiteTable",
    "Violation",
    "Suppression",
    "KernelInfo",
    "Report",
    "decode",
    "decode_ring",
    "decode_bytes",
    "RecordFormatError",
    "SiteTableError",
    "merge_reports",
]

# -- violations ------------------------------------------------------------------------


@dataclass(frozen=True)
class Suppression:
    """Why a violation fails no test (`ldssan.suppress`): a suppressions-file entry
    (kind "external") or an `# ldssan: ignore` comment on one of its lines ("inSource")."""

    kind: str  # "external" | "inSource" (SARIF's suppression kinds)
    where: str  # FILE:LINE of the entry or of the comment
    text: str  # the entry or the comment, as written

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "where": self.where, "text": self.text}


@dataclass(frozen=True, slots=True)
class Violation:
    """One report: every record with the same grouping key (kernel, build, rule, cause,
    this line, other line), with the first record as the example and the sets of what all
    saw; `count` is the number of instances.

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
    build: str = ""  # the kernel build's site-table digest (`SiteTable.build`)
    # "error" fails a test; "warning" (fence-pairing lint under FLYDSL_LDSSAN_LINT=warn) is shown only
    severity: str = "error"
    suppression: Suppression | None = None  # set: reported, marked, and fails nothing

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
    def key(self) -> tuple:
        """(kernel, build, rule, cause, this line, other line): one report per bug."""
        other = _line_key(self.other_site) if self.other_site is not None else ()
        return (self.kernel, self.build, int(self.rule), int(self.cause), _line_key(self.site), other)

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
    build: str = ""  # `SiteTable.build`: builds of one name are kept apart


@dataclass(frozen=True, slots=True)
class Report:
    """Everything one sanitizer run found. `records` counts instances recorded (kept
    records and the duplicates the ring folded into them); `dropped` counts records the ring lost; `capacity` is that ring's size, if known."""

    violations: tuple[Violation, ...] = ()
    dropped: int = 0
    records: int = 0
    capacity: int | None = None
    kernels: tuple[KernelInfo, ...] = ()

    @property
    def clean(self) -> bool:
        """No violation and nothing dropped (a dropped record is an unseen violation);
        warnings and suppressed violations do not count."""
        return self.dropped == 0 and all(v.severity == "warning" or v.suppression is not None
                                         for v in self.violations)

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


def _waits_for(copy: Site | None, table: SiteTable | None) -> list[Site]:
    """The wait sites of the copy's counter in the table (a record names two sites, the
    access and the copy; the wait that was too weak is one of these)."""
    if table is None or copy is None:
        return []
    counter = _counter_name(None, copy)
    return [s for s in table.values() if s.kind == "wait" and _counter_name(s, None) == counter]


def _message(rule: Rule | int, cause: Cause | int, extra: int, site: Site,
             other: Site | None, table: SiteTable | None = None) -> str:
    """The cause line. LDS011 names the wait (its line and text), the copy and the count
    that would suffice."""
    if rule != Rule.WAIT_TOO_WEAK:
        return rules.cause_text(cause, rule)
    candidates = [s for s in (site, other) if s is not None]
    wait = next((s for s in candidates if s.kind == "wait"), None)
    copy = next((s for s in candidates if s.kind.startswith(("tdm_", "dma_"))), None)
    waits = [wait] if wait is not None else _waits_for(copy, table)
    counter = _counter_name(waits[0] if len(waits) == 1 else None, copy)
    have = _wait_count(waits[0]) if len(waits) == 1 else None
    if have is not None and have > extra:
        text = f"{counter} {have} leaves the copy outstanding; {extra} would suffice"
    else:
        text = f"{counter} leaves the copy outstanding; a count of ≤ {extra} would suffice"
    if wait is None and waits and len(waits) <= 3:  # a wait site in the record is shown already
        named = " or ".join(f"{w.short_location} `{w.text.strip()}`" for w in waits)
        text += f" (the wait: {named}"
        text += f"; the copy: {copy.short_location} `{copy.text.strip()}`)" if copy is not None else ")"
    return text


def _line_key(site: Site) -> tuple:
    """Where a site was written (its line and call chain); an unknown site by its id."""
    if not site.known:
        return ("?", site.id)
    return (site.file, site.line, site.col, site.chain)


def _opt(value: int, none: int) -> int | None:
    return None if value == none else value


@dataclass
class _Group:
    """Mutable accumulator for one grouping key."""

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
           kernel: str | None = None,
           folded: Mapping[tuple[int, int, int, int], Iterable[int]] | None = None) -> Report:
    """Deduplicate `records` against `sites` into a `Report`.

    `dropped`/`capacity` come from the ring header; `launches` overrides the launch count
    (default: distinct launch ids among the records); `kernel` overrides the table's name;
    `folded` is the ring's {key: [instances, lowest offset, highest offset]} of records it
    deduplicated as it recorded (`Ring.folded`): they add to the counts and offset range.
    """
    table = sites if isinstance(sites, SiteTable) else SiteTable.from_json(sites)
    kname = table.kernel if kernel is None else kernel
    lines: dict[int, tuple] = {}

    def group_key(rule: int, cause: int, site: int, other: int) -> tuple:
        # unrolled copies of one source op are distinct sites: group by where they were written
        for i in (site, other):
            if i not in lines:
                lines[i] = _line_key(table.resolve(i)) if i != NO_SITE else ()
        return (rule, cause, lines[site], lines[other])

    groups: dict[tuple, _Group] = {}
    seen_launches: set[int] = set()
    n = 0
    for r in records:
        n += 1
        seen_launches.add(r.launch)
        key = group_key(r.rule, r.cause, r.site, r.other_site)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(r)
        g.add(r)
    for ids, (instances, lo, hi) in (folded or {}).items():
        g = groups.get(group_key(*ids))
        if g is not None:  # else the key's kept records were dropped: `dropped` says so
            g.count += instances
            g.lo, g.hi = min(g.lo, lo), max(g.hi, hi)
            n += instances

    out = []
    for g in groups.values():
        f = g.first
        rule, cause = _as_enum(Rule, f.rule), _as_enum(Cause, f.cause)
        site = table.resolve(f.site)
        other = None if f.other_site == NO_SITE else table.resolve(f.other_site)
        out.append(Violation(
            rule=rule, cause=cause, site=site, other_site=other, count=g.count,
            message=_message(rule, cause, g.extra, site, other, table),
            lds_offset=f.lds_offset, lds_range=(g.lo, g.hi), buffer=table.buffer_at(f.lds_offset),
            wave=_opt(f.wave, NO_WAVE), lane=_opt(f.lane, NO_LANE),
            other_wave=_opt(f.other_wave, NO_WAVE), other_lane=_opt(f.other_lane, NO_LANE),
            workgroup=f.workgroup, launch=f.launch, extra=g.extra,
            waves=frozenset(g.waves), lanes=frozenset(g.lanes),
            other_waves=frozenset(g.other_waves), other_lanes=frozenset(g.other_lanes),
            workgroups=frozenset(g.workgroups), launches=frozenset(g.launches), kernel=kname,
            build=table.build, severity="warning" if rule in WARNING_RULES else "error",
        ))
    out.sort(key=lambda v: v.sort_key)
    info = KernelInfo(kname, len(seen_launches) if launches is None else launches, len(table),
                      table.build)
    return Report(tuple(out), dropped=dropped, records=n, capacity=capacity, kernels=(info,))


# Rules found by reading the kernel (passes/lint.py; the compiled code, ldssan/isa/), not
# by running it: no wave, workgroup or LDS offset ran them.
# The fence-pairing lint the pass runs on the IR (passes/lint.py).
LINT_RULES = frozenset({Rule.MISSING_RELEASE, Rule.MISSING_ACQUIRE})
# Findings of a static check (the lint, or the ISA check of the code object): no wave,
# workgroup or LDS offset ran them.
STATIC_RULES = LINT_RULES | {Rule.ISA_STORE_UNWAITED_AT_SIGNAL, Rule.ISA_WAIT_BELOW_INTENT,
                             Rule.ISA_USE_BEFORE_WAIT}


def decode_ring(ring: Ring, sites: SiteTable | str | list | dict, **kw: Any) -> Report:
    """`decode` over a ring's kept records and folded duplicates, with its dropped count
    and capacity."""
    return decode(ring.records(), sites, dropped=ring.dropped, capacity=ring.capacity,
                  folded=ring.folded, **kw)


def decode_bytes(raw: bytes | bytearray | memoryview, sites: SiteTable | str | list | dict,
                 **kw: Any) -> Report:
    """`decode_ring` over a ring copied back as bytes (header + records), validated first:
    a malformed buffer is a `RecordFormatError`, never phantom records."""
    return decode_ring(Ring.from_bytes(raw), sites, **kw)


def _merge_two(a: Violation, b: Violation) -> Violation:
    extra = min(a.extra, b.extra) if a.rule == Rule.WAIT_TOO_WEAK else a.extra
    msg = b.message if extra != a.extra else a.message  # the message that states `extra`
    # a static finding exists once per kernel build, however many launches report it
    count = a.count if a.rule in STATIC_RULES else a.count + b.count
    return replace(
        a, count=count, extra=extra, message=msg,
        lds_range=(min(a.lds_range[0], b.lds_range[0]), max(a.lds_range[1], b.lds_range[1])),
        waves=a.waves | b.waves, lanes=a.lanes | b.lanes,
        other_waves=a.other_waves | b.other_waves, other_lanes=a.other_lanes | b.other_lanes,
        workgroups=a.workgroups | b.workgroups, launches=a.launches | b.launches,
    )


def merge_reports(*reports: Report) -> Report:
    """Combine reports (e.g. one per launch or per kernel) into one.

    Violations with the same key merge (counts add, sets union, first example kept);
    kernels with the same name and build merge (launches add); counts add; the capacity
    is the largest known one.
    """
    merged: dict[tuple, Violation] = {}
    kernels: dict[tuple[str, str], KernelInfo] = {}
    for rep in reports:
        for v in rep.violations:
            merged[v.key] = _merge_two(merged[v.key], v) if v.key in merged else v
        for k in rep.kernels:
            old = kernels.get((k.name, k.build))
            kernels[k.name, k.build] = k if old is None else replace(old, launches=old.launches + k.launches)
    caps = [r.capacity for r in reports if r.capacity is not None]
    return Report(
        tuple(sorted(merged.values(), key=lambda v: v.sort_key)),
        dropped=sum(r.dropped for r in reports), records=sum(r.records for r in reports),
        capacity=max(caps) if caps else None, kernels=tuple(kernels.values()),
    )
