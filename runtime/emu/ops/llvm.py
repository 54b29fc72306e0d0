"""llvm dialect: memory (LDS and global), pointers, aggregates, integer ops, calls, fences."""

from __future__ import annotations

from ldssan.passes.abi import ORDERINGS, fence_drains
from ldssan.passes.ir.irview import Op
from ldssan.passes.ir.types import Type, byte_size
from ..events import SYNC
from . import EMITTERS, emits
from .arith import _BINARY, SHIFTS, _dtype_expr, binary, is_wide, lane_vector

# LLVM integer/float ops share arith's semantics.
_ALIASES = {
    "llvm.add": "arith.addi", "llvm.sub": "arith.subi", "llvm.mul": "arith.muli",
    "llvm.and": "arith.andi", "llvm.or": "arith.ori", "llvm.xor": "arith.xori",
    "llvm.shl": "arith.shli", "llvm.lshr": "arith.shrui", "llvm.ashr": "arith.shrsi",
    "llvm.sdiv": "arith.divsi", "llvm.udiv": "arith.divui", "llvm.srem": "arith.remsi",
    "llvm.urem": "arith.remui", "llvm.fadd": "arith.addf", "llvm.fsub": "arith.subf",
    "llvm.fmul": "arith.mulf", "llvm.fdiv": "arith.divf",
    "llvm.intr.smax": "arith.maxsi", "llvm.intr.smin": "arith.minsi",
    "llvm.intr.umax": "arith.maxui", "llvm.intr.umin": "arith.minui",
}
for _llvm, _arith in _ALIASES.items():
    _BINARY[_llvm] = _BINARY[_arith]
    if _arith not in SHIFTS:  # registered with `shift`
        emits(_llvm)(binary)

DYNAMIC_INDEX = -(1 << 31)


def addr_space(t: Type) -> int:
    return t.width if t.kind == "ptr" else -1


def _count(t: Type) -> tuple[str, int]:
    """(dtype expression, element count) of a loaded/stored value type."""
    if t.kind == "vector":
        return _dtype_expr(t), t.count
    if is_wide(t):
        return _dtype_expr(t), t.width // 8
    if t.kind == "ptr":
        return "np.dtype('int64')", 1
    return _dtype_expr(t), 1


def _shape_result(t, res: int, rt: Type, raw: str) -> str:
    """Expression turning an (L, count) load result into the value layout."""
    return f"{raw}" if lane_vector(rt) else f"{raw}[:, 0]"


@emits("llvm.load")
def load(t, op: Op) -> None:
    ptr = op.operands[0]
    emit_load(t, op.results[0], op.result_types[0], addr_space(op.operand_types[0]), t.v(ptr), t.lanes(ptr))


def emit_load(t, res: int, rt: Type, space: int, addr: str, addr_lanes: str) -> None:
    """Load value `res` of type `rt` from address expression `addr` (`addr_lanes`: the same in
    per-lane shape) in address space `space` (llvm.load, and the memref loads)."""
    dt, n = _count(rt)
    if space == 3 and t.uniform(res):  # one workgroup in lockstep, a uniform address
        raw = f"R.lds_load_uniform(ctx, {addr}, {dt}, {n}, {t.mask})"
        t.out(f"{t.v(res)} = {raw}" if lane_vector(rt) else f"{t.v(res)} = {raw}[0]")
    elif space == 3:
        raw = f"R.lds_load(ctx, {addr}, {dt}, {n}, {t.mask})"
        t.out(f"{t.v(res)} = {_shape_result(t, res, rt, raw)}")
    elif t.uniform(res):
        raw = f"R.global_load_uniform(ctx, {addr}, {dt}, {n})"
        t.out(f"{t.v(res)} = {raw}" if lane_vector(rt) else f"{t.v(res)} = {raw}[0]")
    else:
        raw = f"R.global_load(ctx, {addr_lanes}, {dt}, {n}, {t.mask})"
        t.out(f"{t.v(res)} = {_shape_result(t, res, rt, raw)}")


