"""gpu dialect: ids, barriers, shuffles, return."""

from __future__ import annotations

from ldssan.passes.ir.irview import Op, RawAttr
from . import emits

_DIMS = {"x": 0, "y": 1, "z": 2}


def _enum_word(attr) -> str:
    """`#gpu<dim x>` -> 'x'; `#gpu<shuffle_mode xor>` -> 'xor'."""
    text = attr.text if isinstance(attr, RawAttr) else str(attr)
    return text.rstrip(">").split()[-1].split("<")[-1]


def _dim(op: Op) -> int:
    return _DIMS[_enum_word(op.attr("dimension"))]


def _id(field: str):
    def emit(t, op: Op) -> None:
        t.out(f"{t.v(op.results[0])} = ctx.{field}[{_dim(op)}]")

    return emit


emits("gpu.thread_id")(_id("tid"))
emits("gpu.block_id")(_id("bid"))
emits("gpu.block_dim")(_id("bdim"))
emits("gpu.grid_dim")(_id("gdim"))


@emits("gpu.lane_id")
def lane_id(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = ctx.lane.astype(np.int64)")


@emits("gpu.subgroup_id")
def subgroup_id(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = np.int64(ctx.wave)")


@emits("gpu.subgroup_size")
def subgroup_size(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = np.int64(32)")


@emits("gpu.num_subgroups")
def num_subgroups(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = np.int64(ctx.n_waves)")


@emits("gpu.barrier")
def barrier(t, op: Op) -> None:
    t.out(f"yield ('barrier', -1, {t.mask})")


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
    mode = _enum_word(op.attr("mode"))
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
    if any(groups[7:10]):
        raise t.unsupported(op, "cluster launches")
    smem = t.v(groups[10][0]) if groups[10] else "0"
    args = "".join(f"{t.v(x)}, " for x in groups[11])
    t.out(f"ctx.launcher.launch_kernel({kernel!r}, ({grid}), ({block}), {smem}, ({args}))")
    for r in op.results:
        t.out(f"{t.v(r)} = None")
