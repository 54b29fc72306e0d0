"""gpu dialect: ids (cluster ids too), barriers, shuffles, return, and the host's launch_func."""

from __future__ import annotations

from ldssan.passes.ir.irview import Op, enum_word
from ..events import WORKGROUP_BARRIER
from . import emits, one_line

_DIMS = {"x": 0, "y": 1, "z": 2}


def _dim(op: Op) -> int:
    return _DIMS[enum_word(op.attr("dimension"))]


def _per_dim(expr: str):
    """An emitter for a query along the op's `dimension`: `expr` with `{d}` = its index."""
    def emit(t, op: Op) -> None:
        t.out(f"{t.v(op.results[0])} = " + expr.format(d=_dim(op)))

    return emit


# Clusters (MLIR GPU dialect docs): `cluster_id` is the cluster's id in the grid,
# `cluster_block_id` the block's id within its cluster, `cluster_dim_blocks` the blocks per
# cluster and `cluster_dim` the clusters per grid, along one dimension. The uniformity
# analysis treats the first two as per-lane values: broadcast over the wave's lanes.
_PER_LANE = "np.broadcast_to(ctx.{field}[{{d}}], (ctx.L,)).astype(np.int64)"
for _name, _expr in {
    "gpu.thread_id": "ctx.tid[{d}]",
    "gpu.block_id": "ctx.bid[{d}]",
    "gpu.block_dim": "ctx.bdim[{d}]",
    "gpu.grid_dim": "ctx.gdim[{d}]",
    "gpu.cluster_id": _PER_LANE.format(field="cid"),
    "gpu.cluster_block_id": _PER_LANE.format(field="cwg"),
    "gpu.cluster_dim_blocks": "ctx.cdim[{d}]",
    "gpu.cluster_dim": "ctx.gdim[{d}] // ctx.cdim[{d}]",
}.items():
    emits(_name)(_per_dim(_expr))


for _name, _line in {
    "gpu.lane_id": "{r} = ctx.lane.astype(np.int64)",
    "gpu.subgroup_id": "{r} = np.int64(ctx.wave)",
    "gpu.subgroup_size": "{r} = np.int64(32)",
    "gpu.num_subgroups": "{r} = np.int64(ctx.n_waves)",
}.items():
    emits(_name)(one_line(_line))

@emits("gpu.barrier", "rocdl.s.barrier", "rocdl.barrier")
def barrier(t, op: Op) -> None:
    """The workgroup barrier, one for the gpu and the rocdl spellings."""
    t.yield_event(WORKGROUP_BARRIER, masked=True)


@emits("gpu.return", "func.return", "llvm.return")
def ret(t, op: Op) -> None:
    if op.operands:
        vals = ", ".join(t.v(x) for x in op.operands)
        t.out(f"ctx.returned = ({vals},)")
    t.out("return")


@emits("gpu.shuffle")
def shuffle(t, op: Op) -> None:
    val, offset, width = op.operands
    res, valid = op.results
    mode = enum_word(op.attr("mode"))
    t.out(f"{t.v(res)}, {t.v(valid)} = R.shuffle(ctx, {t.lanes(val)}, {t.v(offset)}, {t.v(width)}, "
          f"{mode!r}, {t.mask})")


@emits("gpu.launch_func")
def launch_func(t, op: Op) -> None:
    # Host side: FlyDSL's launcher hands grid, block, dynamic LDS and arguments to the emulator.
    seg = list(op.attr("operandSegmentSizes"))
    ops = iter(op.operands)
    groups = [[next(ops) for _ in range(n)] for n in seg]
    kernel = str(getattr(op.attr("kernel"), "text", op.attr("kernel"))).split("@")[-1]
    grid = ", ".join(t.v(x[0]) for x in groups[1:4])
    block = ", ".join(t.v(x[0]) for x in groups[4:7])
    cluster = "None"
    if any(groups[7:10]):  # a cluster launch: FlyDSL's launch(cluster=...) sets all three dims
        if not all(groups[7:10]):
            raise t.unsupported(op, "a cluster launch with only some of its cluster dims")
        cluster = "(" + ", ".join(t.v(x[0]) for x in groups[7:10]) + ")"
    smem = t.v(groups[10][0]) if groups[10] else "0"
    args = "".join(f"{t.v(x)}, " for x in groups[11])
    t.out(f"ctx.launcher.launch_kernel({kernel!r}, ({grid}), ({block}), {smem}, ({args}), {cluster})")
    for r in op.results:
        t.out(f"{t.v(r)} = None")