@emits("llvm.store")
def store(t, op: Op) -> None:
    val, ptr = op.operands
    emit_store(t, val, addr_space(op.operand_types[1]), t.v(ptr))


def emit_store(t, val: int, space: int, addr: str) -> None:
    fn = "R.lds_store" if space == 3 else "R.global_store"
    t.out(f"{fn}(ctx, {addr}, {t.lanes(val)}, {t.mask})")


def gep_offsets(elem: Type, indices: list) -> list[tuple[str | int, int]]:
    """(index, scale) pairs plus constant offsets for a GEP over `elem` (LLVM layout)."""
    out: list[tuple[str | int, int]] = []
    cur = elem
    for k, idx in enumerate(indices):
        if k == 0:
            out.append((idx, byte_size(cur)))
            continue
        if cur.kind == "struct":
            if not isinstance(idx, int):
                raise TypeError("dynamic struct index in getelementptr")
            out.append((sum(byte_size(f) for f in cur.fields[:idx]), 1))
            cur = cur.fields[idx]
        elif cur.kind in ("array", "vector"):
            cur = cur.elem
            out.append((idx, byte_size(cur)))
        else:
            raise TypeError(f"getelementptr into {cur}")
    return out


@emits("llvm.getelementptr")
def getelementptr(t, op: Op) -> None:
    base, *dyn = op.operands
    raw = list(op.attr("rawConstantIndices", []))
    dyn_iter = iter(dyn)
    indices = [t.v(next(dyn_iter)) if r == DYNAMIC_INDEX else r for r in raw]
    try:
        parts = gep_offsets(op.attr("elem_type"), indices)
    except TypeError as e:
        raise t.unsupported(op, str(e)) from None
    terms = []
    for idx, scale in parts:
        if isinstance(idx, int):
            if idx * scale:
                terms.append(str(idx * scale))
        else:
            terms.append(f"np.asarray({idx}, np.int64) * {scale}")
    offset = " + ".join(terms) or "0"
    t.out(f"{t.v(op.results[0])} = (np.int64({t.v(base)}) + {offset})" if t.uniform(base) else
          f"{t.v(op.results[0])} = ({t.v(base)} + {offset})")


@emits("llvm.mlir.addressof")
def addressof(t, op: Op) -> None:
    name = op.attr("global_name")
    g = t.view.globals.get(name)
    if g is None or g.addr_space != 3:
        raise t.unsupported(op, f"address of @{name} (only LDS globals are emulated)")
    t.out(f"{t.v(op.results[0])} = np.int64(ctx.lds_offsets[{name!r}])")


def zero_expr(rt: Type) -> str:
    if rt.kind == "struct":
        return "(" + "".join(zero_expr(f) + ", " for f in rt.fields) + ")"
    if rt.kind == "array":
        return "(" + "".join(zero_expr(rt.elem) + ", " for _ in range(rt.count)) + ")"
    if rt.kind == "vector":
        return f"np.zeros({rt.count}, dtype={_dtype_expr(rt)})"
    if rt.kind == "ptr":
        return "np.int64(0)"
    return f"{_dtype_expr(rt)}.type(0)"


