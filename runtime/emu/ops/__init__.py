"""Op emitters of the virtual gfx1250: one small function per MLIR op, keyed by op name.

An emitter receives the `Translator` and the `Op` and writes the Python lines that run the
op for one wave (see `codegen.py` for the value layout). Registering a name twice is an
error, and an op with no emitter stops translation with `UnsupportedOp` naming the op and
its Python source line.
"""

from __future__ import annotations

from typing import Callable

EMITTERS: dict[str, Callable] = {}


def emits(*names: str):
    def register(fn):
        for name in names:
            if name in EMITTERS:
                raise RuntimeError(f"ldssan-emu: op {name!r} registered twice ({EMITTERS[name].__name__}, {fn.__name__})")
            EMITTERS[name] = fn
        return fn

    return register


def one_line(template: str) -> Callable:
    """An emitter that writes one line: `template` with `{r}` = the op's first result,
    `{x}` = its first operand, `{mask}` = the exec mask."""
    def emit(t, op) -> None:
        if ("{r}" in template and not op.results) or ("{x}" in template and not op.operands):
            raise t.unsupported(op, "the op lacks the result or operand its emitter writes")
        t.out(template.format(r=t.v(op.results[0]) if op.results else "",
                              x=t.v(op.operands[0]) if op.operands else "", mask=t.mask))

    return emit


def load_all() -> dict[str, Callable]:
    """Import every dialect module so their emitters register (idempotent)."""
    from . import (arith, copies, gpu, inline_asm, intrinsics, llvm, math, memref, rocdl, sanitizer,  # noqa: F401
                   scf, vector, wmma)

    return EMITTERS
