"""C for the lane-wise ops a native run compiles: one small function per op, each the exact
twin of the op's Python emitter (`ops/arith.py`, `ops/vector.py`, `ops/math.py`).

An emitter gets a `COp` (the op, its operands as C element expressions, its result) and
returns the C statements that compute the result for one lane, or None when this variant of
the op is not compiled (its Python line then runs; never a guess). The C mirrors what numpy
and ml_dtypes do, not what the hardware does: the interpreter is the reference, and a
native run must give the same bits (tests/emu/test_native.py compares them op by op).

Values are C arrays per lane: `v<N>[n]` for a vector of n elements, `v<N>[1]` for a scalar.
bf16 is held as its 16 bits and computed in float, rounded to nearest even after every op,
as ml_dtypes does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

import ml_dtypes
import numpy as np

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.irview import Op, reduction_kind
from ldssan.passes.ir.types import Type

__all__ = ["BOOL", "CEMIT", "COp", "Elem", "I64", "PRELUDE", "elem_of", "width_of"]


@dataclass(frozen=True)
class Elem:
    """An element type a native run holds: its numpy dtype and its C storage type."""

    dtype: np.dtype
    c: str  # storage type
    kind: str  # "bool", "int", "float" (f32/f64) or "bf16"
    bits: int

    @property
    def unsigned(self) -> str:
        return f"uint{self.bits}_t"

    @property
    def compute(self) -> str:
        """The C type arithmetic runs in (bf16: float)."""
        return "float" if self.kind == "bf16" else self.c


_INTS = {w: Elem(np.dtype(f"int{w}"), f"int{w}_t", "int", w) for w in (8, 16, 32, 64)}
BOOL = Elem(np.dtype(np.bool_), "uint8_t", "bool", 8)
I64 = _INTS[64]
_FLOATS = {"f32": Elem(np.dtype(np.float32), "float", "float", 32),
           "f64": Elem(np.dtype(np.float64), "double", "float", 64),
           "bf16": Elem(np.dtype(ml_dtypes.bfloat16), "uint16_t", "bf16", 16)}
_BYTES = Elem(np.dtype(np.uint8), "uint8_t", "bytes", 8)  # integers wider than 64 bits, as the interpreter holds them


def elem_of(t: Type) -> Elem | None:
    """The element a value of type `t` is held as (the interpreter's dtype), or None (not
    compiled)."""
    s = t.scalar
    if s.kind == "int" and s.width > 64:
        return _BYTES if t.kind != "vector" and s.width % 8 == 0 else None
    if s.kind == "int":
        e = BOOL if s.width == 1 else _INTS.get(s.width)
    elif s.kind == "index":
        e = I64
    elif s.kind == "float":
        e = _FLOATS.get(s.name)
    else:
        return None
    return e if e is not None and e.dtype == s.dtype else None


def width_of(t: Type) -> int:
    if t.kind == "int" and t.width > 64:
        return t.width // 8
    return t.count if t.kind == "vector" else 1


# Conversions the runs share. bf16 from float: ml_dtypes' rounding (nearest even; a NaN
# becomes the quiet NaN of its sign). No libc: the module links with nothing.
PRELUDE = r"""
#include <stdint.h>
static inline float bf2f(uint16_t h) { union { uint32_t u; float f; } x; x.u = (uint32_t)h << 16; return x.f; }
static inline uint16_t f2bf(float f) {  /* a select, not a branch: 2.5x faster lane loops */
  union { uint32_t u; float f; } x; x.f = f;
  uint16_t r = (uint16_t)((x.u + 0x7FFFu + ((x.u >> 16) & 1u)) >> 16);
  uint16_t q = (uint16_t)(((x.u >> 16) & 0x8000u) | 0x7FC0u);
  return f != f ? q : r;
}
#define ISNAN(x) ((x) != (x))  /* in the value's own type: no widening in the lane loop */
/* x86 (numpy's loops, ml_dtypes' float ops) returns the first operand of a binary op when it
   is a NaN, quieted; the compiler may swap the operands of + and * (COp.arith). */
