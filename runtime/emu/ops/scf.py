"""scf dialect: structured control flow under exec masks.

A uniform condition or trip count becomes plain Python control flow. A per-lane one runs
the region under a narrowed mask (`M<k>`) and merges results per lane; a side whose mask
is empty is skipped, like `s_cbranch_execz`. Loops with per-lane trip counts run until no
lane is left. Every loop form is charged to the step budget (`ctx.loop` for a uniform
count, `ctx.tick()` per iteration otherwise), so a runaway loop is an error, not a hang.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Block, Op
from ..events import SPIN
from . import emits


def _yield(blk: Block) -> Op | None:
    return blk.ops[-1] if blk.ops and blk.ops[-1].name in ("scf.yield", "scf.condition") else None


def _body(t, blk: Block) -> None:
    """Emit a block's ops except its terminator (handled by the parent)."""
    t.count_ops(blk)
    end = len(blk.ops) - 1 if _yield(blk) is not None else len(blk.ops)
    t.ops(blk.ops[:end])
    if not blk.ops or blk.ops[-1].name not in ("scf.yield", "scf.condition"):
        t.out("pass")


@emits("scf.yield", "scf.condition")
def terminator(t, op: Op) -> None:
    raise t.unsupported(op, "terminator outside its parent op")


def _assign_yields(t, blk: Block, targets: list[str], uniform: list[bool]) -> None:
    y = _yield(blk)
    for name, vid, uni in zip(targets, y.operands if y else (), uniform):
        t.out(f"{name} = {t.as_shape(vid, uni)}")
        t.taint_set(name, t.v(vid))


@emits("scf.if")
def scf_if(t, op: Op) -> None:
    cond = op.operands[0]
    then_blk = op.regions[0][0]
    else_blk = op.regions[1][0] if len(op.regions) > 1 and op.regions[1] else None
    res = [t.v(r) for r in op.results]
    uni = [t.uniform(r) for r in op.results]
    if t.uniform(cond):
        t.out(f"if {t.v(cond)}:")
        with t.indented():
            _body(t, then_blk)
            _assign_yields(t, then_blk, res, uni)
        if else_blk is not None:
            t.out("else:")
            with t.indented():
                _body(t, else_blk)
                _assign_yields(t, else_blk, res, uni)
        return
    outer = t.mask
    c = t.v(cond)
    m_then, m_else = t.tmp("M"), t.tmp("M")
    t_vals = [t.tmp() for _ in res]
    e_vals = [t.tmp() for _ in res]
    for name in t_vals + e_vals:
        t.out(f"{name} = None")
        t.taint_set(name)
    t.out(f"{m_then} = {t.narrowed(f'{outer} & {c}', outer)}")
    for m, blk, vals in ((m_then, then_blk, t_vals), (m_else, else_blk, e_vals)):
        if blk is None:
            continue
        if m == m_else:
            t.out(f"{m_else} = {t.narrowed(f'{outer} & ~{c}', outer)}")
        t.out(f"if {m}.any():")
        with t.indented():
            t.mask = m
            try:
                _body(t, blk)
                _assign_yields(t, blk, vals, [False] * len(vals))
            finally:
                t.mask = outer
    for r, tv, ev in zip(res, t_vals, e_vals):
        t.out(f"{r} = R.merge({c}, {tv}, {ev})")
        t.taint_set(r, tv, ev, c)


@emits("scf.for")
def scf_for(t, op: Op) -> None:
    lb, ub, step, *inits = op.operands
    body = op.regions[0][0]
    iv, *iter_args = body.args
    for a, ty in zip(body.args, body.arg_types):
        t.types[a] = ty
    uni = [t.uniform(a) for a in iter_args]
    for a, init, u in zip(iter_args, inits, uni):
        t.out(f"{t.v(a)} = {t.as_shape(init, u)}")
        t.taint_set(t.v(a), t.v(init))
    t.taint_set(t.v(iv))
    if t.uniform(lb) and t.uniform(ub) and t.uniform(step):
        ivname = t.tmp("i")
        # ctx.loop charges the trip count to the step budget (a huge count fails at once)
        t.out(f"for {ivname} in ctx.loop({t.v(lb)}, {t.v(ub)}, {t.v(step)}):")
        with t.indented():
            t.out(f"{t.v(iv)} = {t.v(lb)}.dtype.type({ivname})")
            _body(t, body)
            _assign_yields(t, body, [t.v(a) for a in iter_args], uni)
    else:
        _masked_for(t, op, iv, iter_args)
    for r, a in zip(op.results, iter_args):
        t.out(f"{t.v(r)} = {t.v(a)}")
        t.taint_set(t.v(r), t.v(a))


