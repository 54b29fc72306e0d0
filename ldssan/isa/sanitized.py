"""FLYDSL_LDSSAN_ISA=warn|error inside a sanitized run: each kernel build a sanitized launch
makes is also built *uninstrumented* for gfx1250 (compile-only, with ldssan's linker and
line table), ISA-checked, and the findings join that launch's report (same rule codes,
severity warning or error).

Why a second build: the sanitized build stops at ldssan's sentinel and carries the
`__ldssan_*` calls; the code the hardware runs is FlyDSL's own pipeline on the user's IR.
The capture runs with COMPILE_ONLY set, under which every seam of the emulator front end
passes FlyDSL's pipeline through untouched (runtime/emu/frontend.py), and `capture`
refuses any build that still carries an ldssan hook. The function's in-memory artifact
cache is set aside for the capture (a hit would compile, and so dump, nothing) and put
back after, so the sanitized build is what later launches still get.

One capture per sanitized build (keyed by the launch's kernel and site-table digest): a
kernel launched a thousand times is compiled for its ISA once. A build the check cannot
link or read stops the launch with the ISA check's named error (IsaToolchainError,
IsaParseError), never a silently unchecked kernel.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Callable

from ldssan.passes.ir.caches import register_cache
from ldssan import config

from .capture import capture_builds
from .check import check_build
from .findings import KernelResult
from .violations import finding_violation

SEVERITY = {"warn": "warning", "error": "error"}

_lock = threading.Lock()
_checked: dict[tuple, tuple[KernelResult, ...]] = register_cache({})
_installed = False
_collector: Callable | None = None


def install(collector: Callable) -> None:
    """Wrap FlyDSL's `JitFunction._compile_or_execute` (once, outside the emulator front
    end's own wrapper). `collector()` is the active `hook.Collector` (passed in: this
    package must not import `ldssan.hook`). Inert unless FLYDSL_LDSSAN_ISA is on."""
    global _installed, _collector
    from flydsl.compiler import jit_function

    from ldssan.runtime.emu import frontend

    _collector = collector
    frontend.install()  # the front end's wrapper first, so ours runs outside it
    if _installed:
        return
    jf = jit_function.JitFunction
    jf._compile_or_execute = _wrapped(jf._compile_or_execute)
    _installed = True


def clear() -> None:
    """Forget which builds were checked (tests; a later launch captures again)."""
    with _lock:
        _checked.clear()


def _sanitizing() -> bool:
    from ldssan.runtime.emu import frontend

    cfg = frontend.current()
    return cfg is not None and cfg.sanitize and not frontend._compile_only()


def _wrapped(orig):
    def compile_or_execute(self, args, kwargs, *, execute, return_compiled=False):
        from flydsl._mlir import ir

        mode = config.get("isa")
        if mode == "off" or not execute or ir.Context.current is not None or not _sanitizing():
            return orig(self, args, kwargs, execute=execute, return_compiled=return_compiled)
        col = _collector()
        before = len(col.results)
        result = orig(self, args, kwargs, execute=execute, return_compiled=return_compiled)
        launched = col.results[before:]
        if launched:
            checked = _results_for(self, args, kwargs, orig, launched)
            for r in launched:
                _add_findings(r, checked, SEVERITY[mode])
        return result

    compile_or_execute.__wrapped__ = orig
    return compile_or_execute


def _results_for(jf, args, kwargs, orig, launched) -> tuple[KernelResult, ...]:
    key = tuple(sorted({(r.kernel, r.sites.build) for r in launched}))
    with _lock:
        if key in _checked:
            return _checked[key]
    saved = jf._mem_cache, jf._last_compiled
    jf._mem_cache = {}
    try:
        builds = capture_builds(orig, jf, args, kwargs, execute=True)
    finally:
        jf._mem_cache, jf._last_compiled = saved
    results = tuple(check_build(b) for b in builds)
    with _lock:
        _checked[key] = results
    return results


def _add_findings(launch, checked: tuple[KernelResult, ...], severity: str) -> None:
    """Put the ISA findings into the launch's report, attributed to its kernel build."""
    found = tuple(finding_violation(f, severity=severity, kernel=launch.kernel,
                                    build=launch.sites.build, launch=launch.launch)
                  for r in checked for f in r.findings)
    if found:
        rep = launch.report
        launch.report = replace(rep, violations=tuple(sorted(rep.violations + found, key=lambda v: v.sort_key)))
