"""memref dialect: the ops FlyDSL kernels can still carry at stage 10. Only refusals so far,
each naming what is not modelled (the emulator's LDS is the lowered `llvm` form)."""

from __future__ import annotations

from ldssan.passes.ir.irview import Op
from . import emits


@emits("memref.get_global")
def get_global(t, op: Op) -> None:
    raise t.unsupported(op, "a memref.global buffer (FlyDSL's legacy SmemAllocator, used through "
                            "memref.view / vector.load) is not modelled; fx.SharedAllocator LDS is")
