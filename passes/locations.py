"""Call-line locations for FlyDSL's raw MLIR builders.

FlyDSL re-exports the generated ODS builders (`fx.rocdl.s_wait_dscnt`, `fx.arith.ceildivui`,
...) without its location tracing, and kernels call the dialect modules' builders directly
(`llvm.call_intrinsic`, `memref.get_global` from the legacy SmemAllocator); their ops carry
the kernel's `def` line (docs/architecture.md, "The event path"). A report or a refusal
pointing at `def` is useless, so at trace time each such builder runs under the user's
call-site location, captured with FlyDSL's own `capture_user_location` (which skips framework
frames). Inside one of FlyDSL's traced primitives the location is already the user's call.
"""

from __future__ import annotations

import functools
import inspect

import importlib

# The modules kernels reach raw builders through. scf is left out: FlyDSL's AST rewriter
# builds its control flow under the statement's own location.
MODULES = ("flydsl.expr.rocdl", "flydsl.expr.arith", "flydsl._mlir.dialects.arith",
           "flydsl._mlir.dialects.llvm", "flydsl._mlir.dialects.memref", "flydsl._mlir.dialects.rocdl",
           "flydsl._mlir.dialects.math", "flydsl._mlir.dialects.vector", "flydsl._mlir.dialects.gpu")


def patches() -> list[tuple]:
    """The raw builders of `MODULES`, as `(module, name, wrap)` patches: `wrap(builder)`
    runs the builder under the user's call line. Declared here, applied (and taken out) by
    `ldssan.runtime.seam`, group `locations`: this layer patches nothing itself."""
    from flydsl.expr import meta

    out = []
    for module in MODULES:
        mod = importlib.import_module(module)
        out.extend((mod, name, functools.partial(_at_call_site, meta=meta))
                   for name, fn in list(vars(mod).items()) if _raw_builder(name, fn))
    return out


def _raw_builder(name: str, fn) -> bool:
    """A generated op builder function (not a class, not already wrapped) taking `loc`."""
    if name.startswith("_") or inspect.isclass(fn) or not callable(fn):
        return False
    if not getattr(fn, "__module__", "").endswith("_ops_gen") or getattr(fn, "__ldssan_wrapped__", False):
        return False
    code = getattr(fn, "__code__", None)
    if code is not None and not hasattr(fn, "__wrapped__"):  # a plain function: its code says
        # (inspect.signature over the ~1400 builders cost ~0.3 s of every sanitized process's start)
        return "loc" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    try:
        return "loc" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# The wrapper is compiled under a synthetic file name, which FlyDSL's frame walk skips like
# its own framework files, so the captured location starts at the user's call.
_WRAPPER_SRC = """
def make(fn, meta):
    def wrapper(*args, **kwargs):
        # only while FlyDSL traces user code (a boundary is set), and not inside a traced
        # primitive, whose current location already is the user's call; builders called by
        # passes (ldssan's own instrumentation) keep the location they run under
        stack = getattr(meta._tls, "stack", None)
        if (kwargs.get("loc") is None and stack and stack[-1][0] is not None
                and getattr(meta._tls, "active_loc", None) is None):
            kwargs["loc"] = meta.capture_user_location()
        return fn(*args, **kwargs)
    return wrapper
"""
_ns: dict = {}
exec(compile(_WRAPPER_SRC, "<ldssan-call-site>", "exec"), _ns)


def _at_call_site(fn, meta):
    wrapper = functools.wraps(fn)(_ns["make"](fn, meta))
    wrapper.__ldssan_wrapped__ = True
    return wrapper
