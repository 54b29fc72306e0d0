"""What each gfx1250 op means to ldssan: classification hooks returning small records.

The pass never matches op names itself; it asks `classify(name, operand_types, ...)`,
which returns the hook calls to insert, `PLUMBING` for ops that only move LDS pointers
around, or `None`. Every table entry is explicit (no substring matching), so an op this
file does not list is, if it touches an LDS pointer, a fail-closed error in the pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .ir.types import parse_memref
from .abi import ASYNC_WIDTH_BYTES, WAIT_ASYNCMARK, BarrierForm, CopyKind, Counter, DsKind


@dataclass(frozen=True)
class Operand:
    index: int


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class MemrefAddress:
    """The LDS address of a memref access, as an `!llvm.ptr<3>` the pass computes: element
    (operands[first_index:]) of the memref at operands[memref]."""

    memref: int
    first_index: int


@dataclass(frozen=True)
class HookCall:
    hook: str  # "__ldssan_ds", ...
    where: str  # "before" | "after"
    args: tuple  # Operand / Const / "fence" markers, after the site id


@dataclass(frozen=True)
class Event:
    """One site: its kind (for the site table and coverage) and the hook calls it needs."""

    kind: str
    calls: tuple[HookCall, ...]
    bytes: int = 0


PLUMBING = "plumbing"

# Ops that carry, compute or compare LDS pointers without touching LDS memory.
POINTER_PLUMBING = frozenset({
    "llvm.getelementptr", "llvm.ptrtoint", "llvm.select", "arith.select", "llvm.icmp",
    "llvm.insertvalue", "llvm.extractvalue", "llvm.bitcast", "scf.yield", "scf.if", "scf.for",
    "scf.while", "scf.condition", "llvm.mlir.addressof", "llvm.intr.ptrmask",
})

_LDS_ACCESS = {"llvm.load": DsKind.READ, "llvm.store": DsKind.WRITE,
               "llvm.atomicrmw": DsKind.ATOMIC, "llvm.cmpxchg": DsKind.ATOMIC}
_DS_KIND_NAME = {DsKind.READ: "ds_read", DsKind.WRITE: "ds_write", DsKind.ATOMIC: "ds_atomic"}
# operand index of the LDS pointer, and of the value whose size is the access size
_PTR_OPERAND = {"llvm.load": 0, "llvm.store": 1, "llvm.atomicrmw": 0, "llvm.cmpxchg": 0}
_VALUE_OPERAND = {"llvm.store": 0, "llvm.atomicrmw": 1, "llvm.cmpxchg": 1}

ASYNC_COPIES: dict[str, tuple[CopyKind, int, int]] = {}  # name -> (kind, LDS ptr operand, bytes)
for _suffix, _nb in ASYNC_WIDTH_BYTES.items():
    ASYNC_COPIES[f"rocdl.global.load.async.to.lds.{_suffix}"] = (CopyKind.TO_LDS, 1, _nb)
    ASYNC_COPIES[f"rocdl.cluster.load.async.to.lds.{_suffix}"] = (CopyKind.TO_LDS, 1, _nb)
    ASYNC_COPIES[f"rocdl.global.store.async.from.lds.{_suffix}"] = (CopyKind.FROM_LDS, 1, _nb)

# LDS transpose loads: each lane reads its own contiguous bytes like a ds_load of that width
# (the cross-lane redistribution happens after the read), so they are ds reads.
DS_TRANSPOSE_LOADS = {"rocdl.ds.load.tr16.b128": 16}

TDM_OPS = {"rocdl.tensor.load.to.lds": CopyKind.TO_LDS, "rocdl.tensor.store.from.lds": CopyKind.FROM_LDS}

WAITS = {
    "rocdl.s.wait.dscnt": Counter.DS, "rocdl.s.wait.loadcnt": Counter.LOAD,
    "rocdl.s.wait.storecnt": Counter.STORE, "rocdl.s.wait.asynccnt": Counter.ASYNC,
    "rocdl.s.wait.tensorcnt": Counter.TENSOR, "rocdl.wait.asyncmark": WAIT_ASYNCMARK,
}

BARRIERS = {
    "gpu.barrier": (BarrierForm.FENCED_ARRIVE, BarrierForm.FENCED_DONE),
    "rocdl.barrier": (BarrierForm.FENCED_ARRIVE, BarrierForm.FENCED_DONE),
    "rocdl.s.barrier": (BarrierForm.BARE_ARRIVE, BarrierForm.BARE_DONE),
    "rocdl.s.barrier.signal": (BarrierForm.SIGNAL, None),
    # a signal that also returns whether this wave signalled first: the same event
    "rocdl.s.barrier.signal.isfirst": (BarrierForm.SIGNAL, None),
    "rocdl.s.barrier.wait": (None, BarrierForm.WAIT),
}

# Loads and stores through memrefs (FlyDSL's legacy SmemAllocator): (kind, memref operand).
MEMREF_ACCESS = {"memref.load": (DsKind.READ, 0), "vector.load": (DsKind.READ, 0),
                 "memref.store": (DsKind.WRITE, 1), "vector.store": (DsKind.WRITE, 1)}
# Ops that name or view workgroup memrefs without touching LDS memory.
MEMREF_PLUMBING = frozenset({"memref.get_global", "memref.view", "memref.extract_aligned_pointer_as_index"})

# Inline-asm waits real gfx1250 kernels write (ROCm/aiter's FlyDSL fmha), as the rocdl wait
# ops they equal: `s_wait_dscnt N`, and `s_wait_idle` (every counter of the wave at zero).
INLINE_ASM_WAITS = (r"s_wait_dscnt\s+(?:0x[0-9a-fA-F]+|\d+)", r"s_wait_idle")
_IDLE = ("rocdl.s.wait.dscnt", "rocdl.s.wait.loadcnt", "rocdl.s.wait.storecnt", "rocdl.s.wait.asynccnt",
         "rocdl.s.wait.tensorcnt")
# Words of asm text that may touch LDS or its synchronisation: such asm outside the table is
# refused by the pass (fail closed), not run unseen.
ASM_SYNC_WORDS = ("ds_", "lds", "s_barrier", "s_wait", "tensor_", "async", "s_setreg", "s_sleep_var")


def inline_asm_waits(text: str) -> list[tuple[str, int]] | None:
    """The (rocdl wait op, count) pairs an inline-asm text equals, or None."""
    text = text.strip()
    m = re.fullmatch(r"s_wait_dscnt\s+(0x[0-9a-fA-F]+|\d+)", text)
    if m:
        return [("rocdl.s.wait.dscnt", int(m.group(1), 0))]
    if text == "s_wait_idle":
        return [(name, 0) for name in _IDLE]
    return None


def asm_may_sync(text: str) -> bool:
    return any(w in text.lower() for w in ASM_SYNC_WORDS)


# LDS-touching ops the emulator and the engine do not model yet: refused, by name.
REFUSED = frozenset({
    "rocdl.ds.atomic.barrier.arrive.rtn.b64", "rocdl.ds.atomic.async.barrier.arrive.b64",
    "rocdl.s.barrier.signal.var", "rocdl.s.barrier.init", "rocdl.s.barrier.join",
    "rocdl.s.barrier.leave",
    # their lane redistribution is not defined in public text (ds.load.tr16.b128's is)
    "rocdl.ds.load.tr4.b64", "rocdl.ds.load.tr8.b64", "rocdl.ds.load.tr6.b96",
    "rocdl.load.async.to.lds", "rocdl.global.load.async.lds", "rocdl.raw.ptr.buffer.load.async.lds",
})


def _is_lds_ptr(t: str) -> bool:
    return t.replace(" ", "") == "!llvm.ptr<3>"


def is_lds_memref(t: str) -> bool:
    if not t.startswith("memref<"):
        return False
    mt = parse_memref(t)
    # a workgroup memref the parser cannot describe still counts: the pass refuses it
    return (mt is not None and mt.space == 3) or "#gpu.address_space<workgroup>" in t


def classify(name: str, operand_types: list[str], *, value_bytes: int = 0, attrs: dict | None = None):
    """The `Event` for an op, `PLUMBING`, or None (not LDS related)."""
    attrs = attrs or {}
    if name in MEMREF_ACCESS:
        kind, m = MEMREF_ACCESS[name]
        if not is_lds_memref(operand_types[m]):
            return None
        return Event(_DS_KIND_NAME[kind], (HookCall("__ldssan_ds", "before", (
            MemrefAddress(m, m + 1), Const(value_bytes), Const(int(kind)))),), value_bytes)
    if name in MEMREF_PLUMBING:
        return PLUMBING
    if name == "llvm.inline_asm":
        waits = inline_asm_waits(attrs.get("asm", ""))
        if waits is None:
            return None
        return Event("wait", tuple(HookCall("__ldssan_wait", "after", (Const(int(WAITS[w])), Const(n)))
                                   for w, n in waits))
    if name in _LDS_ACCESS:
        ptr = _PTR_OPERAND[name]
        if not _is_lds_ptr(operand_types[ptr]):
            return None
        kind = _LDS_ACCESS[name]
        return Event(_DS_KIND_NAME[kind], (HookCall("__ldssan_ds", "before",
                                                    (Operand(ptr), Const(value_bytes), Const(int(kind)))),),
                     value_bytes)
    if name in DS_TRANSPOSE_LOADS:
        nb = DS_TRANSPOSE_LOADS[name]
        return Event("ds_read", (HookCall("__ldssan_ds", "before", (Operand(0), Const(nb), Const(int(DsKind.READ)))),),
                     nb)
    if name in ASYNC_COPIES:
        kind, ptr, nb = ASYNC_COPIES[name]
        label = "dma_to_lds" if kind == CopyKind.TO_LDS else "dma_from_lds"
        return Event(label, (HookCall("__ldssan_dma", "before", (Operand(ptr), Const(nb), Const(int(kind)))),), nb)
    if name in TDM_OPS:
        kind = TDM_OPS[name]
        label = "tdm_load" if kind == CopyKind.TO_LDS else "tdm_store"
        return Event(label, (HookCall("__ldssan_tdm", "before",
                                      (Operand(0), Operand(1), Operand(2), Operand(3), Const(int(kind)))),))
    if name in WAITS:
        return Event("wait", (HookCall("__ldssan_wait", "after",
                                       (Const(int(WAITS[name])), Const(int(attrs.get("count", 0))))),))
    if name == "rocdl.asyncmark":
        return Event("mark", (HookCall("__ldssan_mark", "after", ()),))
    if name in BARRIERS:
        before, after = BARRIERS[name]
        bid = int(attrs.get("id", -1))
        calls = []
        if before is not None:
            calls.append(HookCall("__ldssan_barrier", "before", (Const(int(before)), Const(bid))))
        if after is not None:
            calls.append(HookCall("__ldssan_barrier", "after", (Const(int(after)), Const(bid))))
        return Event("barrier", tuple(calls))
    if name == "llvm.fence":
        return Event("fence", (HookCall("__ldssan_fence", "before",
                                        (Const(int(attrs.get("ordering", 0))), Const(int(attrs.get("scope_id", 0))))),))
    if name in POINTER_PLUMBING:
        return PLUMBING
    return None


def refused(name: str) -> bool:
    return name in REFUSED
