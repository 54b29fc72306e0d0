"""The key of a launch's specialization: what FlyDSL's trace of a launcher reads, so that
a launch with the same key may reuse the build the first one made (`frontend._cached_launch`).
"""

from __future__ import annotations

import enum
import os
import types

_STATIC = (type(None), bool, int, float, complex, str, bytes)


class _Unkeyable(Exception):
    """A value whose effect on the trace cannot be told from the value: trace as usual."""


def specialization(jf, args, kwargs, run_key):
    """(key, bound and resolved arguments) of a launch, or (None, None) when it cannot be
    keyed without tracing (FlyDSL then traces as usual, and reports any bad argument).
    The key holds what a trace reads: each runtime argument's FlyDSL cache signature (type,
    dtype, static shape and strides), each Constexpr value, the compile hints, the FlyDSL
    environment, `run_key` (what of ldssan's run reaches the build: its sentinel fragment,
    the scope) and the module globals the launcher's code reaches (`_globals_key`)."""
    from flydsl._mlir import ir
    from flydsl.compiler.jit_argument import is_type_param_annotation
    from flydsl.compiler.protocol import cache_signature
    from flydsl.expr.typing import Constexpr
    from flydsl.utils import env

    if ir.Context.current is not None:
        return None, None
    jf._ensure_sig()
    hints = jf._effective_compile_hints()
    if jf._has_self_param or hints.get("ktrace", env.ktrace.enable) or env.debug.dump_ir or env.debug.dump_asm:
        return None, None  # a bound instance's state, event tables and dumps belong to the trace
    params = jf._sig.parameters
    static = {n for n, p in params.items() if p.annotation is not p.empty
              and (Constexpr.is_constexpr_annotation(p.annotation) or is_type_param_annotation(p.annotation))}
    try:
        bound = jf._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        jf._resolve_arguments(bound.arguments)
        parts = tuple((n, _static_key(v) if n in static else cache_signature(v)) for n, v in bound.arguments.items())
        key = (parts, _static_key(hints), _env_key(), run_key, _globals_key(jf.func))
        hash(key)
    except (TypeError, ValueError, _Unkeyable):
        return None, None
    return key, bound


def _static_key(v):
    """A hashable, type-tagged form of a plain value (1, 1.0 and True stay apart)."""
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(_static_key(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted(((repr(k), _static_key(x)) for k, x in v.items()))))
    if isinstance(v, (_STATIC, type, enum.Enum)) or type(v).__module__ == "torch" and type(v).__name__ == "dtype":
        return (type(v), v)
    raise _Unkeyable(type(v).__name__)


def _env_key() -> tuple:
    """FlyDSL's environment (its options are FLYDSL_* and ARCH); ldssan's own run-time
    options do not reach the build (the pass's are in the sentinel)."""
    return tuple(sorted((k, v) for k, v in os.environ.items()
                        if k.startswith("FLYDSL_") and not k.startswith("FLYDSL_LDSSAN") or k in ("ARCH", "COMPILE_ONLY")))


def _globals_key(func) -> tuple:
    """The module globals the launcher's code reads, followed through the functions,
    kernels and launchers it calls: plain values by value, anything else by identity. So
    re-binding a module constant or a kernel (a test's monkeypatch) is a new
    specialization. Attributes of imported modules and objects are taken as fixed."""
    out, seen, todo = [], set(), [func]
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        names, codes = [], [fn.__code__]
        while codes:
            code = codes.pop()
            names.extend(code.co_names)
            codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        cells = [c.cell_contents for c in fn.__closure__ or () if _cell_full(c)]
        for value in [fn.__globals__[n] for n in names if n in fn.__globals__] + cells:
            if isinstance(value, types.ModuleType):
                out.append(id(value))
                continue
            inner = getattr(value, "_func", None) or getattr(value, "func", None)
            if isinstance(value, types.FunctionType):
                todo.append(value)
            elif isinstance(inner, types.FunctionType):  # a FlyDSL kernel or launcher
                todo.append(inner)
            try:
                out.append(_static_key(value))
            except _Unkeyable:
                out.append(id(value))
    return tuple(out)


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
