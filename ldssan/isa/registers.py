"""LDS052 isa-use-before-wait, register form: an instruction uses a VGPR that a load may
still be writing on some path (its counter not yet waited down past it). gfx1250 does not
interlock VMEM/DS results: the wait the compiler places before the first use is the only
thing that orders them, and one placed an instruction too late (aiter #5418) is this.

A use is any mention of the register (reading it, or writing it while the load can still
land on it); a later load of the same counter overwriting it is exempt, since the counter
completes in order. Register numbers are taken literally, so a kernel that remaps them
(`s_set_vgpr_msb`, for more than 256 VGPRs) is not checked, and the result says so.
"""

from __future__ import annotations

import re

from ldssan.runtime.records import Rule

from .asm import Instr, Kernel
from .counters import counters_of, returns_data, walk
from .findings import Finding

_VGPR = re.compile(r"\bv(\d+)\b|\bv\[(\d+):(\d+)\]")
_RETURNS = re.compile(r"^(ds_(load|read|permute|bpermute|swizzle|append|consume)|"
                      r"(global|buffer|flat|scratch|cluster)_load)")
REMAPS_VGPRS = "s_set_vgpr_msb"


def vgprs(text: str) -> set[int]:
    out: set[int] = set()
    for one, lo, hi in _VGPR.findall(text):
        out |= {int(one)} if one else set(range(int(lo), int(hi) + 1))
    return out


def loaded_vgprs(ins: Instr) -> set[int]:
    """VGPRs a memory instruction writes when it completes (its first operand), else none."""
    m = ins.mnemonic
    returns = (_RETURNS.match(m) and "lds" not in m) or returns_data(ins)
    return vgprs(ins.operands[0]) if returns and ins.operands else set()


def use_before_wait(kernel: Kernel) -> list[Finding]:
    found: dict[tuple[int, int], Finding] = {}
    for ins, state in walk(kernel):
        operands = ins.operands
        own = loaded_vgprs(ins)
        for counter, ops in state.items():
            for op in ops:
                load = kernel.instrs[op]
                regs = loaded_vgprs(load)
                if not regs or (op, ins.index) in found:
                    continue
                used = vgprs(" ".join(operands))
                if own and counter in counters_of(ins):
                    used -= own  # an in-order successor of the same counter may overwrite it
                hit = sorted(regs & used)
                if hit:
                    cause = (f"v{hit[0]} is used while {load.mnemonic} may still be writing it: "
                             f"no s_wait_{counter} retires the load first on some path")
                    found[(op, ins.index)] = Finding(Rule.ISA_USE_BEFORE_WAIT, kernel.name, ins, load, cause)
    return list(found.values())
