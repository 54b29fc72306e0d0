"""Shared pieces of the benchmark scripts: where they ran, FlyDSL's cache location, pinning,
and the alternating plain / sanitized measurement every emulator benchmark reports."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from typing import Callable

import numpy as np


def machine() -> dict:
    """The machine and how busy it was (the machine is shared: the 1/5/15-minute load)."""
    info = {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "cores": os.cpu_count()}
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            info["loadavg"] = [float(x) for x in f.read().split()[:3]]
    except OSError:
        info["loadavg"] = None
    return info


def use_bench_cache() -> None:
    """Keep benchmark builds out of the user's FlyDSL cache."""
    os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", os.path.join(os.getcwd(), ".bench-cache"))


def pin_one_core() -> bool:
    """Run on one core (and one torch thread) when the OS allows it; says whether it did."""
    import torch

    torch.set_num_threads(1)
    if not hasattr(os, "sched_setaffinity"):
        return False
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    return True


def setup(doc: str, *flags: tuple[str, str], **ints: int) -> tuple[argparse.Namespace, bool]:
    """Parse the command line: `--name N` for each int option given with its default (`_` as
    `-`), and `(name, help)` store-true flags; then the shared setup, the benchmark build
    cache and one pinned core. Returns (args, whether the core was pinned)."""
    ap = argparse.ArgumentParser(description=doc)
    for name, default in ints.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    for name, help_text in flags:
        ap.add_argument(f"--{name}", action="store_true", help=help_text)
    args = ap.parse_args()
    use_bench_cache()
    return args, pin_one_core()


# Execution modes of the virtual gfx1250. "default" passes no knob at all, so it measures
# whatever `emulate()` / `hook.sanitize()` do by default (plain: the per-wave round-robin
# scheduler output checks use; sanitized: lockstep with automatic batching); "lockstep" runs
# both plainly and sanitized in lockstep (the sanitizer's own cost); "per_wave" is the
# per-wave scheduler, one workgroup at a time, for both.
def mode_options(mode: str, groups: int) -> dict:
    if mode == "default":
        return {}
    if mode == "lockstep":
        return {"policy": "lockstep"}
    if mode == "per_wave":
        return {"policy": "round-robin", "batch": 1}
    raise ValueError(f"unknown mode {mode!r}")


def _config_of(ctx) -> dict:
    from ldssan.runtime.emu import frontend

    with ctx:
        cfg = frontend.current()
    skip = {"launches", "sanitizer_factory"}
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in skip}


def default_is_per_wave() -> bool:
    """True while the default mode is the per-wave one (then it is measured once, as
    "default"): the configs `emulate()` and `hook.sanitize()` build with and without the
    explicit per-wave options are compared field by field."""
    from ldssan import hook
    from ldssan.runtime.emu import emulate

    pw = mode_options("per_wave", 1)
    return (_config_of(emulate()) == _config_of(emulate(**pw))
            and _config_of(hook.sanitize()) == _config_of(hook.sanitize(**pw)))


def modes(groups: int) -> list[str]:
    return ["default"] if default_is_per_wave() else ["default", "lockstep", "per_wave"]


def alternate(runs: dict[str, Callable[[], float]], rounds: int, warm_up: bool = True) -> dict[str, dict]:
    """Run every callable once as a warm-up (compile, translation), then `rounds` times in
    turn (plain, sanitized, plain, ... so machine noise hits both alike). Each callable
    returns the emulator's seconds for its work; the median of those and of the wall time
    of the whole call are reported per name."""
    for fn in runs.values() if warm_up else ():
        fn()
    got = {name: ([], []) for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            got[name][0].append(fn())
            got[name][1].append(time.perf_counter() - t0)
    return {name: {"seconds": statistics.median(s), "call_seconds": statistics.median(w)}
            for name, (s, w) in got.items()}


def plain_vs_sanitized(measure: Callable[[str, bool], Callable[[], float]], mode_names: list[str],
                       rounds: int, warm_up: bool = True) -> dict[str, dict]:
    """For each mode, the plain and sanitized medians and their ratio, every run of every
    mode alternating in one loop. `measure(mode, sanitized)` returns the callable to time."""
    runs = {(m, s): measure(m, s) for m in mode_names for s in (False, True)}
    flat = alternate({f"{m}/{int(s)}": fn for (m, s), fn in runs.items()}, rounds, warm_up)
    out = {}
    for m in mode_names:
        p, s = flat[f"{m}/0"], flat[f"{m}/1"]
        out[m] = {"plain_seconds": round(p["seconds"], 4), "sanitized_seconds": round(s["seconds"], 4),
                  "ratio": round(s["seconds"] / p["seconds"], 3),
                  "plain_call_seconds": round(p["call_seconds"], 4),
                  "sanitized_call_seconds": round(s["call_seconds"], 4)}
    return out


def _build_deferred() -> None:
    """Native runs not yet on disk build after some launches ("auto"): build them after the
    warm-up, so every measured launch is the steady state (a tree from before deferred builds
    has nothing to do)."""
    from ldssan.runtime.emu import codegen

    getattr(codegen, "build_deferred", lambda: None)()


def kernel_runner(call: Callable[[], None], groups: int, *, launches: int = 1, base: dict | None = None,
                  records: list | None = None) -> Callable[[str, bool], Callable[[], float]]:
    """`measure` for `plain_vs_sanitized` over `call()` (one host call making `launches`
    launches): the emulator seconds of those launches, run plainly (`emulate`) or sanitized
    (`hook.sanitize`, which must report the bundled kernel clean) in the given mode. `base`
    options go to every mode (e.g. resident workgroups for a persistent kernel); the launch
    records of each run are appended to `records` when given."""
    from ldssan import hook
    from ldssan.runtime.emu import emulate, frontend

    def measure(mode: str, sanitized: bool) -> Callable[[], float]:
        opts = {**(base or {}), **mode_options(mode, groups)}

        def run() -> float:
            if sanitized:
                with hook.sanitize(**opts) as col:
                    cfg = frontend.current()
                    call()
                if not col.results or not all(r.report.clean for r in col.results):
                    raise RuntimeError(f"the sanitizer reported a bundled kernel in mode {mode!r}")
            else:
                with emulate(**opts) as cfg:
                    call()
            _build_deferred()
            recs = cfg.launches[-launches:]
            if records is not None:
                records.append((mode, sanitized, recs))
            return sum(r.seconds for r in recs)

        return run

    return measure
