"""The control-flow graph of one kernel body: basic blocks split at labels and branches.

gfx1250 scalar branches: `s_branch L` (always), `s_cbranch_<cond> L` (taken or falls
through), `s_endpgm` (the wave ends). Indirect control flow (`s_setpc_b64`, `s_swap_pc_i64`,
`s_call_b64`, ...) has no static successor: such a kernel is refused by name, not analysed
as if the call fell through.
"""

from __future__ import annotations

from dataclasses import dataclass

from .asm import Instr, IsaParseError, Kernel


class IsaUnsupportedError(IsaParseError):
    """An instruction the ISA check cannot model: names it, its offset and source line."""

    def __init__(self, kernel: str, ins: Instr, why: str):
        super().__init__(f"{kernel}: `{ins.text}` at {ins.at()} ({ins.where()}): {why}")


_INDIRECT = ("s_setpc_b64", "s_swap_pc", "s_call_b64", "s_rfe_b64", "s_trap", "s_cbranch_join")
_EXIT = ("s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done")


@dataclass(frozen=True)
class Block:
    start: int  # first instruction index
    end: int  # one past the last
    succs: tuple[int, ...]  # successor block ids


def _target(kernel: Kernel, ins: Instr) -> int:
    label = ins.operands[0] if ins.operands else ""
    if label not in kernel.labels:
        raise IsaUnsupportedError(kernel.name, ins, f"branch target {label!r} is not a label of the kernel")
    if kernel.labels[label] >= len(kernel.instrs):
        raise IsaUnsupportedError(kernel.name, ins, f"branch target {label!r} is past the last instruction")
    return kernel.labels[label]


def build_cfg(kernel: Kernel) -> list[Block]:
    """Blocks in address order; block 0 is the entry."""
    instrs = kernel.instrs
    leaders = {0} | {i for i in kernel.labels.values() if i < len(instrs)}
    for ins in instrs:
        m = ins.mnemonic
        if m.startswith(_INDIRECT):
            raise IsaUnsupportedError(kernel.name, ins, "indirect control flow has no static successor")
        if m == "s_branch" or m.startswith("s_cbranch_"):
            leaders.add(_target(kernel, ins))
            leaders.add(ins.index + 1)
        elif m in _EXIT:
            leaders.add(ins.index + 1)
    starts = sorted(i for i in leaders if i < len(instrs))
    block_of = {s: b for b, s in enumerate(starts)}
    blocks = []
    for b, start in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(instrs)
        last = instrs[end - 1]
        m = last.mnemonic
        if m in _EXIT:
            succs = ()
        elif m == "s_branch":
            succs = (block_of[_target(kernel, last)],)
        elif m.startswith("s_cbranch_"):
            succs = tuple(dict.fromkeys(x for x in (b + 1, block_of[_target(kernel, last)]) if x < len(starts)))
        elif b + 1 < len(starts):
            succs = (b + 1,)
        else:
            raise IsaUnsupportedError(kernel.name, last, "the kernel body ends without s_endpgm or a branch")
        blocks.append(Block(start, end, succs))
    return blocks
