"""Cache separation: instrumented, plainly emulated and plain FlyDSL builds never share a
cache entry, in either order, with a warm on-disk cache shared between processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ..neighbour import IMPORTS, neighbour_source

KERNEL = "import json, sys\n" + IMPORTS + neighbour_source() + textwrap.dedent('''
    out = torch.zeros(N, dtype=torch.int32)
    mode = sys.argv[1]
    if mode == "san":
        import ldssan.hook
        with ldssan.hook.sanitize() as col:
            launch(out)
        sites = len(col.results[0].sites) if col.results else 0
    else:
        from ldssan.runtime.emu import emulate
        with emulate():
            launch(out)
        sites = 0
    art = launch._last_compiled[1]
    print(json.dumps({"instrumented": "ldssan.sites" in art._ir_text, "sites": sites, "out1": int(out[1])}))
''')


def _run(tmp_path, mode: str) -> dict:
    script = tmp_path / "kern.py"
    script.write_text(KERNEL)
    env = dict(os.environ, FLYDSL_RUNTIME_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("FLYDSL_LDSSAN", None)
    proc = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("first, second", [("emu", "san"), ("san", "emu")])
def test_warm_cache_never_crosses_instrumentation(tmp_path, first, second):
    a = _run(tmp_path, first)
    b = _run(tmp_path, second)
    for mode, r in ((first, a), (second, b)):
        assert r["instrumented"] == (mode == "san"), (mode, r)
        assert r["out1"] == 20
    # ds_write, gpu.barrier, ds_read
    assert b["sites"] == (3 if second == "san" else 0)
    # the same mode again is served from the warm cache, still correctly
    again = _run(tmp_path, second)
    assert again["instrumented"] == (second == "san")


def test_cache_keys_differ_between_plain_emulated_and_sanitized(monkeypatch):
    """FlyDSL's artifact key hashes the pipeline fragments: the three builds get three keys."""
    from flydsl.compiler.backends import get_backend

    from ldssan import hook
    from ldssan.runtime.emu import frontend
    from ldssan.runtime.emu.frontend import EmuConfig

    frontend.force_gfx1250()
    frontend.install()
    monkeypatch.setattr(frontend, "_global_config", None)  # as if FLYDSL_LDSSAN were unset
    backend = get_backend()
    plain = backend.pipeline_fragments(compile_hints={})
    with frontend.active(EmuConfig()):
        emu = backend.pipeline_fragments(compile_hints={})
    with hook.sanitize():
        san = backend.pipeline_fragments(compile_hints={})
    assert plain[-1].startswith("gpu-module-to-binary")
    assert emu[-1].startswith("ldssan{") and "mode=emu" in emu[-1]
    assert san[-1].startswith("ldssan{") and "mode=san" in san[-1]
    assert len({json.dumps(plain), json.dumps(emu), json.dumps(san)}) == 3
