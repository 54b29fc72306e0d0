"""`llvm.inline_asm`: the instruction strings real gfx1250 kernels use, recognised by a small
table (`ASM`), each with its effect; anything else is refused naming the asm text and the
op's own source line.

The table (found in ROCm/aiter's FlyDSL gfx1250 kernels; ISA semantics from the RDNA/CDNA ISA
guides' SOPP/SOP2 descriptions):
- `s_wait_dscnt N`, `s_wait_idle`: counter waits. `s_wait_idle` waits until every counter of
  the wave is zero. The pass instruments them as the `rocdl.s.wait.*` ops
  (passes/gfx1250.py `INLINE_ASM_WAITS`), and here they are the same scheduler events.
- `s_nop N`: no effect on values or memory.
- `s_and_b32 $0, $1, IMM` (`=s,s[,~{scc}]`): the result is the operand AND the immediate
  (SCC is a clobber the IR never reads).
- the empty string with `=s,s` or `=v,v`: the result is the operand (kernels use it to hide
  a value from constant folding; no instruction).

Refused: any other text, and forms of these whose operands or results differ (an output
tied to an operand without a result changes a register the IR does not see).
"""

from __future__ import annotations

import re
from typing import Callable

from ldssan.passes.gfx1250 import INLINE_ASM_WAITS, inline_asm_waits
from ldssan.passes.ir.irview import Op
from ..errors import UnsupportedOp
from ..events import WaitCount
from . import emits
from .rocdl import _COUNTERS

ASM: list[tuple[re.Pattern, tuple[str, ...], Callable]] = []  # (text, constraint forms, emitter)
SUPPORTED = ('"s_and_b32 $0, $1, IMM" =s,s[,~{scc}]; "" =s,s or =v,v; "s_nop N"; "s_wait_dscnt N"; '
             '"s_wait_idle"')


def asm(pattern: str, *constraints: str):
    def register(fn):
        ASM.append((re.compile(pattern), constraints, fn))
        return fn

    return register


@emits("llvm.inline_asm")
def inline_asm(t, op: Op) -> None:
    text = str(op.attr("asm_string", "")).strip()
    constraints = str(op.attr("constraints", "")).replace(" ", "")
    for pattern, forms, emit in ASM:
        m = pattern.fullmatch(text)
        if m is not None and (not forms or constraints in forms):
            emit(t, op, m)
            return
    raise UnsupportedOp(named(text), op.loc,
                        f"inline assembly with constraints {constraints!r} is not in the virtual gfx1250's "
                        f"table ({SUPPORTED}); its effect on registers, LDS and counters is unknown")


def named(text: str) -> str:
    """The op name a refusal reports: the asm op and its text, first line."""
    first = text.splitlines()[0] if text else ""
    return f'llvm.inline_asm "{first}"'


def _one_result(t, op: Op, text: str) -> None:
    if len(op.results) != 1 or len(op.operands) != 1:
        raise UnsupportedOp(named(text), op.loc, "this form needs one result and one operand")


@asm(r"", "=s,s", "=v,v")
def opaque_copy(t, op: Op, m) -> None:
    _one_result(t, op, "")
    t.out(f"{t.v(op.results[0])} = {t.v(op.operands[0])}  # an empty asm: no instruction")


@asm(r"s_and_b32\s+\$0,\s*\$1,\s*(0x[0-9a-fA-F]+|-?\d+)", "=s,s", "=s,s,~{scc}")
def s_and_b32(t, op: Op, m) -> None:
    _one_result(t, op, m.group(0))
    imm = int(m.group(1), 0) & 0xFFFFFFFF
    t.out(f"{t.v(op.results[0])} = (np.asarray({t.v(op.operands[0])}).astype(np.int64) & {imm})"
          f".astype(np.uint32).view(np.int32)[()]")


@asm(r"s_nop\s+(0x[0-9a-fA-F]+|\d+)", "")
def s_nop(t, op: Op, m) -> None:
    if op.results or op.operands:
        raise UnsupportedOp(named(m.group(0)), op.loc, "s_nop takes no operands and has no result")
    t.out("pass  # s_nop: a delay, no effect on values or memory")


@asm("|".join(INLINE_ASM_WAITS), "")
def s_wait(t, op: Op, m) -> None:
    if op.results or op.operands:
        raise UnsupportedOp(named(m.group(0)), op.loc, "a wait takes no operands and has no result")
    for wait_op, n in inline_asm_waits(m.group(0)):
        t.yield_event(WaitCount(_COUNTERS[wait_op], n))
