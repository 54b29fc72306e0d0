"""ldssan's executors and engine: `emu/` (the virtual gfx1250), `shadow/` (the happens-before
engine), `records` (the violation ring) and `session` (binds an engine to an executor's waves).
The layers are drawn in docs/architecture.md.
"""

from __future__ import annotations

__all__ = ["reset_caches"]


def reset_caches() -> None:
    """Drop every module-level cache of ldssan (every layer's: each registers its caches with
    `passes/ir/caches.py` where it defines them), so the next launch starts from a clean slate
    (tests that must not see an earlier build's translation or footprints)."""
    from ldssan.passes.ir.caches import clear_all

    clear_all()
