"""A launch's arguments: the host function's values, decoded from FlyDSL's argument slots,
and the pointers among them checked against the launch's memory.

FlyDSL's own host function is run like a kernel (launch.py); its argument values are
decoded from the bytes FlyDSL's own fills wrote into its ctypes slots, read as the host
function's parameter types (one slot per parameter): a dynamic-layout tensor's shape/stride
slot is a byte buffer holding a packed `!llvm.struct`, an f16/bf16 scalar a `c_short` bit
pattern. Pointer parameters must point into tensor memory the launch can prove (see
`memory.py`); any other address is an error naming the argument.
"""

from __future__ import annotations

import numpy as np

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.irview import ModuleView, walk
from ldssan.passes.ir.types import Type, byte_size

from .errors import EmuLaunchError
from .memory import EmuMemoryError, GlobalMemory


def host_arguments(view: ModuleView, host: str, raws: list[bytes], names: list[str]) -> list:
    """The host function's argument values, decoded from the raw bytes of FlyDSL's slots."""
    fn = view.functions.get(host)
    if fn is None or not fn.body:
        raise EmuLaunchError(f"ldssan-emu: the module has no host function @{host}")
    types = fn.body[0].arg_types
    if len(types) != len(raws):
        raise EmuLaunchError(
            f"ldssan-emu: @{host} takes {len(types)} parameters but FlyDSL packed {len(raws)} argument "
            f"slots ({', '.join(names)}); this argument form is not supported: please report")
    return [_decode_slot(t, raw, name) for t, raw, name in zip(types, raws, names)]


def _decode_slot(t: Type, raw: bytes, name: str):
    if t.kind == "other":
        if t.name == "!gpu.async.token":
            return np.int64(int.from_bytes(raw, "little"))  # the stream: unused here
        raise EmuLaunchError(f"ldssan-emu: argument {name}: cannot pass a value of type {t} to the virtual gfx1250")
    try:
        # The MLIR type as parsed does not say `packed`; the slot's size does: a natural
        # layout with padding is larger than the packed one; without padding both agree.
        if len(raw) == _layout(t, packed=True)[0]:
            packed = True
        elif len(raw) == _layout(t, packed=False)[0]:
            packed = False
        else:
            raise EmuLaunchError(
                f"ldssan-emu: argument {name}: FlyDSL packed {len(raw)} bytes for a parameter of type {t} "
                f"({byte_size(t)} bytes); this argument form is not supported: please report")
        return _decode(t, raw, 0, packed=packed)
    except TypeError as exc:  # a member type with no host representation (byte_size / dtype_of)
        raise EmuLaunchError(f"ldssan-emu: argument {name}: cannot pass a value of type {t} to the "
                             f"virtual gfx1250 ({exc}): please report") from exc


def _align(t: Type) -> int:
    if t.kind == "struct":
        return max((_align(f) for f in t.fields), default=1)
    if t.kind == "array":
        return _align(t.elem)
    n = byte_size(t)
    return 1 << (n - 1).bit_length()  # scalars: their size; vectors: size rounded to a power of 2


def _layout(t: Type, *, packed: bool) -> tuple[int, list[int]]:
    """(size, member offsets) of a struct/array as LLVM lays it out; (size, []) for scalars."""
    members = t.fields if t.kind == "struct" else (t.elem,) * t.count if t.kind == "array" else None
    if members is None:
        return byte_size(t), []
    cur, offs = 0, []
    for m in members:
        if not packed:
            a = _align(m)
            cur = (cur + a - 1) // a * a
        offs.append(cur)
        cur += _layout(m, packed=packed)[0]
    if not packed:
        a = _align(t)
        cur = (cur + a - 1) // a * a
    return cur, offs


def _decode(t: Type, raw: bytes, at: int, *, packed: bool):
    if t.kind in ("struct", "array"):
        members = t.fields if t.kind == "struct" else (t.elem,) * t.count
        _size, offs = _layout(t, packed=packed)
        return tuple(_decode(m, raw, at + o, packed=packed) for m, o in zip(members, offs))
    if t.kind == "vector":
        return np.frombuffer(raw, dtype=t.dtype, count=t.count, offset=at).copy()
    if t.kind == "int" and t.width == 1:
        return np.bool_(raw[at] != 0)
    return np.frombuffer(raw, dtype=t.dtype, count=1, offset=at)[0]


def _pointer_leaves(t: Type, value, name: str):
    """(name, address) of every global pointer inside an argument value."""
    if t.kind == "ptr" and t.width in (0, 1):
        yield name, int(value)
    elif t.kind in ("struct", "array"):
        members = t.fields if t.kind == "struct" else (t.elem,) * t.count
        for i, (m, v) in enumerate(zip(members, value)):
            yield from _pointer_leaves(m, v, f"{name}.{i}")


def bind_pointers(gmem: GlobalMemory, view: ModuleView, host: str, values: list, names: list[str]) -> None:
    """Check every pointer argument against the launch's memory; resolve raw addresses.

    A pointer outside the argument tensors (`from_c_void_p`, an integer address) is looked
    up among the process's live CPU tensors and that storage joins the launch; one found
    nowhere is an error naming the argument, never a read of unknown host memory. A launch
    with raw-address arguments, or whose kernels build global pointers from integers
    (`llvm.inttoptr`), may reach every live tensor; others only their argument tensors."""
    raw = False
    for t, v, name in zip(view.functions[host].body[0].arg_types, values, names):
        for leaf, addr in _pointer_leaves(t, v, name):
            if addr == 0 or gmem.find(addr) is not None:
                continue
            if gmem.add_process_tensor(addr, 1, f"argument {leaf}") is None:
                raise EmuMemoryError(
                    f"ldssan-emu: argument {leaf} is the address 0x{addr:x}, which is in no live CPU torch "
                    "tensor of this process; the virtual gfx1250 reaches only tensor memory (pass the "
                    "tensor itself, or keep the tensor alive across the launch)")
            raw = True
    gmem.reach_process = raw or builds_global_pointers(view)


def builds_global_pointers(view: ModuleView) -> bool:
    """Whether a kernel of the module turns integers into global pointers (cached per view)."""
    got = _BUILDS_POINTERS.get(id(view))
    if got is None or got[0] is not view:
        found = any(op.name == "llvm.inttoptr" and op.result_types[0].kind == "ptr"
                    and op.result_types[0].width in (0, 1)
                    for fn in view.functions.values() if fn.is_kernel for op in walk(fn.body))
        got = _BUILDS_POINTERS[id(view)] = (view, found)
    return got[1]


_BUILDS_POINTERS: dict[int, tuple[ModuleView, bool]] = register_cache({})
