"""The ldssan instrumentation pass (a Python MLIR pass in FlyDSL's pipeline).

Runs right after `convert-fly-to-rocdl` + `canonicalize`, on the structured (scf) IR.
For every LDS access, async copy, TDM op, wait, asyncmark, barrier form and fence of each
kernel it inserts one `llvm.call @__ldssan_<event>(site, ...)` (before the op, or after it
for waits and the completion half of barriers), and records the site in a table attached
to the module as `ldssan.sites`. It fails closed: an op that touches an LDS pointer in a
way this pass does not model stops compilation, naming the op and its Python line.
"""

from __future__ import annotations

import json
from collections import Counter

from .ir.errors import LdssanError
from .abi import HOOKS, ORDERINGS, scope_id
from .gfx1250 import (PLUMBING, Const, Event, MemrefAddress, Operand, asm_may_sync, classify, is_lds_memref,
                      refused)
from .ir.types import parse_memref
from .lint import lint_function
from .sites import site_entry, user_frames


class InstrumentationError(LdssanError, RuntimeError):
    """An LDS-touching op the pass does not understand (compilation stops)."""


def _ir():
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import arith, llvm

    return ir, arith, llvm


def _value_bytes(op, name: str) -> int:
    from ldssan.passes.ir.types import byte_size, parse_type

    if name == "llvm.load":
        t = op.results[0].type
    elif name == "llvm.store":
        t = op.operands[0].type
    elif name in ("llvm.atomicrmw", "llvm.cmpxchg"):
        t = op.operands[1].type
    elif name in ("memref.load", "vector.load"):
        t = op.results[0].type
    elif name in ("memref.store", "vector.store"):
        t = op.operands[0].type
    else:
        return 0
    return byte_size(parse_type(str(t)))


def _fence_attrs(op) -> dict:
    raw = str(op.attributes["ordering"]) if "ordering" in op.attributes else ""
    ordering = next((k for k, v in ORDERINGS.items() if v in raw), 0)
    if raw.split(":")[0].strip().isdigit():
        ordering = int(raw.split(":")[0])
    scope = str(op.attributes["syncscope"]).strip('"') if "syncscope" in op.attributes else ""
    return {"ordering": ordering, "scope_id": scope_id(scope)}


def _attrs(op, name: str) -> dict:
    if name == "llvm.fence":
        return _fence_attrs(op)
    if name == "llvm.inline_asm":
        return {"asm": op.attributes["asm_string"].value}
    out = {}
    for key in ("count", "id"):
        if key in op.attributes:
            out[key] = int(str(op.attributes[key]).split(":")[0])
    return out


def _lds_buffer(op, ptr_index: int) -> str | None:
    """Follow the LDS pointer back to the `llvm.mlir.addressof` of its allocation."""
    value = op.operands[ptr_index]
    for _ in range(64):
        owner = value.owner
        if not hasattr(owner, "name"):
            return None  # a block argument (loop-carried pointer)
        oname = owner.name
        if oname == "llvm.mlir.addressof":
            return str(owner.attributes["global_name"]).lstrip("@")
        if oname in ("llvm.getelementptr", "llvm.bitcast", "llvm.select", "arith.select"):
            value = owner.operands[1 if "select" in oname else 0]
            continue
        return None
    return None


def _first_use(op):
    """The op, in `op`'s own block, at or around the first use of its result (None if unused).

    That is where LLVM's SIInsertWaitcnts puts the s_wait_dscnt for the load's VGPRs."""
    block = op.block
    first = None
    for use in op.results[0].uses:
        user = use.owner
        user = getattr(user, "operation", user)
        while user is not None and user.block != block:
            parent = user.parent
            user = getattr(parent, "operation", parent) if parent is not None else None
        if user is not None and (first is None or user.is_before_in_block(first)):
            first = user
    return first


def _touches_lds(op) -> bool:
    return any(str(v.type).replace(" ", "") == "!llvm.ptr<3>" or is_lds_memref(str(v.type)) for v in op.operands)


def _memref_buffer(value) -> str | None:
    """Follow an LDS memref back to the `memref.get_global` of its buffer."""
    for _ in range(64):
        owner = getattr(value.owner, "operation", value.owner)  # an OpView's `name` may be its attribute
        if not hasattr(owner, "name"):
            return None  # a block argument
        if owner.name == "memref.get_global":
            return str(owner.attributes["name"]).lstrip("@")
        if owner.name != "memref.view":
            return None
        value = owner.operands[0]
    return None