"""


_UFUNCS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}
_NANS = {2: (0xFFC1, 0x7FC2), 4: (0xFFC00001, 0x7FC00002), 8: (0xFFF8000000000001, 0x7FF8000000000002)}


@register_cache
@cache
def nan_winner(dtype: np.dtype, o: str) -> bool | None:
    """Whether numpy's `o` on two NaNs of `dtype` returns the first one (True) or the second
    (False), as this process computes it, or None (neither: the op is not compiled). x86
    returns the first operand, but the compiler of a loop may swap the operands of + and *
    (ml_dtypes' bf16 + and * return the second). Asked, not assumed; bf16's NaNs keep only
    their sign (f2bf), so the sign decides there."""
    ufunc = _UFUNCS.get(o)
    if ufunc is None:
        return None
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    a, b = (np.full(64, x, bits).view(dtype) for x in _NANS[dtype.itemsize])
    with np.errstate(all="ignore"):
        got = int(ufunc(a, b).view(bits)[0])
    want_a, want_b = _NANS[dtype.itemsize]
    if dtype.itemsize == 2:  # by the sign: a is negative, b positive
        got, want_a, want_b = got >> 15, 1, 0
    return True if got == want_a else False if got == want_b else None


@dataclass
class COp:
    """One op as the C emitters see it."""

    op: Op
    args: list[Callable[[str], str]]  # operand k's element j (a C index expression) -> C expression
    arrays: list[str | None]  # operand k's C array (None: a literal)
    arg_elems: list[Elem]
    arg_widths: list[int]
    res: str  # the result's C array name
    elem: Elem  # the result's element type
    n: int  # the result's width
    lits: list[int | None]  # operand k's value when it is a literal or an integer splat, else None

    def each(self, expr: Callable[[str], str]) -> list[str]:
        """`res[j] = expr(j)` for every element j."""
        if self.n == 1:
            return [f"{self.res}[0] = {expr('0')};"]
        return [f"for (int j = 0; j < {self.n}; j++) {self.res}[j] = {expr('j')};"]

    def wide(self, k: int, j: str) -> str:
        """Operand k's element j in the compute type (bf16 widened to float)."""
        x = self.args[k](j)
        return f"bf2f({x})" if self.arg_elems[k].kind == "bf16" else x

    def arith(self, a: str, o: str, b: str) -> str:
        """`a o b` in the compute type. When both are NaN, numpy's op returns one of them
        (`nan_winner`, which the emitter checked is known): the winner meets itself, so
        whichever operand the compiler puts first, the NaN is the winner's (a select of the
        operand, not of the result: the lane loops stay vector code, 2.7x faster)."""
        w, x = (a, b) if nan_winner(self.elem.dtype, o) else (b, a)
        return f"({w} {o} (ISNAN({w}) ? {w} : {x}))"

    def narrow(self, expr: str) -> str:
        """A compute-type expression stored as the result's element (bf16 rounded)."""
        return f"f2bf({expr})" if self.elem.kind == "bf16" else f"({self.elem.c})({expr})"


CEMIT: dict[str, Callable[[COp], list[str] | None]] = {}


def cemits(*names: str):
    def register(fn):
        for name in names:
            assert name not in CEMIT, name
            CEMIT[name] = fn
        return fn

    return register


def _same_elems(c: COp) -> bool:
    return all(e == c.elem for e in c.arg_elems)


_FLOAT_BIN = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/",
              "llvm.fadd": "+", "llvm.fsub": "-", "llvm.fmul": "*", "llvm.fdiv": "/"}


@cemits(*_FLOAT_BIN)
def float_binary(c: COp):
    # numpy (and ml_dtypes for bf16: through float) round once per op; no contraction
    if c.elem.kind not in ("float", "bf16") or not _same_elems(c):
        return None
    o = _FLOAT_BIN[c.op.name]
    if nan_winner(c.elem.dtype, o) is None:
        return None
    return c.each(lambda j: c.narrow(c.arith(c.wide(0, j), o, c.wide(1, j))))


