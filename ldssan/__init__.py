"""ldssan: an LDS synchronization sanitizer and a virtual gfx1250 for FlyDSL kernels.

    import ldssan
    with ldssan.sanitize("reverse") as results:    # or ldssan.enable() for the whole process
        my_flydsl_launch(x_cpu, out_cpu)
    assert not results.violations

    with ldssan.emulate("random(7)"):              # the virtual gfx1250 (checked only under a sanitizer)
        my_flydsl_launch(x_cpu, out_cpu)

The names are loaded on first use: importing them pulls in FlyDSL, MLIR and torch (seconds),
and the pytest plugin imports this package in every pytest run, sanitized or not.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# The engine layers keep the design's top-level folders; pyproject.toml's package-dir installs
# them under this namespace (a wheel copies them into ldssan/). A source checkout maps them here,
# to the checkout this package was imported from: modules load from the top-level path (the one
# tracebacks show and the one to edit), and a second checkout's editable install can never lend
# its copy of a layer. The checkout's ldssan/{runtime,passes,kernels} links exist only for tools
# that walk the package folder (import-linter's graph); nothing is imported through them.
LAYERS = {"ldssan.passes": "passes", "ldssan.runtime": "runtime", "ldssan.kernels": "kernels"}


class _CheckoutLayers(importlib.abc.MetaPathFinder):
    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        folder = LAYERS.get(fullname)
        if folder is None:
            return None
        pkg = self.root / folder
        return importlib.util.spec_from_file_location(
            fullname, pkg / "__init__.py", submodule_search_locations=[str(pkg)])


def _map_checkout_layers() -> None:
    here = Path(__file__).resolve().parent
    root = here.parent
    if any((here / folder).exists() and not (here / folder).is_symlink() for folder in LAYERS.values()):
        return  # an installed wheel: the layers are real subpackages here
    if not all((root / folder / "__init__.py").is_file() for folder in LAYERS.values()):
        return
    if not any(isinstance(f, _CheckoutLayers) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutLayers(root))


_map_checkout_layers()

# public name -> the module that defines it
_EXPORTS = {
    "enable": "ldssan.hook",
    "disable": "ldssan.hook",
    "sanitize": "ldssan.hook",
    "emulate": "ldssan.runtime.emu",
    "Report": "ldssan.decode",
    "Violation": "ldssan.decode",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from ldssan.decode import Report, Violation
    from ldssan.hook import disable, enable, sanitize
    from ldssan.runtime.emu import emulate


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ldssan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
