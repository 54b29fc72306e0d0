"""`ldssan.runtime.reset_caches()` clears every module-level cache of ldssan: each registers
with `passes/ir/caches.py` where it is defined. The test finds the candidates in the source
itself (a module-level name bound to an empty dict/set/weak dict, or a function under
`functools.lru_cache`/`cache`), so a new cache that does not register fails here."""

from __future__ import annotations

import ast
import functools
import weakref
from pathlib import Path

from ldssan.passes.ir import caches

from .modules import all_modules

# Module-level containers that are filled once and hold state the program needs, not derived
# data: clearing them would break it rather than cost a rebuild.
NOT_CACHES = {
    "ldssan.runtime.emu.threads.open_blocks": "the thread blocks open right now",
    "ldssan.runtime.emu.ops.EMITTERS": "the op emitters, registered at import",
    "ldssan.runtime.emu.ops.intrinsics.INTRINSICS": "the intrinsics, registered at import",
    "ldssan.passes.gfx1250.ASYNC_COPIES": "the async copy ops, registered at import",
    "ldssan.passes.locations._ns": "the namespace the call-site wrapper is compiled in",
    "ldssan.mutate.operators.OPERATORS": "the mutation operators, registered at import",
    "ldssan.runtime.emu.native.cops.CEMIT": "the native runs' C emitters, registered at import",
    "ldssan.mutate.target._REGISTRY": "the registered campaign case factories",
    "ldssan.mutate.coop._FACTORIES": "the coop modules' case factories, registered at import",
    "ldssan.variants._ORIGINS": "which user file each variant file stands for",
    "ldssan.runtime.device.emulated.record_buffer": "the process's record buffer: cached builds carry its address",
    "ldssan.runtime.device.hardware.device_ring": "the process's device ring: cached builds carry its address",
}

_EMPTY_CALLS = {"dict", "set", "WeakKeyDictionary", "WeakValueDictionary", "OrderedDict", "defaultdict"}
_MEMO = {"lru_cache", "cache"}


def _name(node) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _candidates(module) -> list[str]:
    """Module-level names of `module` that start empty and are filled at run time, or memoize."""
    tree = ast.parse(Path(module.__file__).read_text())
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value.args[0] if (isinstance(node.value, ast.Call) and _name(node.value) == "register_cache"
                                           and node.value.args) else node.value
            empty = (isinstance(value, ast.Dict) and not value.keys) or (
                isinstance(value, ast.Call) and _name(value) in _EMPTY_CALLS and not value.args)
            if empty:
                out += [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.FunctionDef) and any(_name(d) in _MEMO for d in node.decorator_list):
            out.append(node.name)
    return out


def _caches():
    found = {}
    for module in all_modules():
        for name in _candidates(module):
            found[f"{module.__name__}.{name}"] = getattr(module, name)
    return found


class _Key:  # a weak-referenceable key for the weak dictionaries
    pass


def test_reset_caches_clears_every_module_level_cache():
    from ldssan.runtime import reset_caches

    found = _caches()
    # the walk reached the caches the registry was made for
    for name in ("ldssan.runtime.emu.hostargs._BUILDS_POINTERS", "ldssan.isa.sanitized._checked",
                 "ldssan.session._COVERAGE_SHOWN", "ldssan.runtime.emu.codegen._CACHE"):
        assert name in found
    assert set(NOT_CACHES) <= set(found), "an exemption names a cache that no longer exists"
    key = _Key()
    filled = {}
    for name, obj in found.items():
        if name in NOT_CACHES:
            continue
        if isinstance(obj, (dict, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)):
            obj[key] = key
        elif isinstance(obj, set):
            obj.add(key)
        else:
            assert hasattr(obj, "cache_info"), f"{name}: not a container or an lru_cache function"
            assert any(o is obj for o in caches.registered()), f"{name} is not registered (register_cache)"
            continue
        filled[name] = obj
    reset_caches()
    left = sorted(name for name, obj in filled.items() if key in obj)
    assert not left, f"reset_caches() left these filled (register them: passes/ir/caches.py): {left}"
    for name, obj in found.items():
        if name not in NOT_CACHES and hasattr(obj, "cache_info"):
            assert obj.cache_info().currsize == 0, name


def test_registry_clears_containers_and_functions_once_each():
    box: dict = caches.register_cache({})
    assert caches.register_cache(box) is box  # a second registration changes nothing

    @caches.register_cache
    @functools.lru_cache(maxsize=4)
    def square(x):
        return x * x

    calls = []

    @caches.register_reset
    def reset():
        calls.append(1)

    try:
        box["k"] = 1
        square(3)
        caches.clear_all()
        assert box == {} and square.cache_info().currsize == 0 and calls == [1]
        assert sum(o is box for o in caches.registered()) == 1
    finally:
        caches._RESETS[:] = [(o, c) for o, c in caches._RESETS if not any(o is x for x in (box, square, reset))]
