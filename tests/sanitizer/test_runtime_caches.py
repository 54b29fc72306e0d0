"""The runtime's module-level caches: `ldssan.runtime.reset_caches()` empties every one that a
launch fills, and the FlyDSL cache digest covers the build's own sources and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import torch

import ldssan
from ldssan import runtime
from ldssan.passes import sites
from ldssan.runtime.emu import codegen, emulate, frontend

from .test_copies_e2e import PARAMS, module, sanitize_text
from ..emu.test_copies_wmma import _tdm_body
from ..neighbour import load_neighbour

ROOT = Path(__file__).resolve().parents[2]
N = 64


def test_reset_caches_empties_what_a_flydsl_launch_filled(tmp_path):
    _launch = load_neighbour(tmp_path).launch
    out = torch.zeros(N, dtype=torch.int32)
    with emulate():
        _launch(out)
    assert int(out[1]) == 20
    with ldssan.sanitize() as results:  # runs the pass: reads the kernel file's function spans
        _launch(out)
    assert results.results and not results.violations
    assert frontend._VIEWS and codegen._CACHE and frontend._DIGEST is not None
    assert sites._function_spans.cache_info().currsize
    runtime.reset_caches()
    assert not frontend._VIEWS
    assert not codegen._CACHE
    assert frontend._DIGEST is None
    assert sites._function_spans.cache_info().currsize == 0
    # and the next launch rebuilds them, with the same result
    out.zero_()
    with emulate():
        _launch(out)
    assert int(out[1]) == 20 and frontend._VIEWS and codegen._CACHE


def test_reset_caches_empties_the_engine_operand_caches():
    from ldssan.runtime.shadow import operands

    sanitize_text(module(_tdm_body(True), PARAMS, 512))  # TDM copy + ds reads, sanitized
    assert operands._TDM_SEEN and operands._LANES_SEEN
    runtime.reset_caches()
    assert not operands._TDM_SEEN and not operands._LANES_SEEN


def test_digest_covers_the_pass_and_the_emulator_only():
    files = {Path(os.path.realpath(p)) for p in frontend.digest_sources()}
    names = {p.relative_to(ROOT).as_posix() for p in files}
    assert {"passes/instrument.py", "passes/ir/irview.py", "runtime/emu/frontend.py",
            "runtime/emu/codegen.py"} <= names
    outside = sorted(n for n in names if not n.startswith(("passes/", "runtime/emu/")))
    assert not outside, outside  # no tests, benchmarks, kernels, engine or reports


def test_digest_changes_with_a_covered_file_only(tmp_path):
    covered = tmp_path / "pass.py"
    covered.write_text("X = 1\n")
    other = tmp_path / "test_something.py"
    other.write_text("Y = 1\n")
    before = frontend._source_digest([str(covered)])
    other.write_text("Y = 2\n")
    assert frontend._source_digest([str(covered)]) == before
    covered.write_text("X = 2\n")
    assert frontend._source_digest([str(covered)]) != before
