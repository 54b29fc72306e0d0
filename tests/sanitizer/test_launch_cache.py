"""Per-launch overheads: a second launch of one specialization neither traces nor compiles,
anything that changes the trace is a new specialization, and a second process loads an
ldssan build from FlyDSL's disk cache (unless ldssan's sources or options changed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.compiler import jit_function
from flydsl.compiler.jit_argument import from_torch_tensor

import ldssan
from ldssan import runtime
from ldssan.runtime.emu import emulate, frontend

N = 64
SCALE = 10  # read by the kernel at trace time: re-binding it must re-trace


@flyc.kernel
def _neighbour(Out: fx.Tensor, BARRIER: fx.Constexpr[bool]):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * SCALE
    if BARRIER:
        fx.gpu.barrier()
    Out[tid] = lds[(tid + 1) % N]


@flyc.jit
def _launch(Out: fx.Tensor, BARRIER: fx.Constexpr[bool], stream: fx.Stream = fx.Stream(None)):
    _neighbour(Out, BARRIER).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@pytest.fixture
def traces(monkeypatch, tmp_path):
    """Counts FlyDSL traces and compiles; starts from empty ldssan and FlyDSL caches."""
    monkeypatch.setenv("FLYDSL_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    counts = {"traces": 0, "compiles": 0}
    trace, compile_ = jit_function.JitFunction._trace, jit_function.MlirCompiler.compile.__func__

    def counted_trace(self, *a, **k):
        counts["traces"] += 1
        return trace(self, *a, **k)

    def counted_compile(cls, *a, **k):
        counts["compiles"] += 1
        return compile_(cls, *a, **k)

    monkeypatch.setattr(jit_function.JitFunction, "_trace", counted_trace)
    monkeypatch.setattr(jit_function.MlirCompiler, "compile", classmethod(counted_compile))
    monkeypatch.setattr(_launch, "_mem_cache", {})
    runtime.reset_caches()
    return counts


def _out():
    return torch.zeros(N, dtype=torch.int32)


def test_second_emulated_launch_does_not_trace(traces):
    with emulate():
        first, second = _out(), _out()
        _launch(first, True)
        assert traces == {"traces": 1, "compiles": 1}
        _launch(second, True)
    assert traces == {"traces": 1, "compiles": 1}
    assert frontend.LAUNCH_STATS["hits"] == 1
    expected = [((t + 1) % N) * SCALE for t in range(N)]
    assert first.tolist() == expected and second.tolist() == expected


def test_a_cached_sanitized_launch_reports_the_same_race(traces):
    reports = []
    for _ in range(3):
        with ldssan.sanitize() as col:
            _launch(_out(), False)
        reports.append(col.results[0])
    assert traces["traces"] == 1
    rules = [sorted({v.rule.name for v in r.report.violations}) for r in reports]
    assert rules[0] == ["RAW_UNPUBLISHED"] and rules == [rules[0]] * 3
    assert [len(r.sites) for r in reports] == [len(reports[0].sites)] * 3


def test_what_changes_the_trace_is_a_new_specialization(traces, monkeypatch):
    out = _out()
    with emulate():
        _launch(out, True)
        _launch(out, False)  # another Constexpr value
        assert traces["traces"] == 2
        wide = torch.zeros(2 * N, dtype=torch.int32)
        _launch(wide, True)  # FlyDSL's default layout is dynamic: the size is a run-time value
        assert traces["traces"] == 2 and wide[1] == 2 * SCALE
        _launch(from_torch_tensor(out), True)  # a static layout
        _launch(from_torch_tensor(wide), True)  # another static shape
        assert traces["traces"] == 4
        monkeypatch.setattr(sys.modules[__name__], "SCALE", 3)  # a global the kernel reads
        _launch(out, True)
        assert traces["traces"] == 5 and out[1] == 2 * 3
        _launch(out, True)
        assert traces["traces"] == 5
    with ldssan.sanitize():  # the sanitized build of a specialization is another build
        _launch(out, True)
    assert traces["traces"] == 6


def test_emptied_caches_trace_again(traces, monkeypatch):
    with emulate():
        _launch(_out(), True)
        monkeypatch.setattr(_launch, "_mem_cache", {})  # how compile tests force a fresh lookup
        _launch(_out(), True)
        assert traces == {"traces": 2, "compiles": 1}  # traced again, the build from FlyDSL's cache
        runtime.reset_caches()
        _launch(_out(), True)
    assert traces == {"traces": 3, "compiles": 1}


def test_plain_flydsl_calls_are_untouched(traces, monkeypatch):
    """Outside ldssan (no active config) FlyDSL's own path runs: every call traces."""

    class Traced(Exception):
        pass

    def trace_then_stop(self, *a, **k):
        traces["traces"] += 1
        raise Traced  # far enough: no compile, no launch

    monkeypatch.setattr(frontend, "_global_config", None)
    monkeypatch.setattr(jit_function.JitFunction, "_trace", trace_then_stop)
    for _ in range(2):
        with pytest.raises(Traced):
            _launch(_out(), True)
    assert traces["traces"] == 2
    assert frontend.LAUNCH_STATS == {"hits": 0, "misses": 0, "unkeyed": 0}


