"""rocdl dialect: gfx1250 ids (cluster ids too), cross-lane ops, buffer resources, barriers and waits.

Barriers and counter waits become `yield` events for the scheduler (events.py):
`Signal(id)` (under the exec mask), `Wait(id)`, `Barrier(id)` (signal + wait, gpu.py),
`WaitCount(counter, n)`, `WaitAsyncMark(n)`; `rocdl.asyncmark` only marks the wave.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op
from . import emits, one_line
from .arith import _dtype_expr, lane_vector
from .llvm import _count
from ..events import Signal, Wait, WaitAsyncMark, WaitCount
from ..rt.crosslane import dpp_control_name


def _id(field: str, dim: int):
    def emit(t, op: Op) -> None:
        dt = _dtype_expr(op.result_types[0])
        t.out(f"{t.v(op.results[0])} = ctx.{field}[{dim}].astype({dt})")

    return emit


for _d, _c in enumerate("xyz"):
    emits(f"rocdl.workitem.id.{_c}")(_id("tid", _d))
    emits(f"rocdl.workgroup.id.{_c}")(_id("bid", _d))
    emits(f"rocdl.workgroup.dim.{_c}")(_id("bdim", _d))


def _cluster_id(dim: int):
    # llvm.amdgcn.cluster.id.* (IntrinsicsAMDGPU.td): the cluster's id in the grid;
    # llvm.amdgcn.cluster.workgroup.id.*: the workgroup's id within its cluster (see
    # plan.py for the layout, and for launches without clusters).
    cluster, member = _id("cid", dim), _id("cwg", dim)

    def emit_cluster(t, op: Op) -> None:
        if t.batched and t.uniform(op.results[0]):  # one cluster id per batched workgroup
            raise t.unsupported(op, "under batch=N the cluster id differs across the batched workgroups; "
                                    "run this launch with batch=1")
        cluster(t, op)

    return emit_cluster, member


for _d, _c in enumerate("xyz"):
    _cl, _mem = _cluster_id(_d)
    emits(f"rocdl.cluster.id.{_c}")(_cl)
    emits(f"rocdl.cluster.workgroup.id.{_c}")(_mem)


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
    t.out(f"{t.v(op.results[0])} = R.bpermute(ctx, {t.lanes(index)}, {t.lanes(src)}, {t.mask})")


@emits("rocdl.update.dpp")
def update_dpp(t, op: Op) -> None:
    ctrl = int(op.attr("dppCtrl"))
    if dpp_control_name(ctrl) is None:
        raise t.unsupported(op, f"dpp_ctrl {ctrl:#x}: not a DPP16 control of gfx12 wave32 (the wave_shl/"
                                "rol/shr/ror and row_bcast controls are GFX9-only)")
    old, src = op.operands
    t.out(f"{t.v(op.results[0])} = R.dpp(ctx, {t.lanes(old)}, {t.lanes(src)}, {ctrl}, "
          f"{int(op.attr('rowMask'))}, {int(op.attr('bankMask'))}, {bool(op.attr('boundCtrl'))}, {t.mask})")


@emits("rocdl.ds_swizzle")
def ds_swizzle(t, op: Op) -> None:
    src, offset = op.operands
    if not t.uniform(offset):  # llvm.amdgcn.ds.swizzle takes the offset as an immediate
        raise t.unsupported(op, "a per-lane swizzle offset (the offset is an immediate of ds_swizzle_b32)")
    t.out(f"{t.v(op.results[0])} = R.swizzle(ctx, {t.lanes(src)}, {t.v(offset)}, {t.mask})")


@emits("rocdl.permlanex16", "rocdl.permlane16.var", "rocdl.permlanex16.var")
def permlane(t, op: Op) -> None:
    if op.name == "rocdl.permlanex16":
        old, src, lo, hi = op.operands
        sel = f"R.permlane_select(ctx, {t.v(lo)}, {t.v(hi)})"
    else:
        old, src, sel_v = op.operands
        sel = t.lanes(sel_v)
    res = op.results[0]
    expr = (f"R.permlane(ctx, {t.lanes(old)}, {t.lanes(src)}, {sel}, {bool(op.attr('fi'))}, "
            f"{bool(op.attr('boundControl'))}, {'x16' in op.name}, {t.mask})")
    if t.uniform(res):  # every operand uniform: the analysis keeps the result scalar
        expr = f"R.collapse_uniform(ctx, {expr}, {t.mask})"
    t.out(f"{t.v(res)} = {expr}")


@emits("rocdl.permlane16.swap", "rocdl.permlane32.swap")
def permlane_swap(t, op: Op) -> None:
    raise t.unsupported(op, "v_permlane16/32_swap exchange rows of a wave64 (gfx950); not modeled for "
                            "gfx1250 wave32")


@emits("rocdl.cvt.pk.fp8.f32", "rocdl.cvt.pk.bf8.f32")
def cvt_pk_f8(t, op: Op) -> None:
    # two f32 to fp8/bf8 into one 16-bit half of `old` (IntrinsicsAMDGPU.td cvt_pk_fp8_f32)
    word_sel = op.attr("wordSel")
    if word_sel is None or len(op.operands) != 3:
        raise t.unsupported(op, "expected srcA, srcB, old and a wordSel attribute")
    res = op.results[0]
    val = t.v if t.uniform(res) else t.lanes
    a, b, old = (val(x) for x in op.operands)
    t.out(f"{t.v(res)} = R.cvt_pk_f8({a}, {b}, {old}, {bool(word_sel)}, {op.name.split('.')[3]!r})")


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


@emits("rocdl.ds.load.tr16.b128")
def ds_load_tr16(t, op: Op) -> None:
    # each lane reads its 16 bytes (8 x b16) like a ds_load_b128; then, in every group of 8
    # lanes, lane 8g+i gets element i of lanes 8g..8g+7 (an 8x8 transpose per group)
    rt = op.result_types[0]
    dt, n = _count(rt)
    if n != 8 or rt.kind != "vector":
        raise t.unsupported(op, f"result type {rt}: ds_load_tr16_b128 returns 8 elements of 16 bits")
    ptr = t.lanes(op.operands[0])
    t.out(f"{t.v(op.results[0])} = R.transpose8(R.lds_load(ctx, {ptr}, {dt}, 8, {t.mask}), {t.mask})")


@emits("rocdl.raw.ptr.buffer.store")
def buffer_store(t, op: Op) -> None:
    data, rsrc, voff, soff = op.operands[:4]
    t.out(f"R.buffer_store(ctx, {t.lanes(data)}, {t.v(rsrc)}, {t.v(voff)}, {t.v(soff)}, {t.mask})")


# ----------------------------------------------------------------------------- barriers


_BARRIER_KINDS = {-2: "trap barrier", -3: "cluster barrier", -4: "cluster trap barrier", 0: "NULL named barrier"}
CLUSTER_BARRIER = -3


def _barrier_id(t, op: Op, *, cluster: bool = True) -> int:
    """The id of a split barrier op: the workgroup barrier (-1) and, in a cluster launch, the
    cluster user barrier (-3; AMDGPU execution-synchronization docs: expected count = the
    cluster's workgroups, one arriving wave per workgroup, any wave may wait; scheduled in
    sched.py). Trap barriers are privileged, named barriers are not modeled: refused rather
    than run as a workgroup barrier (different members, different phases)."""
    bid = int(op.attr("id"))
    if bid == -1 or (bid == CLUSTER_BARRIER and cluster):
        if bid == CLUSTER_BARRIER:  # the barrier object exists only in a cluster launch
            t.out("if ctx.cluster is None: raise NotImplementedError('barrier id -3 (cluster barrier) outside a "
                  "cluster launch: the cluster barrier object is initialized only when the workgroup is launched "
                  "in a cluster (launch(cluster=...))')")
        return bid
    kind = _BARRIER_KINDS.get(bid, "named barrier")
    modeled = "-1 and -3" if cluster else "-1"
    raise t.unsupported(op, f"barrier id {bid} ({kind}): named and trap barriers are not modeled; "
                            f"barriers {modeled} are: unsupported op, please report")


@emits("rocdl.s.barrier.signal")
def barrier_signal(t, op: Op) -> None:
    t.yield_event(Signal(_barrier_id(t, op)), masked=True)


@emits("rocdl.s.barrier.wait")
def barrier_wait(t, op: Op) -> None:
    t.yield_event(Wait(_barrier_id(t, op)))


_COUNTERS = {
    "rocdl.s.wait.dscnt": "ds", "rocdl.s.wait.loadcnt": "load", "rocdl.s.wait.storecnt": "store",
    "rocdl.s.wait.asynccnt": "async", "rocdl.s.wait.tensorcnt": "tensor",
    "rocdl.s.wait.expcnt": "exp", "rocdl.s.wait.kmcnt": "km",
}


@emits(*_COUNTERS)
def wait_counter(t, op: Op) -> None:
    t.yield_event(WaitCount(_COUNTERS[op.name], int(op.attr('count'))))


emits("rocdl.asyncmark")(one_line("ctx.asyncmark()"))


@emits("rocdl.wait.asyncmark")
def wait_asyncmark(t, op: Op) -> None:
    t.yield_event(WaitAsyncMark(int(op.attr('count'))))


@emits("rocdl.s.barrier.signal.isfirst")
def barrier_signal_isfirst(t, op: Op) -> None:
    # A signal whose i1 result says whether this wave was the first of the phase to signal
    # (IntrinsicsAMDGPU.td, llvm.amdgcn.s.barrier.signal.isfirst). Which wave that is depends
    # on timing; made deterministic as the canonical order (MODEL.md §5: wave id) gives it:
    # wave 0 of the workgroup.
    # (the cluster form's first workgroup would depend on timing across workgroups: refused)
    t.yield_event(Signal(_barrier_id(t, op, cluster=False)), masked=True)
    t.out(f"{t.v(op.results[0])} = np.bool_(ctx.wave == 0)")


@emits("rocdl.wave.barrier")
def wave_barrier(t, op: Op) -> None:
    # a compiler scheduling barrier within one wave: no execution effect
    t.out("pass")


@emits("rocdl.s.get.barrier.state", "rocdl.s.get.named.barrier.state")
def get_barrier_state(t, op: Op) -> None:
    raise t.unsupported(op, "the barrier state (arrival and member counts) is a context-switch read whose "
                            "value depends on timing; not modeled")
