"""The happens-before engine for LDS on gfx1250 (the model: MODEL.md in this folder).

    engine = ShadowEngine(lds_bytes, n_waves, ring, groups=(wg,), launch=n)
    engine.ds(wave, site, addr, 4, AccessKind.WRITE, mask)
    ...
    engine.finish()          # every violation is in `ring` now
"""

from .engine import ShadowEngine
from .kinds import AccessKind, CopyKind, Counter
from .operands import clear_caches

__all__ = ["AccessKind", "CopyKind", "Counter", "ShadowEngine", "clear_caches"]
