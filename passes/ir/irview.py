"""A light, binding-free view of a kernel module: ops, values, types, attributes, locations.

The MLIR Python bindings are read once here; everything downstream (the translator, the
instrumentation's tests, the op census) works on these plain dataclasses. Values are
numbered per module (`Op.operands` / `Op.results` hold ints). FlyDSL overloads `==` on
IR values to build `arith.cmpi`, so values are keyed by `hash()`, never compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .types import MemRef, Type, parse_memref, parse_type


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    col: int
    function: str = ""


@dataclass(frozen=True, slots=True)
class Loc:
    """Innermost frame first; `chain` is empty for unknown locations."""

    chain: tuple[Frame, ...] = ()

    @property
    def frame(self) -> Frame | None:
        return self.chain[0] if self.chain else None

    def __str__(self) -> str:
        f = self.frame
        return f"{f.file}:{f.line}:{f.col}" if f else "<unknown location>"


UNKNOWN_LOC = Loc()


@dataclass(slots=True, eq=False)
class Block:
    args: tuple[int, ...]
    arg_types: tuple[Type, ...]
    ops: list["Op"]


@dataclass(slots=True, eq=False)
class Op:
    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    result_types: tuple[Type, ...]
    attrs: dict[str, Any]
    regions: list[list[Block]]
    loc: Loc
    operand_types: tuple[Type, ...] = ()
    successors: tuple[int, ...] = ()

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


def enum_word(attr) -> str:
    """The word of an enum attribute: `#gpu<dim x>` -> 'x'; `#gpu<shuffle_mode xor>` -> 'xor'."""
    text = attr.text if hasattr(attr, "text") else str(attr)
    return text.rstrip(">").split()[-1].split("<")[-1]


def reduction_kind(op: Op) -> str:
    """A `vector.reduction`'s combining kind: "add", "maxnumf", ... (read by the emulator's
    Python and C emitters alike)."""
    kind = op.attr("kind")
    return str(getattr(kind, "text", kind)).split("<")[-1].rstrip(">").strip()


@dataclass(slots=True)
class Function:
    name: str
    kind: str  # "gpu.func" | "func.func" | "llvm.func"
    body: list[Block]
    attrs: dict[str, Any]
    loc: Loc
    is_kernel: bool = False
    external: bool = False


@dataclass(slots=True)
class GlobalVar:
    name: str
    addr_space: int
    type: Type
    alignment: int
    loc: Loc
    # a `memref.global`: its memref type, initial value (DenseAttr) and constness
    memref: MemRef | None = None
    initial: Any = None
    constant: bool = False


@dataclass(slots=True)
class ModuleView:
    functions: dict[str, Function] = field(default_factory=dict)
    globals: dict[str, GlobalVar] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    n_values: int = 0
    key: str = ""  # content hash of the module text, when known (translation cache key)


# ----------------------------------------------------------------------------- locations


def _frames(loc) -> list[Frame]:
    """Flatten an MLIR location into frames, innermost first (CallSite: callee, then caller)."""
    kind = type(loc).__name__
    if kind == "FileLineColLoc":
        return [Frame(str(loc.filename), int(loc.start_line), int(loc.start_col))]
    text = str(loc)
    if text.startswith("loc(callsite("):
        return _frames(loc.callee) + _frames(loc.caller)
    if text.startswith("loc(fused"):
        out: list[Frame] = []
        for sub in loc.locations:
            out += _frames(sub)
            if out:
                break
        return out
    if hasattr(loc, "child_loc") and text.startswith('loc("'):  # NameLoc wrapping a location
        return _frames(loc.child_loc)
    return []


def convert_loc(loc) -> Loc:
    try:
        return Loc(tuple(_frames(loc)))
    except Exception:  # an exotic location must not stop execution; report it as unknown
        return UNKNOWN_LOC


# ----------------------------------------------------------------------------- attributes


def convert_attr(attr) -> Any:
    kind = type(attr).__name__
    if kind == "IntegerAttr":
        return int(attr.value)
    if kind == "BoolAttr":
        return bool(attr.value)
    if kind == "FloatAttr":
        return float(attr.value)
    if kind == "StringAttr":
        return str(attr.value)
    if kind in ("FlatSymbolRefAttr",):
        return str(attr.value)
    if kind == "TypeAttr":
        return parse_type(str(attr.value))
    if kind == "UnitAttr":
        return True
    if kind.startswith("DenseI") and kind.endswith("ArrayAttr") or kind == "DenseF32ArrayAttr":
        return list(attr)
    if kind == "ArrayAttr":
        return [convert_attr(a) for a in attr]
    if kind in ("DenseIntElementsAttr", "DenseFPElementsAttr", "DenseElementsAttr"):
        return DenseAttr(str(attr), parse_type(str(attr.type)))
    return RawAttr(str(attr))


@dataclass(frozen=True, slots=True)
class RawAttr:
    """An attribute kept as its MLIR text (enums like `#llvm.linkage<external>`)."""

    text: str


@dataclass(frozen=True, slots=True)
class DenseAttr:
    text: str
    type: Type


# ----------------------------------------------------------------------------- conversion


class _Builder:
    def __init__(self, view: ModuleView):
        self.view = view
        self.ids: dict[int, int] = {}

    def vid(self, value) -> int:
        key = hash(value)
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = self.view.n_values
            self.view.n_values += 1
        return got

    def block(self, blk) -> Block:
        args = tuple(blk.arguments)
        return Block(
            tuple(self.vid(a) for a in args),
            tuple(parse_type(str(a.type)) for a in args),
            [self.op(o.operation) for o in blk.operations],
        )

    def op(self, op) -> Op:
        attrs = {}
        for name in op.attributes:
            attrs[name] = convert_attr(op.attributes[name])
        operands = list(op.operands)
        return Op(
            name=op.name,
            operands=tuple(self.vid(v) for v in operands),
            results=tuple(self.vid(r) for r in op.results),
            result_types=tuple(parse_type(str(r.type)) for r in op.results),
            attrs=attrs,
            regions=[[self.block(b) for b in region.blocks] for region in op.regions],
            loc=convert_loc(op.location),
            operand_types=tuple(parse_type(str(v.type)) for v in operands),
        )


def _collect(builder: _Builder, ops, view: ModuleView) -> None:
    for o in ops:
        op = o.operation
        name = op.name
        if name in ("gpu.module", "builtin.module"):
            for region in op.regions:
                for blk in region.blocks:
                    _collect(builder, blk.operations, view)
        elif name in ("gpu.func", "func.func", "llvm.func"):
            attrs = {k: convert_attr(op.attributes[k]) for k in op.attributes}
            sym = attrs.get("sym_name", "")
            body = [builder.block(b) for b in op.regions[0].blocks] if op.regions else []
            view.functions[sym] = Function(
                name=sym, kind=name, body=body, attrs=attrs, loc=convert_loc(op.location),
                is_kernel=("kernel" in attrs or "gpu.kernel" in attrs), external=not body,
            )
        elif name == "llvm.mlir.global":
            attrs = {k: convert_attr(op.attributes[k]) for k in op.attributes}
            view.globals[attrs["sym_name"]] = GlobalVar(
                name=attrs["sym_name"], addr_space=int(attrs.get("addr_space", 0)),
                type=attrs["global_type"], alignment=int(attrs.get("alignment", 1)),
                loc=convert_loc(op.location),
            )
        elif name == "memref.global":
            _memref_global(op, view)


def _memref_global(op, view: ModuleView) -> None:
    """A `memref.global` (FlyDSL's legacy SmemAllocator makes one in workgroup memory) as a
    global of its byte size, so LDS layout and `memref.get_global` see it like an LLVM one."""
    attrs = {k: convert_attr(op.attributes[k]) for k in op.attributes}
    mt = parse_memref(str(op.attributes["type"].value))
    initial = attrs.get("initial_value")
    view.globals[attrs["sym_name"]] = GlobalVar(
        name=attrs["sym_name"], addr_space=mt.space if mt else -1,
        type=Type("array", elem=Type("int", 8), count=mt.nbytes if mt else 0),
        alignment=int(attrs.get("alignment", 1)), loc=convert_loc(op.location), memref=mt,
        initial=initial if isinstance(initial, DenseAttr) else None, constant=bool(attrs.get("constant")))


def view_module(module) -> ModuleView:
    """Build a `ModuleView` from an `ir.Module` (FlyDSL's bundled bindings)."""
    view = ModuleView()
    top = module.operation
    view.attrs = {k: convert_attr(top.attributes[k]) for k in top.attributes}
    _collect(_Builder(view), module.body.operations, view)
    return view


def walk(blocks: list[Block]):
    """Every op in `blocks`, nested regions included, in program order."""
    for blk in blocks:
        for op in blk.ops:
            yield op
            for region in op.regions:
                yield from walk(region)
