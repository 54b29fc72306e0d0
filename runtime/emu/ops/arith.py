"""arith dialect: integer and float arithmetic, comparisons, casts, constants."""

from __future__ import annotations

import numpy as np

from ldssan.passes.ir.irview import DenseAttr, Op
from ldssan.passes.ir.types import Type
from ..rt.convert import dense
from . import emits

_BINARY = {
    "arith.addi": "({a} + {b})", "arith.subi": "({a} - {b})", "arith.muli": "({a} * {b})",
    "arith.andi": "({a} & {b})", "arith.ori": "({a} | {b})", "arith.xori": "({a} ^ {b})",
    "arith.addf": "({a} + {b})", "arith.subf": "({a} - {b})", "arith.mulf": "({a} * {b})",
    "arith.divf": "({a} / {b})", "arith.remf": "np.fmod({a}, {b})",
    "arith.maxsi": "np.maximum({a}, {b})", "arith.minsi": "np.minimum({a}, {b})",
    "arith.maxui": "R.umax({a}, {b})", "arith.minui": "R.umin({a}, {b})",
    "arith.maximumf": "np.maximum({a}, {b})", "arith.minimumf": "np.minimum({a}, {b})",
    "arith.maxnumf": "np.fmax({a}, {b})", "arith.minnumf": "np.fmin({a}, {b})",
    "arith.divsi": "R.divsi({a}, {b})", "arith.divui": "R.divui({a}, {b})",
    "arith.remsi": "R.remsi({a}, {b})", "arith.remui": "R.remui({a}, {b})",
    "arith.floordivsi": "R.floordivsi({a}, {b})", "arith.ceildivsi": "R.ceildivsi({a}, {b})",
    "arith.ceildivui": "R.ceildivui({a}, {b})",
    "arith.shli": "R.shli({a}, {b})", "arith.shrsi": "R.shrsi({a}, {b})",
    "arith.shrui": "R.shrui({a}, {b})",
}


def _dtype_expr(t: Type) -> str:
    if t.scalar.kind == "int" and t.scalar.width > 64:
        return "np.dtype('uint8')"  # wide integers (i128) are held as their little-endian bytes
    return f"np.dtype({t.scalar.dtype.name!r})" if t.scalar.kind != "float" or t.scalar.name in (
        "f16", "f32", "f64") else f"R.DTYPES[{t.scalar.name!r}]"


def is_wide(t: Type) -> bool:
    """Integers wider than 64 bits: held as a trailing axis of bytes, like a vector."""
    return t.kind == "int" and t.width > 64


def lane_vector(t: Type) -> bool:
    return t.kind == "vector" or is_wide(t)


def binary(t, op: Op) -> None:
    a, b = (t.v(x) for x in op.operands)
    # Operands already carry the result's dtype, and numpy keeps it (wrapping integers).
    t.out(f"{t.v(op.results[0])} = {_BINARY[op.name].format(a=a, b=b)}")


SHIFTS = ("arith.shli", "arith.shrui")  # `shift` emits these (and their llvm aliases)
for _name in _BINARY:
    if _name not in SHIFTS:
        emits(_name)(binary)

_WORDS = (8, 16, 32, 64)


@emits("arith.shli", "arith.shrui", "llvm.shl", "llvm.lshr")
def shift(t, op: Op) -> None:
    """A shift by a constant below the width (what the device runtime's hooks do at every
    word; a vector's by a splat, as FlyDSL's bf16 rounding shifts by `dense<16>`): numpy's
    shift at once, without `R.shli`/`R.shrui`'s checks for counts past the width (~6x faster
    on a wave's lanes); any other shift goes through them."""
    a, b = op.operands
    rt = op.result_types[0]
    count = t.splats.get(b) if rt.kind == "vector" else t.consts.get(b)  # a vector's: by one splat count
    rt = rt.scalar
    if rt.kind != "int" or rt.width not in _WORDS or count is None or not 0 <= count < rt.width:
        binary(t, op)
        return
    sig, uns = f"np.int{rt.width}", f"np.uint{rt.width}"
    if op.name in ("arith.shli", "llvm.shl"):
        expr = f"np.left_shift({t.v(a)}, {sig}({count}))"
    else:
        expr = f"np.right_shift(np.asarray({t.v(a)}).view({uns}), {uns}({count})).view({sig})"
    t.out(f"{t.v(op.results[0])} = {expr}")


