"""ldssan's executors and engine: `emu/` (the virtual gfx1250), `shadow/` (the happens-before
engine), `records` (the violation ring) and `session` (binds an engine to an executor's waves).
The layers are drawn in docs/architecture.md.
"""

from __future__ import annotations

import sys

__all__ = ["reset_caches"]

# (module, name of its clear function). Each cache is a pure speed-up: clearing one only costs
# a rebuild. Modules not imported yet hold nothing, so they are skipped rather than imported
# (this package's import stays cheap, and the plugin imports it early).
_CACHE_OWNERS = (
    ("ldssan.runtime.emu.codegen", "clear_cache"),      # translated wave programs by IR hash
    ("ldssan.runtime.emu.rt.crosslane", "clear_plans"),  # uniform shuffle index plans
    ("ldssan.runtime.emu.frontend", "clear_caches"),    # parsed artifact modules, source digest
    ("ldssan.runtime.shadow", "clear_caches"),          # TDM / lane-operand footprints
    ("ldssan.runtime.emu.tdm", "clear_cache"),          # decoded TDM descriptors by raw words
)


def reset_caches() -> None:
    """Drop every module-level cache of the runtime, so the next launch starts from a clean
    slate (tests that must not see an earlier build's translation or footprints)."""
    for module_name, fn_name in _CACHE_OWNERS:
        module = sys.modules.get(module_name)
        clear = getattr(module, fn_name, None) if module is not None else None
        if clear is not None:
            clear()
    sites = sys.modules.get("ldssan.passes.sites")
    if sites is not None:
        # function spans are read from kernel files, which a campaign rewrites between builds
        sites._function_spans.cache_clear()
