"""Calls to the `__ldssan_*` hooks inserted by the instrumentation pass.

Each becomes a call on the wave's hook adapter (`ctx.san`, see `hooks.py`): the
happens-before engine when sanitizing, a no-op adapter otherwise.
"""

from __future__ import annotations

from ldssan.passes.abi import HOOKS

from ldssan.passes.ir.irview import Op
from . import emits


def _emit_hook(name: str):
    method = name.removeprefix("__ldssan_")
    hook = HOOKS[name]

    def emit(t, op: Op) -> None:
        if len(op.operands) != 1 + len(hook.operands):
            raise t.unsupported(op, f"@{name} takes {1 + len(hook.operands)} operands, got {len(op.operands)}")
        site, *rest = op.operands
        args = []
        for vid, ty in zip(rest, hook.operands):
            # per-lane pointers stay arrays; everything else of the ABI is wave-uniform
            args.append(t.lanes(vid) if ty.startswith("!llvm.ptr") else f"int({t.v(vid)})" if ty == "i32" else t.v(vid))
        call = ", ".join([f"int({t.v(site)})", *args, t.mask])
        t.out(f"ctx.san.{method}({call})")
        if name == "__ldssan_ds":
            _stored(t, op, site)

    return emit


# the stores whose value operand (operand 0) the engine gets after their ds event
STORES = frozenset({"llvm.store", "memref.store", "vector.store"})


def _stored(t, op: Op, site: int) -> None:
    """After a store's ds event: the bytes it stores (`ShadowHooks.stored`), so that two
    unordered stores of identical bytes are named LDS004, a warning. The pass inserts the
    hook right before the op it instruments."""
    following = _next_ops(t).get(id(op))
    if following is not None and following.name in STORES:
        t.out(f"ctx.san.stored(int({t.v(site)}), {t.lanes(following.operands[0])}, {t.mask})")


def _next_ops(t) -> dict:
    """id(op) -> the op after it in its block, for the function being translated (cached)."""
    cached = getattr(t, "_ldssan_next_ops", None)
    if cached is None:
        cached = {}
        todo = list(t.fn.body)
        while todo:
            blk = todo.pop()
            for a, b in zip(blk.ops, blk.ops[1:]):
                cached[id(a)] = b
            for o in blk.ops:
                for region in o.regions:
                    todo.extend(region)
        t._ldssan_next_ops = cached
    return cached


for _name in HOOKS:
    emits(f"call:{_name}")(_emit_hook(_name))