@emits("arith.negf", "llvm.fneg")
def negf(t, op: Op) -> None:  # flips the sign bit: -0.0 and NaNs too
    t.out(f"{t.v(op.results[0])} = -{t.v(op.operands[0])}")


@emits("arith.constant", "llvm.mlir.constant")
def constant(t, op: Op) -> None:
    rt = op.result_types[0]
    value = op.attr("value")
    t.out(f"{t.v(op.results[0])} = {const_expr(value, rt)}")
    if rt.kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        t.consts[op.results[0]] = value  # read by emitters that specialise on a constant
    if isinstance(value, DenseAttr) and rt.kind == "vector" and rt.elem.kind == "int":
        arr = dense(value.text, str(rt))  # the constant as the run will hold it
        if arr.size and (arr == arr[0]).all():
            t.splats[op.results[0]] = int(arr[0])  # every element one integer (shift counts)


def const_expr(value, rt: Type) -> str:
    """A Python expression for a constant of type `rt` (uniform layout)."""
    if isinstance(value, DenseAttr):
        return f"R.dense({value.text!r}, {str(rt)!r})"
    if rt.kind == "vector":
        dt = _dtype_expr(rt)
        return f"np.full({rt.count}, {value!r}, dtype={dt})"
    if rt.kind == "int" and rt.width == 1:
        return "np.bool_(True)" if value else "np.bool_(False)"
    if rt.kind in ("int", "index"):
        bits = rt.width if rt.kind == "int" else 64
        v = int(value) & ((1 << bits) - 1)
        if v >= 1 << (bits - 1):
            v -= 1 << bits
        return f"np.{rt.dtype.name}({v})"
    if rt.kind == "float":
        # float('inf') / float('nan') spell the non-finite constants too
        return f"{_dtype_expr(rt)}.type(float({str(float(value))!r}))"
    raise NotImplementedError(f"constant of type {rt}")  # fail_closed: UnsupportedOp naming the op


_UCMP = {6: "np.less", 7: "np.less_equal", 8: "np.greater", 9: "np.greater_equal"}


@emits("arith.cmpi", "llvm.icmp")
def cmpi(t, op: Op) -> None:
    a, b = (t.v(x) for x in op.operands)
    pred = int(op.attr("predicate"))
    ty = op.operand_types[0]
    if pred in _UCMP and ty.kind == "int" and ty.width in _WORDS:
        # an unsigned compare of words: both sides viewed unsigned here, not in `R.cmpi`
        uns = f"np.uint{ty.width}"
        t.out(f"{t.v(op.results[0])} = {_UCMP[pred]}(np.asarray({a}).view({uns}), np.asarray({b}).view({uns}))")
        return
    t.out(f"{t.v(op.results[0])} = np.asarray(R.cmpi({pred}, {a}, {b}))[()]")