class Instrumenter:
    def __init__(self, module_op):
        self.module_op = module_op
        self.sites: list[dict] = []
        self.coverage: dict[str, Counter] = {}
        self.lint: list[dict] = []  # fence-pairing findings (passes/lint.py), site ids

    def run(self) -> None:
        ir, _arith, _llvm = _ir()
        for gpu_module in self._gpu_modules():
            body = gpu_module.regions[0].blocks[0]
            kernels = [o for o in body.operations if o.operation.name == "gpu.func"]
            if kernels:
                self._declare_hooks(body)
            for k in kernels:
                name = str(k.operation.attributes["sym_name"]).strip('"')
                self.coverage[name] = Counter()
                self._function(k.operation, name)
                self.lint += [f.to_dict(name) for f in lint_function(k.operation)]
        attrs = self.module_op.attributes
        attrs["ldssan.emu"] = ir.StringAttr.get("1")
        attrs["ldssan.sites"] = ir.StringAttr.get(json.dumps({"sites": self.sites, "lint": self.lint}))
        attrs["ldssan.coverage"] = ir.StringAttr.get(
            json.dumps({k: dict(v) for k, v in self.coverage.items()}))

    def _gpu_modules(self):
        for region in self.module_op.regions:
            for blk in region.blocks:
                for o in blk.operations:
                    if o.operation.name == "gpu.module":
                        yield o.operation

    def _declare_hooks(self, body) -> None:
        ir, _arith, _llvm = _ir()
        have = {str(o.operation.attributes["sym_name"]).strip('"') for o in body.operations
                if o.operation.name == "llvm.func"}
        for name, hook in HOOKS.items():
            if name in have:
                continue
            args = ", ".join(("i32",) + hook.operands)
            decl = ir.Operation.parse(f"llvm.func @{name}({args})")
            ir.InsertionPoint.at_block_begin(body).insert(decl)

    def _function(self, fn, kernel: str) -> None:
        todo = []
        fn.walk(lambda o: todo.append(o.operation) or _advance(), ir_walk_order())
        for op in todo:
            self._op(op, kernel)

    def _op(self, op, kernel: str) -> None:
        name = op.name
        if name == "llvm.call" and str(op.attributes["callee"]).lstrip("@").startswith("__ldssan_"):
            return
        if refused(name):
            raise self._error(op, "is not modelled by ldssan yet")
        event = classify(name, [str(v.type) for v in op.operands], value_bytes=_value_bytes(op, name),
                         attrs=_attrs(op, name))
        if event is None:
            if name == "llvm.inline_asm" and asm_may_sync(op.attributes["asm_string"].value):
                text = op.attributes["asm_string"].value.strip().splitlines()
                raise self._error(op, f"(asm \"{text[0] if text else ''}\") may touch LDS or its "
                                      "synchronisation and is not in ldssan's inline-asm table")
            if _touches_lds(op):
                raise self._error(op, "touches LDS through a path the ldssan pass does not understand")
            return
        if event is PLUMBING:
            return
        self._insert(op, event, kernel)

    def _insert(self, op, event: Event, kernel: str) -> None:
        ir, arith, llvm = _ir()
        site = len(self.sites)
        ptr_index = next((a.index for c in event.calls for a in c.args if isinstance(a, Operand)), None)
        at = next((a for c in event.calls for a in c.args if isinstance(a, MemrefAddress)), None)
        if at is not None:
            buffer = _memref_buffer(op.operands[at.memref])
        else:
            buffer = _lds_buffer(op, ptr_index) if event.kind.startswith(("ds_", "dma_")) else None
        entry = site_entry(site, event.kind, op.name, op.location, nbytes=event.bytes, buffer=buffer)
        entry["kernel"] = kernel
        self.sites.append(entry)
        self.coverage[kernel][event.kind] += 1
        i32 = ir.IntegerType.get_signless(32)
        if event.kind in ("ds_read", "ds_atomic") and len(op.results):
            user = _first_use(op)
            if user is not None:
                with ir.InsertionPoint(user), op.location:
                    llvm.call(None, [arith.ConstantOp(i32, site).result], [], [], callee="__ldssan_use")
        for call in event.calls:
            ip = ir.InsertionPoint(op) if call.where == "before" else ir.InsertionPoint.after(op)
            with ip, op.location:
                args = [arith.ConstantOp(i32, site).result]
                for a in call.args:
                    if isinstance(a, Operand):
                        args.append(op.operands[a.index])
                    elif isinstance(a, Const):
                        args.append(arith.ConstantOp(i32, int(a.value)).result)
                    elif isinstance(a, MemrefAddress):
                        args.append(self._memref_address(op, a))
                llvm.call(None, args, [], [], callee=call.hook)

    def _memref_address(self, op, at: MemrefAddress):
        """IR computing the `!llvm.ptr<3>` of a memref access, as MLIR's memref lowering
        does: aligned base + (offset + sum(index_k * stride_k)) * element bytes."""
        ir, arith, llvm = _ir()
        from flydsl._mlir.dialects import memref

        from ldssan.passes.ir.types import byte_size

        m = op.operands[at.memref]
        mt = parse_memref(str(m.type))
        if mt is None:
            raise self._error(op, f"accesses an LDS memref of type {m.type}, whose layout the pass "
                                  "cannot compute (only static shapes and strides)")
        index = ir.IndexType.get()
        esize = byte_size(mt.elem)
        addr = memref.extract_aligned_pointer_as_index(m)
        indices = list(op.operands)[at.first_index:]
        for idx, stride in zip(indices, mt.strides):
            if stride:
                addr = arith.addi(addr, arith.muli(idx, arith.ConstantOp(index, stride * esize).result))
        if mt.offset:
            addr = arith.addi(addr, arith.ConstantOp(index, mt.offset * esize).result)
        i32 = ir.IntegerType.get_signless(32)
        return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), arith.index_cast(i32, addr))

    def _error(self, op, what: str) -> InstrumentationError:
        frames = user_frames(op.location)
        where = f"{frames[0].file}:{frames[0].line}" if frames else str(op.location)
        return InstrumentationError(f"ldssan: op '{op.name}' at {where} {what}; refusing to "
                                    "instrument a kernel whose LDS traffic it cannot see")


def _advance():
    from flydsl._mlir import ir

    return ir.WalkResult.ADVANCE


def ir_walk_order():
    from flydsl._mlir import ir

    return ir.WalkOrder.PRE_ORDER


def instrument_pass(op, pass_=None) -> None:
    """Entry point registered for the `ldssan{mode=san}` sentinel."""
    Instrumenter(op).run()


def coverage_line(coverage_json: str) -> list[str]:
    """One line per kernel: sites by kind (for `ldssan` coverage output)."""
    data = json.loads(coverage_json)
    lines = []
    for kernel, kinds in data.items():
        total = sum(kinds.values())
        parts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        lines.append(f"ldssan: {kernel}: {total} sites ({parts or 'no LDS sync sites'})")
    return lines
