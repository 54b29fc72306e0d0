"""rocdl dialect: gfx1250 ids, cross-lane ops, buffer resources, barriers and waits.

Barriers and counter waits become `yield` events for the scheduler:
`('signal', id, mask)`, `('wait', id)`, `('barrier', id, mask)` (signal + wait),
`('waitcnt', counter, n)`, `('asyncmark',)`, `('wait_asyncmark', n)`.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op
from . import emits
from .arith import _dtype_expr, lane_vector
from .llvm import _count


def _id(field: str, dim: int):
    def emit(t, op: Op) -> None:
        dt = _dtype_expr(op.result_types[0])
        t.out(f"{t.v(op.results[0])} = ctx.{field}[{dim}].astype({dt})")

    return emit


for _d, _c in enumerate("xyz"):
    emits(f"rocdl.workitem.id.{_c}")(_id("tid", _d))
    emits(f"rocdl.workgroup.id.{_c}")(_id("bid", _d))
    emits(f"rocdl.workgroup.dim.{_c}")(_id("bdim", _d))


@emits("rocdl.wave.id")
def wave_id(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = np.int32(ctx.wave)")


@emits("rocdl.readfirstlane")
def readfirstlane(t, op: Op) -> None:
    src, res = op.operands[0], op.results[0]
    if t.uniform(src):
        t.out(f"{t.v(res)} = {t.v(src)}")
    elif t.uniform(res):
        t.out(f"{t.v(res)} = R.readfirstlane(ctx, {t.v(src)}, {t.mask})")
    else:  # batched workgroups: one first lane per group
        t.out(f"{t.v(res)} = R.readfirstlane_groups(ctx, {t.v(src)}, {t.mask})")


@emits("rocdl.readlane")
def readlane(t, op: Op) -> None:
    src, lane = op.operands
    res = op.results[0]
    if t.uniform(src):
        t.out(f"{t.v(res)} = {t.v(src)}")
    else:
        t.out(f"{t.v(res)} = R.readlane_groups(ctx, {t.v(src)}, {t.v(lane)}, {t.uniform(res)})")


@emits("rocdl.ballot")
def ballot(t, op: Op) -> None:
    dt = _dtype_expr(op.result_types[0])
    t.out(f"{t.v(op.results[0])} = R.ballot(ctx, {t.v(op.operands[0])}, {t.mask}, {dt}, "
          f"{t.uniform(op.results[0])})")


@emits("rocdl.mbcnt.lo", "rocdl.mbcnt.hi")
def mbcnt(t, op: Op) -> None:
    bits, acc = (t.v(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = R.mbcnt(ctx, {bits}, {acc}, {op.name.endswith('hi')})")


@emits("rocdl.ds_bpermute")
def ds_bpermute(t, op: Op) -> None:
    index, src = op.operands
    t.out(f"{t.v(op.results[0])} = R.bpermute(ctx, {t.lanes(index)}, {t.lanes(src)})")


@emits("rocdl.make.buffer.rsrc")
def make_rsrc(t, op: Op) -> None:
    # per-lane under batching (one row per workgroup): the fields are then (L,) arrays
    base, stride, nrec, flags = (t.v(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = R.make_rsrc({base}, {stride}, {nrec}, {flags})")


@emits("rocdl.raw.ptr.buffer.load")
def buffer_load(t, op: Op) -> None:
    rsrc, voff, soff = op.operands[:3]
    rt = op.result_types[0]
    dt, n = _count(rt)
    raw = f"R.buffer_load(ctx, {t.v(rsrc)}, {t.v(voff)}, {t.v(soff)}, {dt}, {n}, {t.mask})"
    expr = raw if lane_vector(rt) else f"{raw}[:, 0]"
    if t.uniform(op.results[0]):
        expr = f"{raw}[0]" if lane_vector(rt) else f"{raw}[0, 0]"
    t.out(f"{t.v(op.results[0])} = {expr}")


@emits("rocdl.raw.ptr.buffer.store")
def buffer_store(t, op: Op) -> None:
    data, rsrc, voff, soff = op.operands[:4]
    t.out(f"R.buffer_store(ctx, {t.lanes(data)}, {t.v(rsrc)}, {t.v(voff)}, {t.v(soff)}, {t.mask})")


# ----------------------------------------------------------------------------- barriers


@emits("rocdl.s.barrier.signal")
def barrier_signal(t, op: Op) -> None:
    t.mark_yield()
    t.out(f"yield ('signal', {int(op.attr('id'))}, {t.mask})")


@emits("rocdl.s.barrier.wait")
def barrier_wait(t, op: Op) -> None:
    t.mark_yield()
    t.out(f"yield ('wait', {int(op.attr('id'))})")


@emits("rocdl.s.barrier", "rocdl.barrier")
def barrier(t, op: Op) -> None:
    t.mark_yield()
    t.out(f"yield ('barrier', -1, {t.mask})")


_COUNTERS = {
    "rocdl.s.wait.dscnt": "ds", "rocdl.s.wait.loadcnt": "load", "rocdl.s.wait.storecnt": "store",
    "rocdl.s.wait.asynccnt": "async", "rocdl.s.wait.tensorcnt": "tensor",
    "rocdl.s.wait.expcnt": "exp", "rocdl.s.wait.kmcnt": "km",
}


@emits(*_COUNTERS)
def wait_counter(t, op: Op) -> None:
    t.mark_yield()
    t.out(f"yield ('waitcnt', {_COUNTERS[op.name]!r}, {int(op.attr('count'))})")


@emits("rocdl.asyncmark")
def asyncmark(t, op: Op) -> None:
    t.out("ctx.asyncmark()")


@emits("rocdl.wait.asyncmark")
def wait_asyncmark(t, op: Op) -> None:
    t.mark_yield()
    t.out(f"yield ('wait_asyncmark', {int(op.attr('count'))})")
