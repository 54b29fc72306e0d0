"""Which ops of a lockstep translation run natively: the planner the translator asks per block.

A native run is a maximal sequence of consecutive ops of one block that `cops` compiles and
whose results vary by lane (uniform ops are numpy scalars: nothing to gain), buffer loads
included (`_buffer_load`). Pure uniform ops between them that use none of the run's values
are written before the run, so index arithmetic on the loop counter does not cut a run in
two. Anything else (stores, hooks, scheduling points, regions) ends the run. A run of fewer
than `MIN_OPS` ops stays Python.

The translator writes, for a run:

    t5 = R.native(NR0, ctx, (v45, v39))
    if t5 is None:          # inputs not as expected, or no compiler: the ops' Python lines
        v46 = (v45 * v45)
        v47 = (v39 + v46)
    else:
        (v47,) = t5

so a run never changes what the kernel computes, only how fast (tests/emu/test_native.py).
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Block, Op
from .compiled import AT, MAX_WIDTH, TOKEN, Compiled, In, Window, declare, window_token
from .crosslane import compile_shuffle
from .cops import BOOL, CEMIT, I64, PRELUDE, COp, elem_of, width_of
from .loops import compile_loop
from .runs import NativeRun, Slot

MIN_OPS = 2
_CONSTANTS = ("arith.constant", "llvm.mlir.constant")


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
        # lane-wise ops (and ops without results) the planner left to Python, by name: what
        # cuts the runs (the launch record lists the most frequent)
        self.interpreted: dict[str, int] = {}

    # -- which ops -------------------------------------------------------------------------------
    def value_in(self, v: int, ty) -> In | None:
        e = elem_of(ty)
        if e is None or width_of(ty) > MAX_WIDTH:
            return None
        return In(self.t.v(v), f"v{v}", e, width_of(ty), not self.t.uniform(v))

    def compile(self, op: Op, lanewise: bool = False) -> Compiled | None:
        """The op's C for one lane, or None when it is not compiled here. `lanewise`: inside a
        loop compiled whole (`loops`), where uniform ops are computed per lane too."""
        t = self.t
        if op.name == "rocdl.raw.ptr.buffer.store" and not op.results and not op.regions:
            return self._buffer_store(op)
        if op.name == "scf.for" and not lanewise:
            return compile_loop(self, op)
        if op.name == "gpu.shuffle":  # other lanes' values: not inside a loop run lane by lane
            return None if lanewise else compile_shuffle(self, op)
        if op.regions or len(op.results) != 1 or (t.uniform(op.results[0]) and not lanewise):
            return None
        if op.name == "rocdl.raw.ptr.buffer.load":
            return self._buffer_load(op)
        emit = CEMIT.get(op.name)
        rtype = op.result_types[0]
        elem = elem_of(rtype)
        types = list(op.operand_types)
        if emit is None or elem is None or len(types) != len(op.operands) or width_of(rtype) > MAX_WIDTH:
            return None
        args, arrays, elems, widths, ins = [], [], [], [], []
        for v, ty in zip(op.operands, types):
            lit = self.literal(v, ty)
            vin = None if lit is not None else self.value_in(v, ty)
            if lit is None and vin is None:
                return None
            if lit is not None:
                args.append(lambda j, lit=lit: lit)
                arrays.append(None)
            else:
                ins.append(vin)
                arrays.append(vin.cname)
                args.append((lambda j, c=vin.cname: f"{c}[0]") if vin.width == 1 else
                            (lambda j, c=vin.cname: f"{c}[{j}]"))
            elems.append(elem_of(ty))
            widths.append(width_of(ty))
        # a literal's value; a splat vector's one value (read from its array all the same)
        lits = [t.consts.get(v) if a is None else t.splats.get(v) for v, a in zip(op.operands, arrays)]
        lines = emit(COp(op, args, arrays, elems, widths, f"v{op.results[0]}", elem, width_of(rtype), lits))
        return None if lines is None else Compiled(op, lines, ins)

    def _buffer_load(self, op: Op) -> Compiled | None:
        """rocdl.raw.ptr.buffer.load (R.buffer_load): active lanes whose bytes lie within
        num_records read them, the others read 0. The call finds the one tensor holding every
        lane's base and passes its bounds; a lane that would read outside it makes the C
        return 1, and the run's Python lines run instead (kernels often set num_records to
        2^32 - 1, past their tensor). In a run that stores, the call asks for every lane's
        whole window inside the tensor instead (`runs._window`): the C never stops there."""
        rtype = op.result_types[0]
        elem = elem_of(rtype)
        if elem is None or width_of(rtype) > MAX_WIDTH or len(op.operands) < 3:
            return None
        got = self._descriptor(op, 0)
        if got is None:
            return None
        ins, test, where = got
        nb = elem.bits // 8 * width_of(rtype)
        res = f"v{op.results[0]}"
        win = (ins[2].cname, ins[3].cname, False)
        w = window_token(win)
        lines = [f"{{ {test.format(nb=nb)}",
                 f"  if (in && ({where} < D[5 * {w} + 3] || {where} + {nb} > D[5 * {w} + 4])) return 1;",
                 f"  if (in) __builtin_memcpy({res}, (const char *)(uintptr_t)(D[5 * {w}] + {where}), {nb});",
                 f"  else __builtin_memset({res}, 0, {nb}); }}"]
        return Compiled(op, lines, ins, [win])

    def _buffer_store(self, op: Op) -> Compiled | None:
        """rocdl.raw.ptr.buffer.store (R.buffer_store): active lanes within num_records write,
        the others nothing; while the launch tracks memory the written bytes are marked."""
        if len(op.operands) < 4:
            return None
        data = self.value_in(op.operands[0], op.operand_types[0])
        got = self._descriptor(op, 1)
        if data is None or got is None:
            return None
        ins, test, where = got
        nb = data.elem.bits // 8 * data.width
        win = (ins[2].cname, ins[3].cname, True)
        w = window_token(win)
        # an address outside the tensor returns 1 (only a dry run can meet one: runs.call);
        # a dry run (DRY_) checks and stores nothing
        lines = [f"{{ {test.format(nb=nb)}",
                 "  if (in) {",
                 f"    if ({where} < D[5 * {w} + 3] || {where} + {nb} > D[5 * {w} + 4]) return 1;",
                 "    if (!DRY_) {",
                 f"      __builtin_memcpy((char *)(uintptr_t)(D[5 * {w}] + {where}), {data.cname}, {nb});",
                 f"      if (D[5 * {w} + 1]) __builtin_memset((char *)(uintptr_t)(D[5 * {w} + 2] + {where}), 1, {nb});",
                 "  } } }"]
        return Compiled(op, lines, [data] + ins, [win])

    def _descriptor(self, op: Op, at: int):
        """The inputs of a buffer access whose descriptor, voffset and soffset are operands
        at, at+1, at+2: ([voffset, soffset, base, num_records, exec mask], the C that sets
        `in` for an access of {nb} bytes, the C of the lane's device address), or None."""
        t = self.t
        rsrc, voff, soff = op.operands[at:at + 3]
        offs = [self.value_in(voff, op.operand_types[at + 1]), self.value_in(soff, op.operand_types[at + 2])]
        if any(i is None or i.elem.kind != "int" or i.width != 1 for i in offs):
            return None
        r = t.v(rsrc)
        base, nrec = In(f"{r}[0]", f"rb{rsrc}", I64, 1, None), In(f"{r}[2]", f"rn{rsrc}", I64, 1, None)
        mask = self.mask_in()
        test = (f"int64_t off = (int64_t){offs[0].cname}[0] + (int64_t){offs[1].cname}[0]; "
                f"int in = {mask.cname}[0] && off >= 0 && off + {{nb}} <= {nrec.cname}[0];")
        return offs + [base, nrec, mask], test, f"{base.cname}[0] + off"

    def mask_in(self) -> In:
        """The exec mask where the op runs, read per lane."""
        return In(self.t.mask, f"mk_{self.t.mask}", BOOL, 1, True)

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
        return (op.name in CEMIT or op.name in _CONSTANTS) and not op.regions \
            and all(t.uniform(r) for r in op.results) and not defined.intersection(op.operands)

    # -- the block ---------------------------------------------------------------------------------
    def block(self, ops: list[Op]) -> None:
        pending: list[Compiled] = []
        defined: set[int] = set()
        for op in ops:
            got = self.compile(op)
            if got is not None and got.iterations is not None:
                self._flush(pending)
                self._flush([got])
                pending, defined = [], set()
                continue
            if got is not None and got.stores:
                # C runs lane after lane, the interpreter op after op: a run ends at its one
                # store, and its loads must read other tensors than the store writes
                # (`runs.call` checks, else the Python lines run)
                self._flush(pending + [got])
                pending, defined = [], set()
                continue
            if got is not None:
                pending.append(got)
                defined.update(op.results)
                continue
            if pending and self._hoistable(op, defined):
                self.t.op(op)
                continue
            self._flush(pending)
            pending, defined = [], set()
            if not op.regions and (not op.results or not all(self.t.uniform(r) for r in op.results)):
                self.interpreted[op.name] = self.interpreted.get(op.name, 0) + 1
            self.t.op(op)
        self._flush(pending)

    def _flush(self, pending: list[Compiled]) -> None:
        t = self.t
        size = sum(c.size for c in pending)
        if size < MIN_OPS:
            for c in pending:
                t.op(c.op)
            self.python_ops += size
            return
        ops = [c.op for c in pending]
        made = {f"v{r}" for op in ops for r in op.results}
        inputs: dict[str, In] = {}
        for c in pending:
            for i in c.ins:
                if i.cname not in made:
                    inputs.setdefault(i.cname, i)
        inner: dict[int, int] = {}
        for c in pending:
            for v in c.reads:
                inner[v] = inner.get(v, 0) + 1
        stages, stage_of, crossing = _stages(pending)
        outputs = [(r, ty) for op in ops for r, ty in zip(op.results, op.result_types)
                   if self.uses.get(r, 0) > inner.get(r, 0) or f"v{r}" in crossing]
        names = list(inputs)
        windows: dict[Window, int] = {}  # each descriptor's window, numbered
        for c in pending:
            for w in c.windows:
                windows.setdefault(w, len(windows))
        run = NativeRun(f"NR{len(self.runs)}", tuple(i.slot for i in inputs.values()),
                        tuple(Slot(elem_of(ty).dtype, width_of(ty)) for _, ty in outputs),
                        tuple(op.name for op in ops),
                        windows=tuple((names.index(b), names.index(r), st) for b, r, st in windows))
        self.runs.append(run)
        self.c_funcs.append(self._c_function(run, list(inputs.values()), outputs, stages, stage_of, windows))
        self.compiled_ops += size
        name = t.tmp("n")
        t.natives[run.name] = run
        prev, t.cur_op = t.cur_op, ops[0]
        for c in pending:
            for x in c.before:  # a loop's constants (ops) and its trip parameters (Python)
                t.op(x) if isinstance(x, Op) else t.out(x)
        t.out(f"{name} = R.native({run.name}, ctx, ({''.join(f'{i.expr}, ' for i in inputs.values())}))")
        t.out(f"if {name} is None:")
        t.cur_op = prev
        with t.indented():
            for op in ops:
                t.op(op)
        t.out("else:")
        with t.indented():
            t.out(f"({''.join(f'{t.v(r)}, ' for r, _ in outputs)}) = {name}" if outputs else "pass")
            for c in pending:
                for ln in c.after:
                    t.out(ln)

    @staticmethod
    def _c_function(run: NativeRun, inputs: list[In], outputs, stages: list[list[Compiled]],
                    stage_of: dict[str, int], windows: dict[Window, int]) -> str:
        head, lane_in = [], []
        at: dict[str, tuple[str, str]] = {}  # C name -> (its lanes' array, elements per lane)
        for k, i in enumerate(inputs):
            e, w, c = i.elem, i.width, i.cname
            if i.varying is False:  # one value for every lane: read before the loop
                head.append(f"{e.c} {c}[{w}]; __builtin_memcpy({c}, P[{k}], {e.bits // 8 * w});")
                at[c] = (c, "0")
            elif i.varying is None:  # either: its lane stride (0: one value) is in S
                head.append(f"const {e.c} *restrict i{k} = (const {e.c} *)P[{k}]; const int64_t s{k} = S[{k}];")
                lane_in.append(f"{e.c} {c}[{w}]; for (int j = 0; j < {w}; j++) {c}[j] = i{k}[l * s{k} + j];")
                at[c] = (f"i{k}", f"s{k}")
            else:
                head.append(f"const {e.c} *restrict i{k} = (const {e.c} *)P[{k}];")
                lane_in.append(f"{e.c} {c}[{w}]; for (int j = 0; j < {w}; j++) {c}[j] = i{k}[l * {w} + j];")
                at[c] = (f"i{k}", str(w))
        n = len(inputs)
        for k, (r, ty) in enumerate(outputs):
            e, w = elem_of(ty), width_of(ty)
            head.append(f"{e.c} *restrict o{k} = ({e.c} *)P[{n + k}];")
            at[f"v{r}"] = (f"o{k}", str(w))
        # per window: host minus device address, tracking?, mask minus device address, and the
        # tensor's device bounds (a load outside them returns 1: the Python lines then run)
        if run.windows:
            # a local copy: the stores (through char *) cannot change it, so it stays in registers
            head.append(f"int64_t D[{5 * len(run.windows)}]; __builtin_memcpy(D, P[{n + len(outputs)}], sizeof D);")
            head.append(f"const int64_t DRY_ = ((const int64_t *)P[{n + len(outputs)}])[{5 * len(run.windows)}];")
        if any(i.varying is None for i in inputs):
            head.insert(0, f"const int64_t *S = (const int64_t *)P[{n + len(outputs) + 1}];")
        number = {window_token(w): str(k) for w, k in windows.items()}

        def resolve(line: str) -> str:
            line = TOKEN.sub(lambda m: number[m.group(0)], line)
            return AT.sub(lambda m: f"({at[m.group(1)][0]} + ({m.group(2)}) * {at[m.group(1)][1]})", line)

        loops = []
        for s, items in enumerate(stages):
            body = list(lane_in)
            for k, (r, ty) in enumerate(outputs):  # what earlier stages made, this lane's
                if stage_of[f"v{r}"] < s:
                    w = width_of(ty)
                    body.append(f"{elem_of(ty).c} v{r}[{w}]; for (int j = 0; j < {w}; j++) v{r}[j] = o{k}[l * {w} + j];")
            for c in items:
                body.extend(declare(c.op.results, c.op.result_types))
                body.extend(resolve(ln) for ln in c.lines)
            for k, (r, ty) in enumerate(outputs):
                if stage_of[f"v{r}"] == s:
                    w = width_of(ty)
                    body.append(f"for (int j = 0; j < {w}; j++) o{k}[l * {w} + j] = v{r}[j];")
            loops.append("  for (int64_t l = 0; l < L; l++) {\n    " + "\n    ".join(body) + "\n  }\n")
        iterations = stages[0][0].iterations
        if iterations is not None:  # a loop that stores (alone in its run): its lanes inside its iterations
            opening, closing = iterations
            return (f"int {run.name}(int64_t L, char **P) {{\n  " + "\n  ".join(head + opening) + "\n"
                    + loops[0] + f"  {closing}\n  return 0;\n}}\n")
        return f"int {run.name}(int64_t L, char **P) {{\n  " + "\n  ".join(head) + "\n" + "".join(loops) + \
            "  return 0;\n}\n"

    def source(self) -> str:
        return PRELUDE + "\n" + "\n".join(self.c_funcs)


def _stages(pending: list[Compiled]):
    """The run's stages (a cross-lane op starts one), the stage making each value (by C
    name), and the values a later stage reads (they go through the run's output arrays)."""
    stages: list[list[Compiled]] = [[]]
    stage_of: dict[str, int] = {}
    crossing: set[str] = set()
    for c in pending:
        if c.cross and stages[-1]:
            stages.append([])
        s = len(stages) - 1
        for v in c.reads:
            if stage_of.get(f"v{v}", s) < s:
                crossing.add(f"v{v}")
        if c.source is not None and c.source in stage_of:
            crossing.add(c.source)
        stages[-1].append(c)
        stage_of.update((f"v{r}", s) for r in c.op.results)
    return stages, stage_of, crossing
