"""Call-line locations for FlyDSL's raw ROCDL builders.

FlyDSL re-exports the generated ODS builders (`fx.rocdl.s_wait_dscnt`,
`fx.rocdl.s_barrier_signal`, ...) without its location tracing, so their ops carry the
kernel's `def` line (docs/architecture.md, "The event path"). A report pointing at `def` is useless, so at
trace time each such builder runs under the user's call-site location, captured with
FlyDSL's own `capture_user_location` (which skips framework frames).
"""

from __future__ import annotations

import functools
import inspect

_installed = False


def install() -> int:
    """Wrap the raw builders of `flydsl.expr.rocdl` (idempotent); returns how many."""
    global _installed
    if _installed:
        return 0
    import flydsl.expr.rocdl as rocdl
    from flydsl.expr.meta import capture_user_location

    count = 0
    for name, fn in list(vars(rocdl).items()):
        if name.startswith("_") or inspect.isclass(fn) or not callable(fn):
            continue
        if not getattr(fn, "__module__", "").endswith("_rocdl_ops_gen"):
            continue
        setattr(rocdl, name, _at_call_site(fn, capture_user_location))
        count += 1
    _installed = True
    return count


# The wrapper is compiled under a synthetic file name, which FlyDSL's frame walk skips like
# its own framework files, so the captured location starts at the user's call.
_WRAPPER_SRC = """
def make(fn, capture):
    def wrapper(*args, **kwargs):
        if kwargs.get("loc") is None:
            kwargs["loc"] = capture()
        return fn(*args, **kwargs)
    return wrapper
"""
_ns: dict = {}
exec(compile(_WRAPPER_SRC, "<ldssan-call-site>", "exec"), _ns)


def _at_call_site(fn, capture):
    wrapper = functools.wraps(fn)(_ns["make"](fn, capture))
    wrapper.__ldssan_wrapped__ = True
    return wrapper
