"""A sanitized run's modules left unchecked by its scope (`EmuConfig.scope`): which kernels a
traced module has, and the plain-emulation pipeline it is then built with."""

from __future__ import annotations

from ldssan.passes.ir.irview import Loc, convert_loc

SENTINEL = "ldssan"  # frontend.SENTINEL (kept here: frontend imports this module)


def module_kernels(module) -> list[tuple[str, str]]:
    """(symbol, defining file) of each kernel of a traced module, before any pass ran."""
    out = []
    for top in module.body.operations:
        if top.operation.name != "gpu.module":
            continue
        for op in top.operation.regions[0].blocks[0].operations:
            attrs = op.operation.attributes
            if op.operation.name == "gpu.func" and "gpu.kernel" in attrs:
                out.append((attrs["sym_name"].value, file_of(convert_loc(op.location))))
    return out


def file_of(loc: Loc) -> str:
    return loc.frame.file if loc.frame is not None else ""


def unchecked_fragments(fragments: list[str], plain: str) -> list[str]:
    """A sanitized pipeline made plain emulation: its sentinel replaced by `plain` (the
    mode=emu fragment), and nothing after it (a device runtime build's lowering only serves
    its linked runtime)."""
    at = next(i for i, f in enumerate(fragments) if f.startswith(SENTINEL + "{"))
    return [*fragments[:at], plain]
