"""The registry of ldssan's module-level caches: `ldssan.runtime.reset_caches()` clears every
one registered here. It lives in the bottom layer so every layer's caches can register.

A cache is a pure speed-up: clearing one only costs a rebuild. A module registers each cache
where it defines it (a module not imported yet holds nothing, so registering at import time
is complete):

    _VIEWS: dict[str, View] = register_cache({})     # anything with .clear()

    @register_cache                                  # an lru_cache'd function: .cache_clear()
    @functools.lru_cache(maxsize=256)
    def parse(text): ...

    @register_reset                                  # a reset that is more than emptying a
    def clear_caches(): ...                          # container (a counter, a global to None)

`tests/architecture/test_cache_registry.py` finds every module-level cache and fails for one
that `reset_caches` leaves filled.
"""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")

_RESETS: list[tuple[object, Callable[[], None]]] = []  # (the cache or reset, how to clear it)


def register_cache(cache: T) -> T:
    """Register a container (`.clear()`) or an `functools.lru_cache` function (`.cache_clear()`);
    returns it, so it can wrap the definition or decorate the function."""
    clear = getattr(cache, "cache_clear", None) or cache.clear
    _add(cache, clear)
    return cache


def register_reset(fn: Callable[[], None]) -> Callable[[], None]:
    """Register a module's own reset function (decorator); returns it unchanged."""
    _add(fn, fn)
    return fn


def _add(obj: object, clear: Callable[[], None]) -> None:
    if not any(o is obj for o, _ in _RESETS):  # a reloaded module registers its new objects only
        _RESETS.append((obj, clear))


def registered() -> tuple[object, ...]:
    """Every registered cache and reset function, in registration order."""
    return tuple(o for o, _ in _RESETS)


def clear_all() -> None:
    """Clear every registered cache."""
    for _obj, clear in list(_RESETS):
        clear()