@emits("llvm.mlir.undef", "llvm.mlir.poison", "llvm.mlir.zero", "ub.poison")
def undef(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = {zero_expr(op.result_types[0])}")


def _path(op: Op) -> str:
    return "".join(f"[{int(p)}]" for p in op.attr("position"))


@emits("llvm.extractvalue")
def extractvalue(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = {t.v(op.operands[0])}{_path(op)}")


@emits("llvm.insertvalue")
def insertvalue(t, op: Op) -> None:
    agg, val = op.operands
    res = op.results[0]
    pos = [int(p) for p in op.attr("position")]
    # a per-lane member makes the whole aggregate per-lane: its uniform members are broadcast
    uniform = t.uniform(res)
    t.out(f"{t.v(res)} = R.tuple_set({t.as_shape(agg, uniform)}, {pos!r}, {t.as_shape(val, uniform)})")


@emits("llvm.ptrtoint", "llvm.inttoptr")
def ptr_int(t, op: Op) -> None:
    rt = op.result_types[0]
    dt = "np.dtype('int64')" if rt.kind == "ptr" else _dtype_expr(rt)
    t.out(f"{t.v(op.results[0])} = np.asarray({t.v(op.operands[0])}).astype({dt})[()]")


@emits("llvm.addrspacecast")
def addrspacecast(t, op: Op) -> None:
    src_space = addr_space(op.operand_types[0])
    dst_space = addr_space(op.result_types[0])
    if 3 in (src_space, dst_space) and src_space != dst_space:
        raise t.unsupported(op, "casting LDS pointers to or from other address spaces (flat LDS access)")
    t.out(f"{t.v(op.results[0])} = {t.v(op.operands[0])}")


@emits("llvm.fence")
def fence(t, op: Op) -> None:
    # A draining fence compiles to s_wait_dscnt 0 (+ load/store counters) on gfx1250: the
    # wave's queued ds stores land. The engine decides with the same function.
    ordering = ORDERINGS.get(int(op.attr("ordering", 0) or 0), "")
    if fence_drains(ordering, str(op.attr("syncscope", "") or "")):
        t.out("ctx.flush_ds()")
    else:
        t.out("pass")


_RMW = {0: "xchg", 1: "add", 2: "sub", 3: "and", 4: "nand", 5: "or", 6: "xor", 7: "max",
        8: "min", 9: "umax", 10: "umin", 11: "fadd", 12: "fsub", 13: "fmax", 14: "fmin"}


@emits("llvm.atomicrmw")
def atomicrmw(t, op: Op) -> None:
    ptr, val = op.operands
    kind = _RMW.get(int(op.attr("bin_op")))
    if kind is None or kind == "nand":
        raise t.unsupported(op, f"atomicrmw operation {op.attr('bin_op')}")
    space = addr_space(op.operand_types[0])
    t.out(f"{t.v(op.results[0])} = R.atomic_rmw(ctx, {space}, {kind!r}, {t.lanes(ptr)}, "
          f"{t.lanes(val)}, {t.mask})")
    if space != 3:
        t.yield_event(SYNC)  # a global atomic: other workgroups may act on it now


@emits("llvm.cmpxchg")
def cmpxchg(t, op: Op) -> None:
    ptr, cmp, new = op.operands
    space = addr_space(op.operand_types[0])
    t.out(f"{t.v(op.results[0])} = R.atomic_cmpxchg(ctx, {space}, {t.lanes(ptr)}, {t.lanes(cmp)}, "
          f"{t.lanes(new)}, {t.mask})")
    if space != 3:
        t.yield_event(SYNC)


# functions with bodies the emulator calls: the device runtime's hooks (device/link.py,
# `calls`). A user's function is not called: the pass instruments kernel bodies only.
CALLED_PREFIX = "ldssan_device_"


@emits("llvm.call")
def call(t, op: Op) -> None:
    callee = str(op.attr("callee"))
    hook = EMITTERS.get(f"call:{callee}")
    if hook is not None:
        hook(t, op)
        return
    fn = t.view.functions.get(callee)
    if fn is None or fn.external or not callee.startswith(CALLED_PREFIX):
        raise t.unsupported(op, f"call to @{callee}")
    t.call_function(op, fn)


@emits("llvm.intr.assume", "llvm.intr.experimental.noalias.scope.decl", "llvm.intr.lifetime.start",
       "llvm.intr.lifetime.end", "llvm.intr.prefetch", "rocdl.sched.barrier", "rocdl.s.setprio",
       "rocdl.sched.group.barrier", "rocdl.s.sleep", "rocdl.iglp.opt", "rocdl.s.nop")
def no_effect(t, op: Op) -> None:
    # Scheduling hints and assumptions: no effect on values or memory.
    t.out("pass")
