"""The user-facing end of one sanitized host call: the runtime's records and site table
decoded into a `Report`, handed to the active collector."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from typing import Any

from ldssan.runtime.records import Cause
from ldssan.runtime.session import SessionOutcome

from . import config, rules
from .decode import LINT_RULES, Report, SiteTable, SiteTableError, Violation, decode_ring


@dataclass
class LaunchResult:
    kernel: str
    report: Report
    launch: int
    sites: SiteTable


def decode_outcome(out: SessionOutcome, *, coverage: bool) -> LaunchResult:
    if coverage:
        _print_coverage(out.coverage_json)
    table = site_table(out)
    kernel = ", ".join(out.kernels) or out.entry
    report = decode_ring(out.ring, table, launches=1, kernel=kernel)
    lint = config.get("lint")
    if lint != "off":
        found = lint_violations(json.loads(out.sites_json).get("lint"), table, kernel=kernel,
                                launch=out.launch, severity="error" if lint == "error" else "warning")
        report = replace(report, violations=tuple(sorted(report.violations + found,
                                                         key=lambda v: v.sort_key)))
    return LaunchResult(kernel, report, out.launch, table)


def lint_violations(findings: Any, table: SiteTable, *, kernel: str, launch: int,
                    severity: str = "warning") -> tuple[Violation, ...]:
    """The fence-pairing findings the pass put in the site table (`{"code", "access",
    "barrier"}` each, passes/lint.py) as violations: the access and its barrier, no wave."""
    if not isinstance(findings, (list, type(None))):
        raise SiteTableError(f"ldssan: site table 'lint' is a {type(findings).__name__}, not a list")
    out = []
    for i, f in enumerate(findings or ()):
        try:
            rule = rules.lookup(str(f["code"]))
            access, barrier = int(f["access"]), int(f["barrier"])
        except (KeyError, TypeError, ValueError) as e:
            raise SiteTableError(f"ldssan: site table lint[{i}]: bad or missing field: {e}") from None
        if rule not in LINT_RULES:
            raise SiteTableError(f"ldssan: site table lint[{i}]: {rule.code} is not a lint rule")
        out.append(Violation(
            rule=rule, cause=Cause.NONE, site=table.resolve(access), other_site=table.resolve(barrier),
            count=1, message=rules.cause_text(Cause.NONE, rule), lds_offset=0, lds_range=(0, 0),
            buffer=None, wave=None, lane=None, other_wave=None, other_lane=None, workgroup=0,
            launch=launch, extra=0, launches=frozenset({launch}), kernel=kernel, severity=severity,
            build=table.build,
        ))
    return tuple(out)


_COVERAGE_SHOWN: set[str] = set()


def _print_coverage(coverage_json: str) -> None:
    """`FLYDSL_LDSSAN_COVERAGE=1`: each kernel build's instrumented sites by kind, once."""
    from ldssan.passes.instrument import coverage_line

    for line in coverage_line(coverage_json):
        if line not in _COVERAGE_SHOWN:
            _COVERAGE_SHOWN.add(line)
            print(line, file=sys.stderr)


def site_table(out: SessionOutcome) -> SiteTable:
    data = json.loads(out.sites_json)
    data["buffers"] = [{"name": b.name, "offset": b.offset, "size": b.size, "file": b.file, "line": b.line}
                       for b in out.buffers]
    return SiteTable.from_json(data)