def _masked_for(t, op: Op, iv: int, iter_args: list[int]) -> None:
    lb, ub, step, *_ = op.operands
    body = op.regions[0][0]
    outer = t.mask
    m = t.tmp("M")
    t.out(f"{t.v(iv)} = {t.lanes(lb)}")
    t.out(f"{m} = {t.narrowed(f'{outer} & ({t.v(iv)} < {t.v(ub)})', outer)}")
    t.out(f"while {m}.any():")
    with t.indented():
        t.out("ctx.tick()")
        t.mask = m
        try:
            _body(t, body)
        finally:
            t.mask = outer
        y = _yield(body)
        for a, vid in zip(iter_args, y.operands if y else ()):
            t.out(f"{t.v(a)} = R.keep({m}, {t.as_shape(vid, False)}, {t.v(a)})")
            t.taint_set(t.v(a), t.v(a), t.v(vid))
        t.out(f"{t.v(iv)} = {t.v(iv)} + {t.v(step)}")
        t.out(f"{m} = {t.narrowed(f'{m} & ({t.v(iv)} < {t.v(ub)})', outer)}")


@emits("scf.while")
def scf_while(t, op: Op) -> None:
    before, after = op.regions[0][0], op.regions[1][0]
    for blk in (before, after):
        for a, ty in zip(blk.args, blk.arg_types):
            t.types[a] = ty
    cond_op = before.ops[-1]
    c, *fwd = cond_op.operands
    b_uni = [t.uniform(a) for a in before.args]
    for a, init, u in zip(before.args, op.operands, b_uni):
        t.out(f"{t.v(a)} = {t.as_shape(init, u)}")
        t.taint_set(t.v(a), t.v(init))
    res = [t.v(r) for r in op.results]
    outer = t.mask
    if t.uniform(c):
        t.out("while True:")
        with t.indented():
            t.out("ctx.tick()")
            t.yield_event(SPIN)  # lets other waves (and resident workgroups) progress
            _body(t, before)
            t.out(f"if not {t.v(c)}:")
            with t.indented():
                for r, f, rid in zip(res, fwd, op.results):
                    t.out(f"{r} = {t.as_shape(f, t.uniform(rid))}")
                    t.taint_set(r, t.v(f))
                t.out("break")
            for a, f in zip(after.args, fwd):
                t.out(f"{t.v(a)} = {t.as_shape(f, t.uniform(a))}")
                t.taint_set(t.v(a), t.v(f))
            _body(t, after)
            _assign_yields(t, after, [t.v(a) for a in before.args], b_uni)
        return
    m = t.tmp("M")
    for r in res:
        t.out(f"{r} = None")
        t.taint_set(r)
    t.out(f"{m} = {outer}")
    t.out("while True:")
    with t.indented():
        t.out("ctx.tick()")
        t.yield_event(SPIN)
        t.mask = m
        try:
            _body(t, before)
            leaving = t.tmp("M")
            t.out(f"{leaving} = {m} & ~{t.v(c)}")
            for r, f in zip(res, fwd):
                t.out(f"{r} = R.keep({leaving}, {t.as_shape(f, False)}, {r})")
                t.taint_set(r, r, t.v(f))
            t.out(f"{m} = {t.narrowed(f'{m} & {t.v(c)}', outer)}")
            t.out(f"if not {m}.any():")
            with t.indented():
                t.out("break")
            for a, f in zip(after.args, fwd):
                t.out(f"{t.v(a)} = {t.as_shape(f, False)}")
                t.taint_set(t.v(a), t.v(f))
            _body(t, after)
            y = _yield(after)
            for a, vid in zip(before.args, y.operands if y else ()):
                t.out(f"{t.v(a)} = {t.as_shape(vid, False)}")
                t.taint_set(t.v(a), t.v(vid))
        finally:
            t.mask = outer


@emits("scf.execute_region")
def execute_region(t, op: Op) -> None:
    blocks = op.regions[0]
    if len(blocks) != 1:
        raise t.unsupported(op, "multi-block region")
    _body(t, blocks[0])
    _assign_yields(t, blocks[0], [t.v(r) for r in op.results], [t.uniform(r) for r in op.results])