@cemits("arith.maximumf", "arith.minimumf")
def float_minmax(c: COp):
    # np.maximum / np.minimum: the first operand when it wins or is NaN, else the second
    # (so a tie of +0 and -0 gives the second)
    if c.elem.kind != "float" or not _same_elems(c):
        return None
    o = ">" if c.op.name.endswith("maximumf") else "<"
    return c.each(lambda j: f"(({c.args[0](j)} {o} {c.args[1](j)}) || ISNAN({c.args[0](j)}) ? "
                            f"{c.args[0](j)} : {c.args[1](j)})")


_SHIFTS = {"arith.shli": "<<", "llvm.shl": "<<", "arith.shrui": ">>", "llvm.lshr": ">>",
           "arith.shrsi": "s>>", "llvm.ashr": "s>>"}


@cemits(*_SHIFTS)
def shift(c: COp):
    # by a constant count below the width only (the emitters' fast path, R.shli/shrui/shrsi
    # agree there); other counts have the interpreter's own rules and stay Python
    k = c.lits[1]
    e = c.elem
    if e.kind != "int" or k is None or not 0 <= k < e.bits or c.arg_elems[0] != e:
        return None
    o = _SHIFTS[c.op.name]
    if o == "s>>":  # arithmetic on a signed value (clang's >>), as np.right_shift of a signed one
        return c.each(lambda j: f"({e.c})({c.args[0](j)} >> {k})")
    return c.each(lambda j: f"({e.c})(({e.unsigned}){c.args[0](j)} {o} {k})")


@cemits("vector.shuffle")
def vector_shuffle(c: COp):
    # concat(a, b)[mask]: a mask entry -1 (poison) indexes from the end, as numpy does
    idx = list(c.op.attr("mask", []) or [])
    na, nb = c.arg_widths[0], c.arg_widths[1]
    if len(idx) != c.n or c.n < 2 or any(e != c.elem for e in c.arg_elems) \
            or not all(-(na + nb) <= i < na + nb for i in idx):
        return None
    out = []
    for j, i in enumerate(idx):
        i %= na + nb
        src = c.args[0](str(i)) if i < na else c.args[1](str(i - na))
        out.append(f"{c.res}[{j}] = {src};")
    return out


@cemits("arith.negf", "llvm.fneg")
def negf(c: COp):
    if c.elem.kind == "bf16":
        return c.each(lambda j: f"(uint16_t)({c.args[0](j)} ^ 0x8000u)")
    return c.each(lambda j: f"-{c.args[0](j)}") if c.elem.kind == "float" else None


_INT_BIN = {"arith.addi": "+", "arith.subi": "-", "arith.muli": "*", "arith.andi": "&", "arith.ori": "|",
            "arith.xori": "^", "llvm.add": "+", "llvm.sub": "-", "llvm.mul": "*", "llvm.and": "&",
            "llvm.or": "|", "llvm.xor": "^"}


@cemits(*_INT_BIN)
def int_binary(c: COp):
    o = _INT_BIN[c.op.name]
    if not _same_elems(c):
        return None
    if c.elem.kind == "bool":  # numpy's bool & | ^; bool arithmetic is not compiled
        return c.each(lambda j: f"({c.args[0](j)} {o} {c.args[1](j)})") if o in "&|^" else None
    if c.elem.kind != "int":
        return None
    u = c.elem.unsigned  # numpy wraps: compute unsigned, where C's overflow is defined
    return c.each(lambda j: f"({c.elem.c})(({u}){c.args[0](j)} {o} ({u}){c.args[1](j)})")


_ICMP = {0: "==", 1: "!=", 2: "<", 3: "<=", 4: ">", 5: ">=", 6: "<", 7: "<=", 8: ">", 9: ">="}


@cemits("arith.cmpi", "llvm.icmp")
def cmpi(c: COp):
    pred = int(c.op.attr("predicate"))
    a = c.arg_elems[0]
    if pred not in _ICMP or a.kind not in ("int", "bool") or c.arg_elems[1] != a:
        return None
    cast = f"({a.unsigned})" if pred >= 6 and a.kind == "int" else ""
    return c.each(lambda j: f"({cast}{c.args[0](j)} {_ICMP[pred]} {cast}{c.args[1](j)})")


