"""memref dialect: the ops FlyDSL kernels still carry at stage 10, from its legacy
SmemAllocator (`memref.global` in workgroup memory, `get_global`, `view`, loads and stores,
`vector.load/store` on memrefs) and TDM descriptors built from an LDS memref
(`extract_aligned_pointer_as_index`).

A memref value is held as its aligned base address, like a pointer (`types.py`): an LDS byte
offset for workgroup memory, a host address for global memory. Its type (static shape and
strides, `types.MemRef`) gives each access's address: base + (offset + sum(i_k * stride_k))
* element bytes, which is what MLIR's memref-to-LLVM lowering computes. A memref this cannot
describe (dynamic shape or strides, an affine layout) is refused at the op using it.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op
from ldssan.passes.ir.types import MemRef, Type, byte_size, parse_memref
from . import emits
from .arith import _dtype_expr
from .llvm import emit_load, emit_store


def _memref(t, op: Op, ty: Type) -> MemRef:
    mt = parse_memref(ty.name)
    if mt is None:
        raise t.unsupported(op, f"a {ty.name} (only static shapes and strides are modelled)")
    return mt


@emits("memref.get_global")
def get_global(t, op: Op) -> None:
    name = op.attr("name")
    g = t.view.globals.get(name)
    res = t.v(op.results[0])
    if g is None or g.memref is None:
        raise t.unsupported(op, f"@{name} is not a memref.global of static shape and layout in this module")
    if g.addr_space == 3:
        t.out(f"{res} = np.int64(ctx.lds_offsets[{name!r}])")
    elif g.addr_space in (0, 1) and g.constant and g.initial is not None:
        count = g.memref.nbytes // byte_size(g.memref.elem)
        t.out(f"{res} = R.constant_global(ctx, {name!r}, {g.initial.text!r}, {_dtype_expr(g.memref.elem)}, {count})")
    else:
        raise t.unsupported(op, f"@{name} is a {'mutable' if not g.constant else 'uninitialized'} global "
                                f"in address space {g.addr_space}: only LDS buffers and constants with an "
                                "initial value are modelled (a device variable keeps its value across launches)")


def _address(t, op: Op, mt: MemRef, base: int, indices) -> tuple[str, bool]:
    """A temporary holding the byte address of element `indices` of the memref at `base`, and
    whether it is uniform."""
    esize = byte_size(mt.elem)
    terms = [f"np.asarray({t.v(i)}, np.int64) * {s * esize}" for i, s in zip(indices, mt.strides) if s]
    if mt.offset:
        terms.append(str(mt.offset * esize))
    addr = t.tmp("a")
    t.out(f"{addr} = np.int64({t.v(base)}) + " + (" + ".join(terms) or "0") if t.uniform(base) else
          f"{addr} = {t.v(base)} + " + (" + ".join(terms) or "0"))
    return addr, all(t.uniform(v) for v in (base, *indices))


LOADS = ("memref.load", "vector.load")
STORES = ("memref.store", "vector.store")


def access(t, op: Op) -> tuple[int, str, str]:
    """Write the address of a memref load/store: (address space, the address expression, the
    same in per-lane shape)."""
    memref_at = 0 if op.name in LOADS else 1
    base, *indices = op.operands[memref_at:]
    mt = _memref(t, op, op.operand_types[memref_at])
    value_type = op.result_types[0] if op.name in LOADS else op.operand_types[0]
    if value_type.kind == "vector" and mt.strides and mt.strides[-1] != 1:
        raise t.unsupported(op, "a vector access along a memref dimension of stride "
                                f"{mt.strides[-1]} (not contiguous)")
    addr, uniform = _address(t, op, mt, base, indices)
    return mt.space, addr, f"R.lanes({addr}, L)" if uniform else addr


@emits(*LOADS)
def load(t, op: Op) -> None:
    space, addr, addr_lanes = access(t, op)
    emit_load(t, op.results[0], op.result_types[0], space, addr, addr_lanes)
    if t.taint:  # `ldssan rows` (taint.py, which leaves memref accesses to this module)
        kn, nb = repr(t.fn.name), byte_size(op.result_types[0])
        t.out(f"Tv{op.results[0]} = " + (f"R.t_lds_load(ctx, {kn}, {addr}, {nb}, {t.mask})" if space == 3 else
                                         f"R.t_global_load(ctx, {addr_lanes}, {nb}, {t.mask})"))


@emits(*STORES)
def store(t, op: Op) -> None:
    space, addr, addr_lanes = access(t, op)
    emit_store(t, op.operands[0], space, addr)
    if t.taint:
        val, kn, nb = op.operands[0], repr(t.fn.name), byte_size(op.operand_types[0])
        t.out(f"R.t_lds_store(ctx, {kn}, {addr}, {nb}, Tv{val}, {t.mask})" if space == 3 else
              f"R.t_global_store(ctx, {addr_lanes}, {nb}, Tv{val}, {t.mask})")


@emits("memref.view")
def view(t, op: Op) -> None:
    # the view's aligned base is the source's plus the byte shift; sizes only matter to a
    # dynamic shape, which an access then refuses
    src, shift = op.operands[:2]
    t.out(f"{t.v(op.results[0])} = {t.v(src)} + np.asarray({t.v(shift)}, np.int64)[()]")


@emits("memref.extract_aligned_pointer_as_index")
def aligned_pointer(t, op: Op) -> None:
    t.out(f"{t.v(op.results[0])} = {t.v(op.operands[0])}")
