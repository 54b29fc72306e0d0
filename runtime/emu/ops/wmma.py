"""rocdl.wmma emitters for the gfx1250 shapes (wave32, 16x16xK, and the 32x16x128 f4 scaled
form). The lane layouts, their sources and the matrix product are the run-time part,
`rt/wmma.py`."""

from __future__ import annotations

import re

from ldssan.passes.ir.irview import Op, RawAttr
from ldssan.passes.ir.types import type_text
from ..rt.wmma import C_MODIFIERS, SCALE_FORMATS, SCALED_FORMATS, SCALED_K, WMMA_ELEM
from . import emits

_NAME = re.compile(r"rocdl\.wmma\.(\w+)\.16x16x(\d+)\.(\w+)$")


def _types(op: Op):
    m = _NAME.match(op.name)
    if not m:
        return None
    K, ab = int(m.group(2)), m.group(3)  # the accumulator type comes from the C operand
    parts = ab.split("_")
    a_t, b_t = (parts[0], parts[1]) if len(parts) == 2 else (parts[0], parts[0])
    if a_t not in WMMA_ELEM or b_t not in WMMA_ELEM:
        return None
    return K, a_t, b_t


def emit_wmma(t, op: Op) -> None:
    parsed = _types(op)
    if parsed is None or len(op.operands) != 3:
        raise t.unsupported(op, "WMMA variant not emulated")
    modc = op.attr("modC")
    if modc not in (None, 0, False) and "none" not in str(getattr(modc, "text", modc)):
        raise t.unsupported(op, f"WMMA C modifier {getattr(modc, 'text', modc)}")
    if op.attr("signA") or op.attr("signB"):
        raise t.unsupported(op, "WMMA sign modifiers")
    K, a_t, b_t = parsed
    a, b, c = (t.lanes(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = R.wmma({a}, {b}, {c}, R.WMMA_ELEM[{a_t!r}], R.WMMA_ELEM[{b_t!r}], {K})")


# The gfx1250 shapes the layouts above describe (FlyDSL's gfx1250 atom verifier agrees);
# other rocdl.wmma variants (gfx11/gfx12 shapes) have other layouts and stay unsupported.
_GFX1250_K = {"f32": (4,), "f16": (32,), "bf16": (32,), "fp8": (64, 128), "bf8": (64, 128), "iu8": (64,)}


def register_variants(names) -> None:
    for name in names:
        m = _NAME.match(name)
        if not m or m.group(1) not in ("f32", "f16", "bf16", "i32"):
            continue
        K, ab = int(m.group(2)), m.group(3).split("_")
        if all(K in _GFX1250_K.get(x, ()) for x in ab):
            emits(name)(emit_wmma)


# Scaled WMMA (semantics and layouts: the docstring of rt/wmma.py). The op's enum attributes,
# with the defaults of FlyDSL's builder where one is absent.
_SCALED = re.compile(r"rocdl\.wmma\.scale(16)?\.f32\.(\d+)x16x128\.(f8f6f4|f4)$")
_ENUM_DEFAULTS = {"fmtA": "fp8_e4m3", "fmtB": "fp8_e4m3", "modC": "none", "scaleAType": "row0",
                  "scaleBType": "row0", "fmtScaleA": "e8", "fmtScaleB": "e8"}
_OPSEL = {"row0": 0, "row1": 1}  # which lane half supplies the scales


def _enum(op: Op, name: str) -> str:
    """`fp4_e2m1` from `#rocdl<matrix_format fp4_e2m1>`."""
    attr = op.attr(name)
    if attr is None:
        return _ENUM_DEFAULTS[name]
    text = attr.text if isinstance(attr, RawAttr) else str(attr)
    return text.rstrip(">").split()[-1]


def _dwords(ty) -> int:
    """32-bit words of an integer scalar or vector operand type (0 if it is neither)."""
    elem = ty.elem if ty.kind == "vector" else ty
    if elem is None or elem.kind != "int":
        return 0
    return (ty.count if ty.kind == "vector" else 1) * elem.width // 32


def _scaled_enums(t, op: Op, names: tuple[str, ...]) -> dict[str, str]:
    """The op's enum attributes, each checked against what is emulated."""
    known = {"fmtA": SCALED_FORMATS, "fmtB": SCALED_FORMATS, "scaleAType": _OPSEL, "scaleBType": _OPSEL,
             "fmtScaleA": SCALE_FORMATS, "fmtScaleB": SCALE_FORMATS, "modC": C_MODIFIERS}
    got = {name: _enum(op, name) for name in names}
    for name, value in got.items():
        if value not in known[name]:
            raise t.unsupported(op, f"scaled WMMA {name} = {value} (emulated: {', '.join(known[name])})")
    return got


def emit_wmma_scale(t, op: Op) -> None:
    m = _SCALED.match(op.name)
    if m is None or len(op.operands) != 5 or (m.group(2), m.group(3)) not in (("16", "f8f6f4"), ("32", "f4")):
        raise t.unsupported(op, "scaled WMMA variant not emulated")
    if m.group(2) == "32":
        return _emit_f4_32x16(t, op)
    e = _scaled_enums(t, op, ("fmtA", "fmtB", "scaleAType", "scaleBType", "fmtScaleA", "fmtScaleB", "modC"))
    fmts = (e["fmtA"], e["fmtB"])
    # The verifier checks the scale widths (i32 / i64 for scale16) but lets an A or B vector
    # of the wrong size for its format through.
    for name, ty, fmt in (("A", op.operand_types[0], fmts[0]), ("B", op.operand_types[1], fmts[1])):
        want = SCALED_FORMATS[fmt][0] * 2
        if _dwords(ty) != want:
            raise t.unsupported(op, f"scaled WMMA operand {name} has {_dwords(ty)} dwords per lane; {fmt} needs {want}")
    a, b, c, sa, sb = (t.lanes(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = R.wmma({a}, {b}, {c}, {fmts[0]!r}, {fmts[1]!r}, {SCALED_K}, "
          f"scale_a={sa}, scale_b={sb}, opsel=({_OPSEL[e['scaleAType']]}, {_OPSEL[e['scaleBType']]}), "
          f"scale_fmt=({e['fmtScaleA']!r}, {e['fmtScaleB']!r}), c_mod={e['modC']!r})")


def _f32_count(ty) -> int:
    """f32 values per lane of a vector<Nxf32> type (0 for any other type)."""
    ok = ty.kind == "vector" and ty.elem.kind == "float" and ty.elem.width == 32
    return ty.count if ok else 0


def _emit_f4_32x16(t, op: Op) -> None:
    """The 32x16x128 f4 form (fp4 A and B, no format attributes; layouts: rt/wmma.py)."""
    e = _scaled_enums(t, op, ("scaleAType", "scaleBType", "fmtScaleA", "fmtScaleB", "modC"))
    if e["scaleAType"] != "row0":
        raise t.unsupported(op, "32x16x128 f4 scaled WMMA scaleAType = row1: which lanes then supply A's "
                                "scales is not public (A's 32 rows take theirs from all 32 lanes; LLVM's "
                                "amdgpu.scaled_wmma requires 0 here, composable_kernel passes 1); use row0")
    # Like the 16-row form, the verifier lets mis-sized A, B and C vectors through.
    a_t, b_t, c_t = op.operand_types[:3]
    for name, ty, got, want in (("A", a_t, _dwords(a_t), "16 dwords"), ("B", b_t, _dwords(b_t), "8 dwords"),
                                ("C", c_t, _f32_count(c_t), "16 f32"),
                                ("D", op.result_types[0], _f32_count(op.result_types[0]), "16 f32")):
        if got != int(want.split()[0]):
            raise t.unsupported(op, f"32x16x128 f4 scaled WMMA {name} is {type_text(ty)}; "
                                    f"the op takes {want} per lane")
    a, b, c, sa, sb = (t.lanes(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = R.wmma_f4_32x16({a}, {b}, {c}, {sa}, {sb}, "
          f"opsel_b={_OPSEL[e['scaleBType']]}, scale_fmt=({e['fmtScaleA']!r}, {e['fmtScaleB']!r}), "
          f"c_mod={e['modC']!r})")


def register_scaled(names) -> None:
    for name in names:
        if _SCALED.match(name):
            emits(name)(emit_wmma_scale)


def _rocdl_wmma_names() -> list[str]:
    from flydsl._mlir.dialects import _rocdl_ops_gen as gen

    return sorted({v.OPERATION_NAME for v in vars(gen).values()
                   if isinstance(getattr(v, "OPERATION_NAME", None), str) and v.OPERATION_NAME.startswith("rocdl.wmma.")})


_NAMES = _rocdl_wmma_names()
register_variants(_NAMES)
register_scaled(_NAMES)