# R.cmpf: ordered predicates 1-6 are false on NaN, 8-13 (the unordered twins) true
_FCMP = {1: "==", 2: ">", 3: ">=", 4: "<", 5: "<=", 6: "!="}


@cemits("arith.cmpf", "llvm.fcmp")
def cmpf(c: COp):
    pred = int(c.op.attr("predicate"))
    if c.arg_elems[0].kind not in ("float", "bf16") or c.arg_elems[1] != c.arg_elems[0]:
        return None

    def expr(j: str) -> str:
        a, b = c.wide(0, j), c.wide(1, j)
        uno = f"(ISNAN({a}) || ISNAN({b}))"
        if pred in (0, 15):
            return "0" if pred == 0 else "1"
        if pred in (7, 14):
            return f"!{uno}" if pred == 7 else uno
        if pred <= 6:
            return f"(({a} {_FCMP[pred]} {b}) && !{uno})"
        return f"(({a} {_FCMP[pred - 7]} {b}) || {uno})"

    return c.each(expr) if 0 <= pred <= 15 else None


@cemits("arith.select", "llvm.select")
def select(c: COp):
    if c.arg_elems[0].kind != "bool" or c.arg_elems[1] != c.elem or c.arg_elems[2] != c.elem:
        return None
    cond = c.args[0] if c.arg_widths[0] == c.n else (lambda j: c.args[0]("0"))
    return c.each(lambda j: f"({cond(j)} ? {c.args[1](j)} : {c.args[2](j)})")


def _extend(c: COp, signed: bool):
    # R.extsi / R.extui: an i1 true is -1 / 1; an integer is sign- or zero-extended (or wraps)
    a = c.arg_elems[0]
    if c.elem.kind != "int" or a.kind not in ("int", "bool"):
        return None
    if a.kind == "bool":
        return c.each(lambda j: f"({c.elem.c})({c.args[0](j)} ? {'-1' if signed else '1'} : 0)")
    src = "" if signed else f"({a.unsigned})"
    return c.each(lambda j: f"({c.elem.c})({c.elem.unsigned}){src}({c.args[0](j)})")


cemits("arith.extsi", "arith.index_cast", "llvm.sext")(lambda c: _extend(c, True))
cemits("arith.extui", "arith.index_castui", "llvm.zext")(lambda c: _extend(c, False))


@cemits("arith.trunci", "llvm.trunc")
def trunci(c: COp):
    if c.arg_elems[0].kind != "int":
        return None
    if c.elem.kind == "bool":  # R.trunci: the low bit
        return c.each(lambda j: f"(uint8_t)({c.args[0](j)} & 1)")
    if c.elem.kind != "int":
        return None
    return c.each(lambda j: f"({c.elem.c})({c.elem.unsigned})({c.arg_elems[0].unsigned})({c.args[0](j)})")


@cemits("arith.extf", "arith.truncf", "llvm.fpext", "llvm.fptrunc")
def fconv(c: COp):
    # R.fconv; f64 <-> bf16 (ml_dtypes from double) is left to Python
    pair = (c.arg_elems[0].kind, c.arg_elems[0].bits, c.elem.kind, c.elem.bits)
    if pair in (("bf16", 16, "float", 32), ("bf16", 16, "float", 64)):
        return c.each(lambda j: f"({c.elem.c})bf2f({c.args[0](j)})")
    if pair == ("float", 32, "bf16", 16):
        return c.each(lambda j: f"f2bf({c.args[0](j)})")
    if pair[0] == "float" and pair[2] == "float":
        return c.each(lambda j: f"({c.elem.c})({c.args[0](j)})")
    return None


@cemits("arith.sitofp", "llvm.sitofp")
def sitofp(c: COp):
    # numpy's int -> f32/f64 cast: one rounding to nearest even, as C's
    if c.arg_elems[0].kind != "int" or c.elem.kind != "float":
        return None
    return c.each(lambda j: f"({c.elem.c})({c.args[0](j)})")


