"""math dialect and the LLVM float intrinsics: computed in float32/64, rounded to the result type.

Transcendentals are exact in numpy and about 1 ulp on hardware: compare with a tolerance.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op
from . import emits, one_line
from .arith import _dtype_expr

_UNARY = {
    "math.rsqrt": "1.0 / np.sqrt({x})", "math.sqrt": "np.sqrt({x})", "llvm.intr.sqrt": "np.sqrt({x})",
    "math.exp": "np.exp({x})", "math.exp2": "np.exp2({x})", "llvm.intr.exp2": "np.exp2({x})",
    "llvm.intr.exp": "np.exp({x})", "math.log": "np.log({x})", "math.log2": "np.log2({x})",
    "llvm.intr.log2": "np.log2({x})", "math.log1p": "np.log1p({x})", "math.expm1": "np.expm1({x})",
    "math.absf": "np.abs({x})", "llvm.intr.fabs": "np.abs({x})", "math.tanh": "np.tanh({x})",
    "math.sin": "np.sin({x})", "math.cos": "np.cos({x})", "math.erf": "R.erf({x})",
    "math.ceil": "np.ceil({x})", "math.floor": "np.floor({x})", "llvm.intr.floor": "np.floor({x})",
    "math.roundeven": "np.rint({x})", "llvm.intr.rint": "np.rint({x})", "math.trunc": "np.trunc({x})",
    "math.round": "np.copysign(np.floor(np.abs({x}) + 0.5), {x})",
    "rocdl.rsq": "1.0 / np.sqrt({x})", "rocdl.rcp": "1.0 / {x}", "rocdl.sqrt": "np.sqrt({x})",
    "rocdl.exp2": "np.exp2({x})", "rocdl.log": "np.log2({x})", "rocdl.exp": "np.exp2({x})",
}


def unary(t, op: Op) -> None:
    x = f"R.fwide({t.v(op.operands[0])})"
    dt = _dtype_expr(op.result_types[0])
    t.out(f"{t.v(op.results[0])} = np.asarray({_UNARY[op.name].format(x=x)}).astype({dt})[()]")


for _name in _UNARY:
    emits(_name)(unary)


_BIN = {
    "math.powf": "np.power({a}, {b})", "math.atan2": "np.arctan2({a}, {b})",
    "math.copysign": "np.copysign({a}, {b})", "llvm.intr.copysign": "np.copysign({a}, {b})",
    "llvm.intr.maxnum": "np.fmax({a}, {b})", "llvm.intr.minnum": "np.fmin({a}, {b})",
    "llvm.intr.maximum": "np.maximum({a}, {b})", "llvm.intr.minimum": "np.minimum({a}, {b})",
}


def binary(t, op: Op) -> None:
    a, b = (f"np.asarray({t.v(x)}, np.float64)" for x in op.operands)
    dt = _dtype_expr(op.result_types[0])
    t.out(f"{t.v(op.results[0])} = np.asarray({_BIN[op.name].format(a=a, b=b)}).astype({dt})[()]")


for _name in _BIN:
    emits(_name)(binary)


for _names, _line in {
    ("math.absi", "llvm.intr.abs"): "{r} = np.abs({x})",
    ("math.ctpop", "llvm.intr.ctpop"): "{r} = R.ctpop({x})",
    ("math.cttz", "llvm.intr.cttz"): "{r} = R.cttz({x})",
    ("math.ctlz", "llvm.intr.ctlz"): "{r} = R.ctlz({x})",
}.items():
    emits(*_names)(one_line(_line))