@emits("arith.cmpf", "llvm.fcmp")
def cmpf(t, op: Op) -> None:
    a, b = (t.v(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = np.asarray(R.cmpf({int(op.attr('predicate'))}, {a}, {b}))[()]")


@emits("arith.select", "llvm.select")
def select(t, op: Op) -> None:
    c, a, b = op.operands
    res = op.results[0]
    if t.uniform(c):
        t.out(f"{t.v(res)} = {t.v(a)} if {t.v(c)} else {t.v(b)}")
        return
    t.out(f"{t.v(res)} = R.select({t.v(c)}, {t.as_shape(a, False)}, {t.as_shape(b, False)})")


def _cast(fn: str):
    def emit(t, op: Op) -> None:
        dt = _dtype_expr(op.result_types[0])
        t.out(f"{t.v(op.results[0])} = np.asarray({fn}({t.v(op.operands[0])}, {dt}))[()]")

    return emit


emits("arith.index_cast", "arith.extsi", "llvm.sext")(_cast("R.extsi"))
emits("arith.index_castui", "arith.extui", "llvm.zext")(_cast("R.extui"))
emits("arith.trunci", "llvm.trunc")(_cast("R.trunci"))
emits("arith.sitofp", "llvm.sitofp")(_cast("R.fconv"))
emits("arith.uitofp", "llvm.uitofp")(_cast("R.uitofp"))
emits("arith.fptosi", "llvm.fptosi")(_cast("R.fptosi"))
emits("arith.fptoui", "llvm.fptoui")(_cast("R.fptoui"))
emits("arith.extf", "arith.truncf", "llvm.fpext", "llvm.fptrunc")(_cast("R.fconv"))


@emits("arith.bitcast", "llvm.bitcast", "vector.bitcast")
def bitcast(t, op: Op) -> None:
    rt = op.result_types[0]
    src, res = op.operands[0], op.results[0]
    if op.operand_types and op.operand_types[0].kind == "ptr":
        t.out(f"{t.v(res)} = {t.v(src)}")
        return
    vec = rt.count if rt.kind == "vector" else (rt.width // 8 if is_wide(rt) else None)
    fn = "R.bitcast_uniform" if t.uniform(src) else "R.bitcast_lanes"
    t.out(f"{t.v(res)} = {fn}({t.v(src)}, {_dtype_expr(rt)}, {vec})")


@emits("arith.addui_extended")
def addui_extended(t, op: Op) -> None:
    a, b = (t.v(x) for x in op.operands)
    s, c = op.results
    t.out(f"{t.v(s)} = ({a} + {b})")
    t.out(f"{t.v(c)} = np.asarray(R.cmpi(6, {t.v(s)}, {a}))[()]")


@emits("arith.subui_extended")
def subui_extended(t, op: Op) -> None:
    # the second result is the borrow: a <u b (MLIR arith: "overflow" of the unsigned difference)
    a, b = (t.v(x) for x in op.operands)
    d, borrow = op.results
    t.out(f"{t.v(d)} = ({a} - {b})")
    t.out(f"{t.v(borrow)} = np.asarray(R.cmpi(6, {a}, {b}))[()]")


@emits("arith.flush_denormals")
def flush_denormals(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = np.asarray(R.flush_denormals({t.v(op.operands[0])}))[()]")


@emits("arith.convertf")
def convertf(t, op: Op) -> None:
    # same-width float conversion (f16 <-> bf16); R.fconv rounds to nearest even, the default
    if op.attr("roundingmode") not in (None, 0):
        raise t.unsupported(op, f"rounding mode {op.attr('roundingmode')} (only to-nearest-even is modelled)")
    _cast("R.fconv")(t, op)


@emits("arith.scaling_extf", "arith.scaling_truncf")
def scaling_cast(t, op: Op) -> None:
    raise t.unsupported(op, "OCP MX scaled float casts are not modelled by the virtual gfx1250 yet")


@emits("arith.mulsi_extended", "arith.mului_extended")
def mul_extended(t, op: Op) -> None:
    a, b = (t.v(x) for x in op.operands)
    lo, hi = op.results
    bits = op.result_types[0].width
    fn = "R.extsi" if op.name == "arith.mulsi_extended" else "R.extui"
    t.out(f"_p = {fn}({a}, np.dtype('int64')) * {fn}({b}, np.dtype('int64'))")
    dt = _dtype_expr(op.result_types[0])
    t.out(f"{t.v(lo)} = np.asarray(R.trunci(_p, {dt}))[()]")
    t.out(f"{t.v(hi)} = np.asarray(R.trunci(_p >> {bits}, {dt}))[()]")


_ = np  # numpy is used by generated code through this module's expressions
