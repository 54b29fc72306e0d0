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

    return emit


for _name in HOOKS:
    emits(f"call:{_name}")(_emit_hook(_name))
