"""vector dialect (1-D vectors): the vector axis is the last numpy axis."""

from __future__ import annotations

from ldssan.passes.ir.irview import Op, reduction_kind
from . import emits
from .arith import _dtype_expr


def _static_pos(op: Op) -> list[int]:
    return list(op.attr("static_position", []) or [])


def _overwrite(t, res, dest, index: str, val: str) -> None:
    """`res` = a copy of vector `dest` with `[index]` set to `val` (on the element axis of
    every lane when `res` varies by lane)."""
    lanes = "" if t.uniform(res) else ":, "
    copy = f"{t.v(dest)}.copy()" if t.uniform(res) else f"np.array({t.lanes(dest)})"
    t.out(f"{t.v(res)} = {copy}")
    t.out(f"{t.v(res)}[{lanes}{index}] = {val}")


@emits("vector.broadcast", "vector.splat")
def broadcast(t, op: Op) -> None:
    src, res = op.operands[0], op.results[0]
    rt = op.result_types[0]
    st = op.operand_types[0]
    if st.kind == "vector":  # vector<n> -> vector<n>: a copy
        t.out(f"{t.v(res)} = {t.v(src)}")
    elif t.uniform(src):
        t.out(f"{t.v(res)} = np.full({rt.count}, {t.v(src)}, dtype={_dtype_expr(rt)})")
    else:
        t.out(f"{t.v(res)} = np.repeat(np.asarray({t.v(src)})[:, None], {rt.count}, axis=1)")


def _position(t, op: Op, dyn_operands) -> str:
    pos = _static_pos(op)
    dyn = iter(dyn_operands)
    parts = []
    for p in pos:
        parts.append(t.v(next(dyn)) if p < -(1 << 62) else str(p))
    if not pos:
        parts = [t.v(x) for x in dyn_operands]
    if len(parts) != 1:
        raise t.unsupported(op, "only 1-D vector positions are supported")
    return parts[0]


@emits("vector.extract", "vector.extractelement", "llvm.extractelement")
def extract(t, op: Op) -> None:
    src, *dyn = op.operands
    pos = _position(t, op, dyn)
    res = op.results[0]
    if dyn and not all(t.uniform(d) for d in dyn):
        t.out(f"{t.v(res)} = np.take_along_axis({t.lanes(src)}, np.asarray({pos}, dtype=np.int64)[:, None], 1)[:, 0]")
    elif t.uniform(src):
        t.out(f"{t.v(res)} = {t.v(src)}[int({pos})]")
    else:
        t.out(f"{t.v(res)} = {t.v(src)}[:, int({pos})]")


@emits("vector.insert", "vector.insertelement", "llvm.insertelement")
def insert(t, op: Op) -> None:
    if op.name == "llvm.insertelement":
        dest, val, *dyn = op.operands
        val, dest = val, dest
    else:
        val, dest, *dyn = op.operands
    pos = _position(t, op, dyn)
    res = op.results[0]
    if dyn and not all(t.uniform(d) for d in dyn):
        raise t.unsupported(op, "per-lane insert position")
    _overwrite(t, res, dest, f"int({pos})", t.v(val))


@emits("vector.from_elements")
def from_elements(t, op: Op) -> None:
    res = op.results[0]
    dt = _dtype_expr(op.result_types[0])
    if t.uniform(res):
        items = ", ".join(t.v(x) for x in op.operands)
        t.out(f"{t.v(res)} = np.array([{items}], dtype={dt})")
    else:
        items = ", ".join(t.lanes(x) for x in op.operands)
        t.out(f"{t.v(res)} = np.stack([{items}], axis=1).astype({dt}, copy=False)")


@emits("vector.shuffle")
def shuffle(t, op: Op) -> None:
    a, b = op.operands
    res = op.results[0]
    idx = list(op.attr("mask"))
    if t.uniform(res):
        t.out(f"{t.v(res)} = np.concatenate([{t.v(a)}, {t.v(b)}])[{idx!r}]")
    else:
        t.out(f"{t.v(res)} = np.concatenate([{t.lanes(a)}, {t.lanes(b)}], axis=1)[:, {idx!r}]")


_REDUCE = {
    "add": "np.sum", "mul": "np.prod", "minsi": "np.min", "maxsi": "np.max",
    "minimumf": "np.min", "maximumf": "np.max", "minnumf": "np.nanmin", "maxnumf": "np.nanmax",
    "and": "np.bitwise_and.reduce", "or": "np.bitwise_or.reduce", "xor": "np.bitwise_xor.reduce",
}


@emits("vector.reduction")
def reduction(t, op: Op) -> None:
    name = reduction_kind(op)
    fn = _REDUCE.get(name)
    if fn is None:
        raise t.unsupported(op, f"reduction kind {op.attr('kind')}")
    src = op.operands[0]
    res = op.results[0]
    dt = _dtype_expr(op.result_types[0])
    acc = t.v(op.operands[1]) if len(op.operands) > 1 else None
    if name in ("add", "mul") and op.result_types[0].scalar.kind == "float":
        # floats: in order, the accumulator first (rt.fold)
        expr = f"R.fold({t.v(src)}, np.{_ORDERED[name]}, {acc})"
    else:
        # integers wrap, min/max pick: every order gives the same value
        expr = f"{fn}({t.v(src)}, axis=-1)"
        if acc is not None:
            expr = {"add": f"({expr} + {acc})", "mul": f"({expr} * {acc})"}.get(name, expr)
    t.out(f"{t.v(res)} = np.asarray({expr}).astype({dt})[()]")


_ORDERED = {"add": "add", "mul": "multiply"}


@emits("vector.fma", "math.fma", "llvm.intr.fma", "llvm.intr.fmuladd")
def fma(t, op: Op) -> None:
    a, b, c = (t.v(x) for x in op.operands)
    dt = _dtype_expr(op.result_types[0])
    # fused: one rounding, done in float64 then rounded to the result type
    t.out(f"{t.v(op.results[0])} = (np.asarray({a}, np.float64) * {b} + np.asarray({c}, np.float64)).astype({dt})[()]")


@emits("vector.extract_strided_slice")
def extract_strided_slice(t, op: Op) -> None:
    off = list(op.attr("offsets"))[0]
    size = list(op.attr("sizes"))[0]
    stride = list(op.attr("strides"))[0]
    src, res = op.operands[0], op.results[0]
    sl = f"{off}:{off + size * stride}:{stride}"
    t.out(f"{t.v(res)} = {t.v(src)}[{sl}]" if t.uniform(src) else f"{t.v(res)} = {t.v(src)}[:, {sl}]")


@emits("vector.insert_strided_slice")
def insert_strided_slice(t, op: Op) -> None:
    src, dest = op.operands
    res = op.results[0]
    off = list(op.attr("offsets"))[0]
    stride = list(op.attr("strides"))[0]
    n = op.operand_types[0].count
    sl = f"{off}:{off + n * stride}:{stride}"
    _overwrite(t, res, dest, sl, t.v(src))
