"""Which ops of a lockstep translation run natively: the planner the translator asks per block.

A native run is a maximal sequence of consecutive ops of one block that `cops` compiles and
whose results vary by lane (uniform ops are numpy scalars: nothing to gain). Pure uniform
ops between them that use none of the run's values are written before the run, so index
arithmetic on the loop counter does not cut a run in two. Anything else (memory, hooks,
scheduling points, regions) ends the run. A run of fewer than `MIN_OPS` ops stays Python.

The translator writes, for a run:

    t5 = R.native(NR0, L, (v45, v39))
    if t5 is None:          # inputs not as expected, or no compiler: the ops' Python lines
        v46 = (v45 * v45)
        v47 = (v39 + v46)
    else:
        (v47,) = t5

so a run never changes what the kernel computes, only how fast (tests/emu/test_native.py).
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Block, Op
from .cops import CEMIT, PRELUDE, COp, elem_of, width_of
from .runs import NativeRun, Slot

MIN_OPS = 2
MAX_WIDTH = 64  # elements per lane of a value a run holds (C arrays on the stack)


def use_counts(blocks: list[Block]) -> dict[int, int]:
    """How many operands of ops in `blocks` (nested regions included) name each value."""
    counts: dict[int, int] = {}
    stack = list(blocks)
    while stack:
        blk = stack.pop()
        for op in blk.ops:
            for v in op.operands:
                counts[v] = counts.get(v, 0) + 1
            for region in op.regions:
                stack.extend(region)
    return counts


def _literal(value: int, t) -> str | None:
    e = elem_of(t)
    if e is None or e.kind not in ("int", "bool"):
        return None
    bits = 1 if e.kind == "bool" else e.bits
    u = value & ((1 << bits) - 1)
    return f"(({e.c})({e.unsigned if e.kind == 'int' else 'uint8_t'}){u}ull)"


class Planner:
    """Native runs of one translation: their C (one module) and the Python that calls them."""

    def __init__(self, t, blocks: list[Block]):
        self.t = t
        self.uses = use_counts(blocks)
        self.runs: list[NativeRun] = []
        self.c_funcs: list[str] = []
        self.compiled_ops = 0
        self.python_ops = 0

    # -- which ops -------------------------------------------------------------------------------
    def c_lines(self, op: Op) -> list[str] | None:
        """The op's C for one lane, or None when it is not compiled here."""
        t = self.t
        emit = CEMIT.get(op.name)
        if emit is None or op.regions or len(op.results) != 1 or t.uniform(op.results[0]):
            return None
        rtype = op.result_types[0]
        elem = elem_of(rtype)
        types = list(op.operand_types)
        if elem is None or elem.dtype != rtype.scalar.dtype or len(types) != len(op.operands):
            return None
        if width_of(rtype) > MAX_WIDTH:
            return None
        args, arrays, elems, widths = [], [], [], []
        for v, ty in zip(op.operands, types):
            e = elem_of(ty)
            if e is None or e.dtype != ty.scalar.dtype or width_of(ty) > MAX_WIDTH:
                return None
            lit = self.literal(v, ty)
            if lit is not None:
                args.append(lambda j, lit=lit: lit)
                arrays.append(None)
            elif width_of(ty) == 1:
                args.append(lambda j, v=v: f"v{v}[0]")
                arrays.append(f"v{v}")
            else:
                args.append(lambda j, v=v: f"v{v}[{j}]")
                arrays.append(f"v{v}")
            elems.append(e)
            widths.append(width_of(ty))
        return emit(COp(op, args, arrays, elems, widths, f"v{op.results[0]}", elem, width_of(rtype)))

    def literal(self, v: int, ty) -> str | None:
        """The C literal operand `v` (of type `ty` at this use) is written as: a uniform
        integer constant of a scalar type; else None (read from its array)."""
        t = self.t
        if v not in t.consts or not t.uniform(v) or ty.kind == "vector":
            return None
        return _literal(t.consts[v], ty)

    def _hoistable(self, op: Op, defined: set[int]) -> bool:
        """A pure uniform op that uses no value of the pending run: written before it."""
        t = self.t
        return (op.name in CEMIT or op.name in ("arith.constant", "llvm.mlir.constant")) and not op.regions \
            and all(t.uniform(r) for r in op.results) and not defined.intersection(op.operands)

    # -- the block ---------------------------------------------------------------------------------
    def block(self, ops: list[Op]) -> None:
        pending: list[tuple[Op, list[str]]] = []
        defined: set[int] = set()
        for op in ops:
            lines = self.c_lines(op)
            if lines is not None:
                pending.append((op, lines))
                defined.update(op.results)
                continue
            if pending and self._hoistable(op, defined):
                self.t.op(op)
                continue
            self._flush(pending)
            pending, defined = [], set()
            self.t.op(op)
        self._flush(pending)

    def _flush(self, pending: list[tuple[Op, list[str]]]) -> None:
        t = self.t
        if len(pending) < MIN_OPS:
            for op, _ in pending:
                t.op(op)
            self.python_ops += len(pending)
            return
        ops = [op for op, _ in pending]
        defined = {r for op in ops for r in op.results}
        inputs: list[tuple[int, object]] = []
        seen: set[int] = set()
        inner: dict[int, int] = {}
        for op in ops:
            for v, ty in zip(op.operands, op.operand_types):
                inner[v] = inner.get(v, 0) + 1
                if v not in defined and v not in seen and self.literal(v, ty) is None:
                    seen.add(v)
                    inputs.append((v, ty))
        outputs = [(r, ty) for op in ops for r, ty in zip(op.results, op.result_types)
                   if self.uses.get(r, 0) > inner.get(r, 0)]
        k = len(self.runs)
        run = NativeRun(f"NR{k}", tuple(Slot(elem_of(ty).dtype, width_of(ty), not t.uniform(v)) for v, ty in inputs),
                        tuple(Slot(elem_of(ty).dtype, width_of(ty)) for _, ty in outputs), tuple(op.name for op in ops))
        self.runs.append(run)
        self.c_funcs.append(self._c_function(run, inputs, outputs, pending))
        self.compiled_ops += len(ops)
        name = t.tmp("n")
        t.natives[run.name] = run
        prev, t.cur_op = t.cur_op, ops[0]
        ins = "".join(f"{t.v(v)}, " for v, _ in inputs)
        t.out(f"{name} = R.native({run.name}, L, ({ins}))")
        t.out(f"if {name} is None:")
        t.cur_op = prev
        with t.indented():
            for op in ops:
                t.op(op)
        t.out("else:")
        with t.indented():
            t.out(f"({''.join(f'{t.v(r)}, ' for r, _ in outputs)}) = {name}" if outputs else "pass")

    def _c_function(self, run: NativeRun, inputs, outputs, pending) -> str:
        head, body = [], []
        for k, ((v, ty), slot) in enumerate(zip(inputs, run.inputs)):
            e, w = elem_of(ty), width_of(ty)
            if slot.varying:
                head.append(f"const {e.c} *restrict i{k} = (const {e.c} *)P[{k}];")
                body.append(f"{e.c} v{v}[{w}]; for (int j = 0; j < {w}; j++) v{v}[j] = i{k}[l * {w} + j];")
            else:  # one value for every lane: read before the loop
                head.append(f"{e.c} v{v}[{w}]; __builtin_memcpy(v{v}, P[{k}], {e.bits // 8 * w});")
        for op, lines in pending:
            ty = op.result_types[0]
            body.append(f"{elem_of(ty).c} v{op.results[0]}[{width_of(ty)}];")
            body.extend(lines)
        n = len(inputs)
        for k, (r, ty) in enumerate(outputs):
            e, w = elem_of(ty), width_of(ty)
            head.append(f"{e.c} *restrict o{k} = ({e.c} *)P[{n + k}];")
            body.append(f"for (int j = 0; j < {w}; j++) o{k}[l * {w} + j] = v{r}[j];")
        return (f"void {run.name}(int64_t L, char **P) {{\n  " + "\n  ".join(head) + "\n"
                f"  for (int64_t l = 0; l < L; l++) {{\n    " + "\n    ".join(body) + "\n  }\n}\n")

    def source(self) -> str:
        return PRELUDE + "\n" + "\n".join(self.c_funcs)
