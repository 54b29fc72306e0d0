"""Suppressions: reports that are known or benign, kept in the report but failing no test
(docs/scope-and-suppressions.md).

A suppressions file (`FLYDSL_LDSSAN_SUPPRESSIONS`, `--ldssan-suppressions`, ini
`ldssan_suppressions`) has one entry a line, `RULE:PATTERN`; `#` starts a comment:

    RULE       a rule code (`LDS001`, any case) or `*` (every rule)
    PATTERN    a kernel name pattern (shell pattern, as in `--ldssan-kernels`), or, when it
               names a `.py` file, `FILE[:LINE]`: a shell pattern over either access's source
               file (its path or a trailing part of it) or a frame of that access's call
               chain, and that frame's line when given

An inline comment `# ldssan: ignore[LDS030,LDS001]` (`# ldssan: ignore`: every rule) on
the source line of either access suppresses the violation too. A malformed entry or
comment is a `SuppressionError` naming its file and line.
"""

from __future__ import annotations

import linecache
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ldssan import rules
from ldssan.decode import Report, Site, Suppression, Violation
from ldssan.runtime.arguments import ConfigError
from ldssan.scope import Pattern, file_matches
from ldssan.variants import original_path

_FILE = re.compile(r"^(?P<glob>.*\.py)(?::(?P<line>[^:]*))?$")
_INLINE = re.compile(r"#\s*ldssan:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?")


class SuppressionError(ConfigError):
    """A suppressions-file entry or an inline `# ldssan: ignore[...]` that is not well formed."""


@dataclass(frozen=True)
class Entry:
    rule: str  # a rule code, or "*"
    glob: str  # over kernel names, or over files when `file` is set
    file: bool
    line: int | None  # a file entry's line, when it names one
    where: str  # FILE:LINE of the entry in the suppressions file
    text: str  # the entry as written

    def matches(self, v: Violation) -> bool:
        if self.rule != "*" and self.rule != v.code:
            return False
        if not self.file:
            name = Pattern("name", self.glob, exclude=False)
            return any(name.matches(k.strip(), "") for k in v.kernel.split(","))
        return any(file_matches(self.glob, original_path(f.file)) and self.line in (None, f.line)
                   for s in _sides(v) for f in ((s, *s.callers)))


def _sides(v: Violation) -> list[Site]:
    return [s for s in (v.site, v.other_site) if s is not None and s.known]


def _rule(code: str) -> str:
    if code == "*":
        return code
    try:
        return rules.info(rules.lookup(code)).code
    except KeyError:
        raise ValueError(f"unknown rule {code!r} (a code like LDS001, or *)") from None


def parse_entry(text: str, where: str) -> Entry:
    """One non-comment line of a suppressions file; a bad one is a `SuppressionError`."""
    rule, sep, pattern = text.partition(":")
    try:
        if not sep or not rule.strip() or not pattern.strip():
            raise ValueError("expected RULE:PATTERN (a rule code or *, a colon, a kernel name or FILE.py[:LINE])")
        rule, pattern = _rule(rule.strip()), pattern.strip()
        m = _FILE.match(pattern)
        line = None
        if m and m["line"] is not None:
            if not m["line"].strip().isdigit() or int(m["line"]) < 1:
                raise ValueError(f"line {m['line']!r} of {m['glob']!r} is not a line number")
            line = int(m["line"])
    except ValueError as exc:
        raise SuppressionError(f"ldssan: suppressions {where}: {exc}: {text!r}") from None
    return Entry(rule, m["glob"] if m else pattern, m is not None, line, where, text)


def load(path: str) -> tuple[Entry, ...]:
    """The entries of a suppressions file; a missing file or a bad entry is a
    `SuppressionError` naming it (and the line)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise SuppressionError(f"ldssan: suppressions file {path!r}: {exc.strerror or exc}") from None
    out = []
    for n, raw in enumerate(lines, 1):
        text = raw.split("#", 1)[0].strip()
        if text:
            out.append(parse_entry(text, f"{path}:{n}"))
    return tuple(out)


def inline(v: Violation) -> Suppression | None:
    """The `# ldssan: ignore[...]` comment on either access's source line covering `v`."""
    for s in _sides(v):
        path = original_path(s.file)
        m = _INLINE.search(linecache.getline(path, s.line))
        if m is None:
            continue
        where = f"{path}:{s.line}"
        codes = m["codes"]
        if codes is None:
            return Suppression("inSource", where, m.group(0))
        try:
            wanted = {_rule(c.strip()) for c in codes.split(",") if c.strip()}
        except ValueError as exc:
            raise SuppressionError(f"ldssan: {where}: {m.group(0)!r}: {exc}") from None
        if not wanted:
            raise SuppressionError(f"ldssan: {where}: {m.group(0)!r}: no rule in the brackets "
                                   "(`# ldssan: ignore` without brackets ignores every rule)")
        if "*" in wanted or v.code in wanted:
            return Suppression("inSource", where, m.group(0))
    return None


def mark(report: Report, entries: Iterable[Entry], hits: Counter) -> Report:
    """`report` with each violation an entry or an inline comment covers marked suppressed
    (the comment first: it sits at the code); `hits` counts each entry's matches by its
    `where` (an entry never counted is stale)."""
    entries = tuple(entries)
    out = []
    for v in report.violations:
        why = inline(v)
        if why is None:
            entry = next((e for e in entries if e.matches(v)), None)
            if entry is not None:
                why = Suppression("external", entry.where, entry.text)
        if why is not None:
            hits[why.where] += 1
            v = replace(v, suppression=why)
        out.append(v)
    return replace(report, violations=tuple(out))


def stale(entries: Iterable[Entry], hits: Counter) -> list[Entry]:
    """The file entries that matched no report in the run."""
    return [e for e in entries if not hits[e.where]]
