"""Uniform `scf.for` loops compiled whole into a native run.

A loop with a uniform trip count whose body is all lane-wise ops the planner compiles (buffer
loads included, no store, no nested region) runs lane after lane: each lane runs every
iteration with its loop-carried values in registers, instead of one C call, one Python
iteration and one set of per-lane arrays per iteration. That order is the interpreter's
whenever lanes cannot see each other, which holds because the body only reads memory that
nothing in the run writes (the one store a run may end with writes another tensor:
`runs.call` checks). Uniform ops of the body (loop-counter arithmetic) are computed per lane
too, in C: the emitters are the same for a scalar.

The translator writes, for a loop:

    p7 = ctx.trip_params(v17, v16, v15)   # [lb, step, trips], or None: the Python loop runs
    n3 = R.native(NR1, ctx, (v27, ..., v39, p7))
    if n3 is None:
        <the Python loop>                  # charges the budget and the op count itself
    else:
        (v37,) = n3
        ctx.charge_loop(p7, 8)             # what the Python loop would have charged
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op
from .compiled import MAX_WIDTH, Compiled, In, OpCompiler, declare
from .cops import I64, elem_of, width_of

_CONSTANTS = ("arith.constant", "llvm.mlir.constant")
_TERMINATORS = ("scf.yield", "scf.condition")


def compile_loop(p: OpCompiler, op: Op) -> Compiled | None:
    """The C of a whole uniform `scf.for` for one lane, or None (the loop stays Python; its
    body's ops can still form runs of their own)."""
    t = p.t
    lb, ub, step, *inits = op.operands
    if len(op.regions) != 1 or len(op.regions[0]) != 1 or not all(t.uniform(v) for v in (lb, ub, step)):
        return None
    body = op.regions[0][0]
    iv, *iargs = body.args
    if len(iargs) != len(op.results) or any(t.uniform(v) for v in (*iargs, *op.results)):
        return None
    carried = list(zip(iargs, body.arg_types[1:]))
    if any(elem_of(ty) is None or width_of(ty) > MAX_WIDTH for _, ty in carried):
        return None
    iv_elem = elem_of(body.arg_types[0])
    if iv_elem is None or iv_elem.kind != "int" or width_of(body.arg_types[0]) != 1:
        return None
    ops = list(body.ops)
    y = ops.pop() if ops and ops[-1].name == "scf.yield" else None
    if (y is None and iargs) or (y is not None and len(y.operands) != len(iargs)):
        return None

    made = {f"v{iv}", *(f"v{a}" for a in iargs)}
    ins: list[In] = []
    windows, reads, before, inner = [], list(op.operands), [], []
    size, stores = 1, 0
    for o in ops:
        if o.name in _CONSTANTS and not o.regions:
            before.append(o)  # loop-invariant: written before the run, read as an input
            continue
        got = p.compile(o, lanewise=True)
        if got is None or got.before:
            return None
        stores += got.stores
        ins.extend(got.ins)
        windows.extend(got.windows)
        reads.extend(got.reads)
        size += got.size
        inner.extend(declare(o.results, o.result_types) + got.lines)
        made.update(f"v{r}" for r in o.results)

    def source(v: int, ty) -> str | None:
        """The C array holding value `v` inside the loop (an outer one becomes an input)."""
        if f"v{v}" in made:
            return f"v{v}"
        vin = p.value_in(v, ty)
        if vin is None:
            return None
        ins.append(vin)
        return vin.cname

    init_src = [source(v, ty) for v, (_, ty) in zip(inits, carried)]
    yield_src = [source(v, ty) for v, (_, ty) in zip(y.operands if y else (), carried)]
    if None in init_src or None in yield_src:
        return None
    if y is not None:
        reads.extend(y.operands)

    params = t.tmp("p")
    lp = f"lp{iv}"
    ins.append(In(params, lp, I64, 3, False))
    k, n, lo, st = f"k{iv}", f"n{iv}", f"lb{iv}", f"st{iv}"
    body_ops = sum(1 for o in body.ops if o.name not in _TERMINATORS)
    charge = dict(before=before + [f"{params} = ctx.trip_params({t.v(lb)}, {t.v(ub)}, {t.v(step)})"],
                  after=[f"ctx.charge_loop({params}, {body_ops})"], size=size, reads=reads)
    if stores:
        # iterations outside the lanes, as the interpreter runs them: one store per iteration
        # (two could write one byte from two lanes in another order), nothing carried
        if stores > 1 or iargs:
            return None
        head = [f"const int64_t {lo} = {lp}[0], {st} = {lp}[1], {n} = {lp}[2];",
                f"for (int64_t {k} = 0; {k} < {n}; {k}++) {{",
                f"{iv_elem.c} v{iv}[1]; v{iv}[0] = ({iv_elem.c})({lo} + {k} * {st});"]
        return Compiled(op, inner, [i for i in ins if i.cname not in made], windows,
                        iterations=(head, "}"), **charge)
    lines = [f"{{ const int64_t {lo} = {lp}[0], {st} = {lp}[1], {n} = {lp}[2];"]
    for (a, ty), src in zip(carried, init_src):
        lines.append(f"  {elem_of(ty).c} v{a}[{width_of(ty)}]; __builtin_memcpy(v{a}, {src}, sizeof v{a});")
    lines.append(f"  for (int64_t {k} = 0; {k} < {n}; {k}++) {{")
    lines.append(f"    {iv_elem.c} v{iv}[1]; v{iv}[0] = ({iv_elem.c})({lo} + {k} * {st});")
    lines.extend("    " + ln for ln in inner)
    # the yielded values may be each other's iter args: read them all, then assign
    for (a, ty), src in zip(carried, yield_src):
        lines.append(f"    {elem_of(ty).c} y{a}[{width_of(ty)}]; __builtin_memcpy(y{a}, {src}, sizeof y{a});")
    for a, _ in carried:
        lines.append(f"    __builtin_memcpy(v{a}, y{a}, sizeof v{a});")
    lines.append("  }")
    for r, (a, _) in zip(op.results, carried):
        lines.append(f"  __builtin_memcpy(v{r}, v{a}, sizeof v{r});")
    lines.append("}")
    return Compiled(op, lines, [i for i in ins if i.cname not in made], windows, **charge)
