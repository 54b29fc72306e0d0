"""What the ISA check reports: one finding (both instructions) and one kernel's result."""

from __future__ import annotations

from dataclasses import dataclass

from ldssan.runtime.records import Rule

from .asm import Instr


@dataclass(frozen=True)
class Finding:
    rule: Rule
    kernel: str
    this: Instr  # where the hazard shows (the signal, the use)
    other: Instr  # the op still in flight there (the store, the load)
    cause: str

    def to_json(self) -> dict:
        def side(ins: Instr) -> dict:
            return {"isa": ins.text, "offset": ins.offset, "asm_line": ins.asm_line,
                    "file": ins.file, "line": ins.line, "col": ins.col}
        return {"code": self.rule.code, "kernel": self.kernel, "cause": self.cause,
                "this": side(self.this), "other": side(self.other)}


@dataclass(frozen=True)
class KernelResult:
    kernel: str
    instructions: int
    offsets_note: str | None  # why byte offsets are missing (None: they are exact)
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()  # classes not checked on this kernel, and why