CHILD = textwrap.dedent('''
    import json, sys
    import torch
    from flydsl.compiler import jit_function
    import ldssan
    from ldssan.runtime.emu import frontend
    from tests.sanitizer.test_launch_cache import _launch, N

    compiles = []
    orig = jit_function.MlirCompiler.compile.__func__
    jit_function.MlirCompiler.compile = classmethod(lambda cls, *a, **k: compiles.append(1) or orig(cls, *a, **k))
    mode, variant, digest = sys.argv[1:4]
    # the parent's digest of ldssan's sources, so a file edited meanwhile by someone else does
    # not change the key between the two processes; "edited" stands for a source change
    frontend._DIGEST = digest if variant != "edited" else digest[::-1]
    out = torch.zeros(N, dtype=torch.int32)
    ring = 8192 if variant == "ring" else 4096
    with (ldssan.sanitize(ring=ring) if mode == "san" else ldssan.emulate()) as col:
        _launch(out, False)
    art = _launch._last_compiled[1]
    rules = sorted({v.rule.name for v in col.violations}) if mode == "san" else []
    print(json.dumps({"compiles": len(compiles), "out1": int(out[1]), "rules": rules,
                      "cls": type(art).__name__, "instrumented": "ldssan.sites" in art._ir_text}))
''')


_DIGEST = frontend._source_digest()


def _child(tmp_path, mode: str, variant: str = "same") -> dict:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, FLYDSL_RUNTIME_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=root)
    env.pop("FLYDSL_LDSSAN", None)
    proc = subprocess.run([sys.executable, str(script), mode, variant, _DIGEST], env=env, capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Failed to write compile cache" not in proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_warm_process_loads_the_sanitized_build_from_disk(tmp_path):
    cold = _child(tmp_path, "san")
    warm = _child(tmp_path, "san")
    assert cold["compiles"] == 1 and warm["compiles"] == 0
    for r in (cold, warm):
        assert r["instrumented"] and r["rules"] == ["RAW_UNPUBLISHED"] and r["out1"] == 20, r
    assert warm["cls"] == "EmuArtifact"
    # the plain emulated build is not the sanitized one: compiled, then served warm
    assert [_child(tmp_path, "emu")["compiles"] for _ in range(2)] == [1, 0]
    assert _child(tmp_path, "emu")["instrumented"] is False


def test_changed_sources_or_options_are_a_new_build(tmp_path):
    assert _child(tmp_path, "san")["compiles"] == 1
    edited = _child(tmp_path, "san", "edited")
    ring = _child(tmp_path, "san", "ring")
    assert edited["compiles"] == 1 and ring["compiles"] == 1
    assert edited["rules"] == ring["rules"] == ["RAW_UNPUBLISHED"]
