"""ISA findings as the sanitizer's `Violation`s, so one report (text, `ldssan.report/1`
JSON, SARIF) carries both: `ldssan isa-check --sarif` / `--report`, and the findings
FLYDSL_LDSSAN_ISA adds to a sanitized launch's report.

An instruction becomes a site of kind "instruction" whose `op` is the ISA text and its
place in the kernel (`s_barrier_signal -1 at raw_split_0+0x34`), located at its FlyDSL
source line; an instruction the line table gives no line is located in the ISA itself
(`<kernel>.s:<asm line>`), never at a guessed source line.
"""

from __future__ import annotations

import hashlib
import linecache

from ldssan.decode import KernelInfo, Report, Site, Violation
from ldssan.runtime.records import Cause

from .asm import Instr
from .findings import Finding, KernelResult

SITE_KIND = "instruction"
SEVERITIES = ("warning", "error")


def instruction_site(kernel: str, ins: Instr) -> Site:
    op = f"{ins.text} at {kernel}{ins.at() if ins.offset is not None else ', ' + ins.at()}"
    if ins.file and ins.line:
        text = linecache.getline(ins.file, ins.line).rstrip("\n")
        return Site(ins.index, SITE_KIND, op, ins.file, ins.line, ins.col or 0, text=text)
    return Site(ins.index, SITE_KIND, op, f"{kernel}.s", ins.asm_line)


def finding_violation(f: Finding, *, severity: str = "warning", kernel: str | None = None,
                      build: str = "", launch: int = 0) -> Violation:
    """One finding as a violation. `kernel` / `build` / `launch` attribute it to a
    sanitized launch's kernel build (default: the ISA kernel, no build, launch 0)."""
    if severity not in SEVERITIES:
        raise ValueError(f"ldssan: ISA finding severity {severity!r}: expected one of {', '.join(SEVERITIES)}")
    return Violation(
        rule=f.rule, cause=Cause.NONE, site=instruction_site(f.kernel, f.this),
        other_site=instruction_site(f.kernel, f.other), count=1, message=f.cause,
        lds_offset=0, lds_range=(0, 0), buffer=None, wave=None, lane=None, other_wave=None,
        other_lane=None, workgroup=0, launch=launch, extra=0, launches=frozenset({launch}),
        kernel=kernel if kernel is not None else f.kernel, build=build, severity=severity,
    )


def build_digest(result: KernelResult) -> str:
    """A stable name for one ISA kernel build in a report's `kernels` list."""
    shape = f"{result.kernel}:{result.instructions}:" + ",".join(
        f"{f.rule.code}@{f.this.index}/{f.other.index}" for f in result.findings)
    return "isa-" + hashlib.sha256(shape.encode()).hexdigest()[:12]


def isa_report(results: list[KernelResult], *, severity: str = "warning") -> Report:
    """`ldssan isa-check`'s results as a `Report` (for `report.write_report`): one kernel
    entry per build (`sites` = its instruction count; nothing launched), one violation
    per finding."""
    kernels, found = [], []
    for r in results:
        build = build_digest(r)
        kernels.append(KernelInfo(r.kernel, 0, r.instructions, build))
        found += [finding_violation(f, severity=severity, build=build) for f in r.findings]
    return Report(violations=tuple(sorted(found, key=lambda v: v.sort_key)), kernels=tuple(kernels))

