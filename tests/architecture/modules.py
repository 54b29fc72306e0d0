"""Every module of ldssan and its layers, imported: for the tests that check a property of every
class or module-level object (the error family, the cache registry), so a new module is covered
without being listed. The bundled kernels are left out: they define FlyDSL kernels only (their
contract: flydsl and the public campaign API) and cost most of the import time."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType

SKIPPED_PACKAGES = ("ldssan.kernels",)


@lru_cache(maxsize=1)
def all_modules() -> tuple[ModuleType, ...]:
    import ldssan

    names = []
    for root in ("ldssan", *ldssan.LAYERS):
        if root in SKIPPED_PACKAGES:
            continue
        pkg = importlib.import_module(root)
        names.append(root)
        for info in pkgutil.walk_packages(pkg.__path__, root + "."):
            if not info.name.startswith(SKIPPED_PACKAGES):
                names.append(info.name)
    return tuple(importlib.import_module(n) for n in dict.fromkeys(names))


def defined_in(module: ModuleType) -> list[tuple[str, object]]:
    """The module's own top-level names (not the ones it imported)."""
    return [(name, obj) for name, obj in vars(module).items()
            if getattr(obj, "__module__", module.__name__) == module.__name__]
