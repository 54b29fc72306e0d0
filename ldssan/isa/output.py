"""ISA findings as text (the shape of every ldssan report) and JSON ("ldssan.isa/1").

    ==================
    WARNING: ldssan: <title> (LDS050)
    Cause: <cause>
    This instruction: s_barrier_signal -1 at rmsnorm_kernel_0+0x19c
      at k.py:205:8
        fx.rocdl.s_barrier_signal(-1)
    Other instruction: ds_store_b32 v5, v3 at rmsnorm_kernel_0+0x190
      at k.py:204:12
        fx.memref_store(w_sum, partial, wave)

      <explanation>

      Fix: <hint>
    SUMMARY: ldssan: LDS050 isa-store-unwaited-at-signal k.py:205
    ==================
"""

from __future__ import annotations

import json
import linecache
import textwrap
from pathlib import Path

from ldssan import rules

from .asm import Instr
from .findings import Finding, KernelResult

SCHEMA = "ldssan.isa/1"
_RULE_LINE = "=================="


def _side(label: str, kernel: str, ins: Instr) -> list[str]:
    at = f"{kernel}+0x{ins.offset:x}" if ins.offset is not None else f"{kernel}, {ins.at()}"
    out = [f"{label}: {ins.text} at {at}", f"  at {ins.where()}"]
    if ins.file:
        src = linecache.getline(ins.file, ins.line or 0).strip()
        if src:
            out.append(f"    {src}")
    return out


def finding_lines(f: Finding, *, width: int = 100) -> list[str]:
    info = rules.info(f.rule)
    wrap = lambda s: textwrap.wrap(s, width=width, initial_indent="  ", subsequent_indent="  ")  # noqa: E731
    where = f"{f.this.file}:{f.this.line}" if f.this.file else f"{f.kernel}:{f.this.at()}"
    return [
        _RULE_LINE,
        f"WARNING: ldssan: {info.title} ({info.code})",
        f"Cause: {f.cause}",
        *_side("This instruction", f.kernel, f.this),
        *_side("Other instruction", f.kernel, f.other),
        "",
        *wrap(info.explanation),
        "",
        *wrap(f"Fix: {info.fix}"),
        f"SUMMARY: ldssan: {info.code} {info.name} {where}",
        _RULE_LINE,
    ]


def render_text(results: list[KernelResult], *, width: int = 100) -> str:
    lines: list[str] = []
    for r in results:
        for f in r.findings:
            lines += finding_lines(f, width=width)
    n = sum(len(r.findings) for r in results)
    notes = sorted({r.offsets_note for r in results if r.offsets_note})
    lines += [f"ldssan isa-check: note: ISA offsets are asm lines: {note}" for note in notes]
    lines += [f"ldssan isa-check: note: {r.kernel}: {note}" for r in results for note in r.notes]
    lines.append(f"ldssan isa-check: {len(results)} kernel build(s), "
                 f"{sum(r.instructions for r in results)} instructions, {n} finding(s)")
    return "\n".join(lines) + "\n"


def to_json(results: list[KernelResult]) -> dict:
    fired = sorted({f.rule for r in results for f in r.findings})
    return {
        "schema": SCHEMA,
        "summary": {"kernels": len(results), "findings": sum(len(r.findings) for r in results)},
        "rules": {rules.info(c).code: {"name": rules.info(c).name, "title": rules.info(c).title,
                                       "fix": rules.info(c).fix} for c in fired},
        "kernels": [{"kernel": r.kernel, "instructions": r.instructions, "offsets_note": r.offsets_note,
                     "notes": list(r.notes),
                     "findings": [f.to_json() for f in r.findings]} for r in results],
    }


def write_json(results: list[KernelResult], path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(to_json(results), fh, indent=2)
        fh.write("\n")