@cemits("arith.bitcast", "llvm.bitcast", "vector.bitcast")
def bitcast(c: COp):
    a = c.arg_elems[0]
    if a.kind == "bool" or c.elem.kind == "bool":
        return None
    if a.bits * c.arg_widths[0] != c.elem.bits * c.n:
        return None
    src = c.arrays[0]
    if src is None:
        return None
    return [f"__builtin_memcpy({c.res}, {src}, {c.elem.bits // 8 * c.n});"]


@cemits("vector.broadcast")
def broadcast(c: COp):
    if c.arg_widths[0] != 1 or c.arg_elems[0] != c.elem:
        return None
    return c.each(lambda j: c.args[0]("0"))


def _static_position(c: COp) -> int | None:
    pos = list(c.op.attr("static_position", []) or [])
    if len(pos) != 1 or pos[0] < 0 or len(c.op.operands) != (1 if c.op.name == "vector.extract" else 2):
        return None
    return pos[0]


@cemits("vector.extract")
def extract(c: COp):
    pos = _static_position(c)
    if pos is None or c.n != 1 or c.arg_elems[0] != c.elem or pos >= c.arg_widths[0]:
        return None
    return [f"{c.res}[0] = {c.args[0](str(pos))};"]


@cemits("vector.insert")
def insert(c: COp):
    # operands: the value, then the destination vector
    pos = _static_position(c)
    if pos is None or c.arg_widths[0] != 1 or c.arg_widths[1] != c.n or pos >= c.n:
        return None
    return c.each(lambda j: c.args[1](j)) + [f"{c.res}[{pos}] = {c.args[0]('0')};"]


@cemits("vector.reduction")
def reduction(c: COp):
    name = reduction_kind(c.op)
    a = c.arg_elems[0]
    if name not in ("add", "mul") or a != c.elem or c.n != 1 or any(e != a for e in c.arg_elems):
        return None
    o = "+" if name == "add" else "*"
    n = c.arg_widths[0]
    if a.kind in ("float", "bf16"):  # R.fold: in order, the accumulator first, rounded per step
        if nan_winner(c.elem.dtype, o) is None:
            return None
        first = (c.narrow(c.arith(c.wide(1, "0"), o, c.wide(0, "0"))) if len(c.op.operands) > 1
                 else c.args[0]("0"))
        acc = f"bf2f({c.res}[0])" if a.kind == "bf16" else f"{c.res}[0]"
        step = c.narrow(c.arith(acc, o, c.wide(0, "j")))
        return [f"{c.res}[0] = {first};", f"for (int j = 1; j < {n}; j++) {c.res}[0] = {step};"]
    if a.kind != "int":
        return None
    u = a.unsigned
    acc = f"({u}){c.args[1]('0')}" if len(c.op.operands) > 1 else ("0" if o == "+" else "1")
    return [f"{{ {u} acc = {acc}; for (int j = 0; j < {n}; j++) acc = acc {o} ({u}){c.args[0]('j')}; "
            f"{c.res}[0] = ({a.c})acc; }}"]


_UNARY_F = {"math.sqrt": "sqrt", "llvm.intr.sqrt": "sqrt", "math.rsqrt": "rsqrt", "rocdl.rsq": "rsqrt",
            "rocdl.sqrt": "sqrt", "math.absf": "fabs", "llvm.intr.fabs": "fabs"}


@cemits(*_UNARY_F)
def float_unary(c: COp):
    # ops/math.py: computed in float (bf16 widened) or double, rounded to the result type;
    # sqrt is correctly rounded in numpy and in the instruction the builtin compiles to
    a = c.arg_elems[0]
    if a.kind not in ("float", "bf16") or c.elem != a:
        return None
    f = _UNARY_F[c.op.name]
    suffix = "f" if a.compute == "float" else ""
    one = "1.0f" if a.compute == "float" else "1.0"

    def expr(j: str) -> str:
        x = c.wide(0, j)
        return {"sqrt": f"__builtin_sqrt{suffix}({x})", "rsqrt": f"({one} / __builtin_sqrt{suffix}({x}))",
                "fabs": f"__builtin_fabs{suffix}({x})"}[f]

    return c.each(lambda j: c.narrow(expr(j)))
