"""What each hand-written wait in the IR was meant to retire, and where the compiled code
does not: the analysis behind LDS051 (a wait whose count, right for the IR's ops, leaves
an op outstanding in the ISA because the backend merged, split or interleaved ops).

Intent: the IR FlyDSL hands to its backend (the stage right after `convert-fly-to-rocdl`
+ `canonicalize`, the IR the sanitizer instruments; scf still structured) is flattened
into pseudo-instructions, one per op that counts on a gfx1250 counter and one per
`rocdl.s.wait.*`, with scf loops and ifs as branches, and run through the same per-path
counter analysis as the ISA (`counters.walk`). An op a wait removes from the may-
outstanding state is retired by it on every IR path: the side table maps each wait's
(source file, line, counter, count) to the source lines it retires this way, minus any
line with an op the wait may leave outstanding (one line, several ops: no claim).

Check: an ISA wait with the same source line, counter and count (a hand-written wait
keeps its count; one the backend strengthened retires more and cannot leave more) after
which an instruction from one of those lines may still be outstanding on some ISA path
is a gap. Instructions the line table gives no line (merged ops) are not attributed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ldssan.passes.ir.errors import LdssanError
from ldssan.passes.abi import CopyKind
from ldssan.passes.gfx1250 import ASYNC_COPIES, TDM_OPS, WAITS
from ldssan.passes.ir.irview import Block, Op

from .asm import Instr, Kernel
from .counters import step, waits_of, walk

_COUNTER_NAME = {0: "dscnt", 1: "loadcnt", 2: "storecnt", 3: "asynccnt", 4: "tensorcnt"}

# IR op -> the pseudo mnemonic `counters.counters_of` maps to the op's counter.
_MEMORY = {"llvm.load": {3: "ds_load", 1: "global_load"}, "llvm.store": {3: "ds_store", 1: "global_store"},
           "llvm.atomicrmw": {3: "ds_add_rtn"}, "llvm.cmpxchg": {3: "ds_cmpstore_rtn"}}
_PTR_OPERAND = {"llvm.load": 0, "llvm.store": 1, "llvm.atomicrmw": 0, "llvm.cmpxchg": 0}
_COPY = {CopyKind.TO_LDS: ("global_load_async_to_lds", "tensor_load_to_lds"),
         CopyKind.FROM_LDS: ("global_store_async_from_lds", "tensor_store_from_lds")}
_OTHER = {"rocdl.raw.ptr.buffer.load": "buffer_load", "rocdl.raw.ptr.buffer.store": "buffer_store",
          **{n: _COPY[kind][0] for n, (kind, _ptr, _nb) in ASYNC_COPIES.items()},
          **{n: _COPY[kind][1] for n, kind in TDM_OPS.items()}}
_LOOPS = ("scf.for", "scf.while")


class IntentUnavailable(LdssanError, ValueError):
    """The IR has a construct the flattening does not model (names the op and its line)."""


Key = tuple[str, int, str, int]  # (file, line, counter, count) of a wait
Line = tuple[str, int]  # (file, line) of an op


@dataclass(frozen=True)
class Gap:
    """An ISA wait that leaves outstanding an op its IR wait retires on every path."""

    wait: Instr
    op: Instr
    counter: str
    count: int
    younger: int  # the fewest ops of the counter after `op` on a compiled path to the wait


def _mnemonic(op: Op) -> str | None:
    if op.name in _MEMORY:
        ptr = op.operand_types[_PTR_OPERAND[op.name]] if op.operand_types else None
        space = ptr.width if ptr is not None and ptr.kind == "ptr" else None
        return _MEMORY[op.name].get(space)
    return _OTHER.get(op.name)


class _Flattener:
    def __init__(self, name: str):
        self.name = name
        self.instrs: list[Instr] = []
        self.labels: dict[str, int] = {}
        self._n = 0

    def emit(self, text: str, op: Op | None) -> None:
        frame = op.loc.frame if op is not None else None
        mnemonic, _, rest = text.partition(" ")
        self.instrs.append(Instr(len(self.instrs), mnemonic, (rest,) if rest else (), text, 0,
                                 frame.file if frame else None, frame.line if frame else None,
                                 frame.col if frame else None))

    def label(self) -> str:
        self._n += 1
        return f".Lir{self._n}"

    def place(self, label: str) -> None:
        self.labels[label] = len(self.instrs)

    def blocks(self, blocks: list[Block]) -> None:
        if len(blocks) > 1:
            raise IntentUnavailable(f"{self.name}: a region with {len(blocks)} blocks (unstructured control flow)")
        for blk in blocks:
            for op in blk.ops:
                self.op(op)

    def op(self, op: Op) -> None:
        if op.name in WAITS:
            if op.name == "rocdl.wait.asyncmark":
                raise IntentUnavailable(f"{self.name}: `{op.name}` at {op.loc} (the backend computes its count)")
            counter = _COUNTER_NAME[int(WAITS[op.name])]
            self.emit(f"s_wait_{counter} {int(op.attr('count', 0))}", op)
        elif (m := _mnemonic(op)) is not None:
            self.emit(m, op)
        elif op.name == "scf.if":
            other, end = self.label(), self.label()
            self.emit(f"s_cbranch_scc0 {other}", op)
            self.blocks(op.regions[0])
            self.emit(f"s_branch {end}", op)
            self.place(other)
            if len(op.regions) > 1:
                self.blocks(op.regions[1])
            self.place(end)
        elif op.name in _LOOPS:
            head, out = self.label(), self.label()
            self.emit(f"s_cbranch_scc0 {out}", op)  # zero trips
            self.place(head)
            for region in op.regions:  # scf.while: the condition region, then the body
                self.blocks(region)
            self.emit(f"s_cbranch_scc1 {head}", op)
            self.place(out)
        elif op.regions and any(op.regions):
            raise IntentUnavailable(f"{self.name}: `{op.name}` at {op.loc} has regions the intent does not model")


def flatten(name: str, body: list[Block]) -> Kernel:
    """A kernel function's IR as pseudo-instructions `counters.walk` can run."""
    f = _Flattener(name)
    f.blocks(body)
    f.emit("s_endpgm", None)
    return Kernel(name, tuple(f.instrs), f.labels)


