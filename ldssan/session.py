"""The user-facing end of one sanitized host call: the runtime's records and site table
decoded into a `Report`, handed to the active collector."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ldssan.runtime.session import SessionOutcome

from .decode import Report, SiteTable, decode


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
    report = decode(out.ring.records(), table, dropped=out.ring.dropped,
                    capacity=out.ring.capacity, launches=1, kernel=kernel)
    return LaunchResult(kernel, report, out.launch, table)


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
    data["buffers"] = [
        {"name": f"{b.name} ({b.file.rsplit('/', 1)[-1]}:{b.line})" if b.file else b.name,
         "offset": b.offset, "size": b.size}
        for b in out.buffers
    ]
    return SiteTable.from_json(data)