def intent_table(kernel: Kernel) -> dict[Key, frozenset[Line]]:
    """(file, line, counter, count) of each wait -> the (file, line) of the ops it retires
    on every IR path (lines with an op it may leave outstanding excluded)."""
    retired: dict[Key, set[int]] = {}
    kept: dict[Key, set[int]] = {}
    for ins, counter, count, before, after in _waits(kernel):
        key = (ins.file, ins.line, counter, count)
        gone = set(before.get(counter, {})) - set(after.get(counter, {}))
        retired.setdefault(key, set()).update(_lines(kernel, gone))
        kept.setdefault(key, set()).update(_lines(kernel, after.get(counter, {})))
    return {k: frozenset(v - kept[k]) for k, v in retired.items() if v - kept[k]}


def _waits(kernel: Kernel):
    """(wait instruction, counter, count, outstanding before, outstanding after) for every
    wait with a source line, on every path `walk` explores."""
    for ins, before in walk(kernel):
        waits = waits_of(kernel, ins)
        if not waits or ins.file is None:
            continue
        after = step(kernel, before, ins)
        for counter, count in waits.items():
            yield ins, counter, count, before, after


def _lines(kernel: Kernel, ops) -> set[Line]:
    return {(kernel.instrs[i].file, kernel.instrs[i].line) for i in ops if kernel.instrs[i].file}


def gaps(kernel: Kernel, table: dict[Key, frozenset[Line]]) -> list[Gap]:
    """Every ISA wait matched to an IR wait by (file, line, counter, count) that may leave
    outstanding an instruction from a line the IR wait retires."""
    found: dict[tuple[int, int], Gap] = {}
    for ins, counter, count, _before, after in _waits(kernel):
        meant = table.get((ins.file, ins.line, counter, count))
        if not meant:
            continue
        for op in sorted(after.get(counter, {})):
            o = kernel.instrs[op]
            if (o.file, o.line) in meant and (ins.index, op) not in found:
                found[(ins.index, op)] = Gap(ins, o, counter, count, after[counter][op])
    return list(found.values())


_STAGE = re.compile(r"^(\d+)_(.*)\.mlir$")


def pick_stage(names: list[str]) -> str | None:
    """The dump stage holding the IR the sanitizer sees: the one right after
    `convert_fly_to_rocdl` (FlyDSL's canonicalize), or None."""
    stages = sorted((int(m.group(1)), m.group(2), n) for n in names if (m := _STAGE.match(n)))
    for i, (_, stage, _) in enumerate(stages[:-1]):
        if stage == "convert_fly_to_rocdl":
            return stages[i + 1][2]
    return None


def kernel_intent(ir_text: str, kernel: str) -> dict[Key, frozenset[Line]]:
    """The intent table of `kernel` in an IR dump (MLIR text)."""
    from flydsl._mlir import ir
    from flydsl.compiler import jit_function

    from ldssan.passes.ir.irview import view_module

    with jit_function._create_mlir_context():
        try:
            module = ir.Module.parse(ir_text)
        except ir.MLIRError as exc:
            raise IntentUnavailable(f"the IR dump of {kernel} does not parse: {str(exc).splitlines()[0]}") from exc
        view = view_module(module)
    fn = view.functions.get(kernel)
    if fn is None or not fn.is_kernel:
        raise IntentUnavailable(f"the IR has no kernel function {kernel!r}")
    return intent_table(flatten(kernel, fn.body))
