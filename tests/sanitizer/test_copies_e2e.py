"""Instrumentation pass + virtual gfx1250 + engine on small MLIR kernels with TDM and async
copies: the copy rules fire end to end, and the correct patterns stay silent."""

from __future__ import annotations

import numpy as np
import pytest


from ..emu.test_copies_wmma import ASYNC_KERNEL, _tdm_body
from ..emu.sanitized import sanitize_mlir
from ..emu.test_ops import module

PARAMS = "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>"


def sanitize_text(text: str, policy: str = "round-robin"):
    """Instrument an MLIR module text, run it sanitized, return the report."""
    return sanitize_mlir(text, [np.zeros(64, np.int32), np.arange(100, 164, dtype=np.int32)], policy=policy)


def _codes(report):
    return sorted({v.code for v in report.violations})


@pytest.mark.parametrize("policy", ["round-robin", "reverse+early"])
def test_tdm_read_before_its_wait_is_lds010(policy):
    report = sanitize_text(module(_tdm_body(False), PARAMS, 512), policy)
    assert "LDS010" in _codes(report)


def test_tdm_with_wait_and_barrier_is_clean_except_padding():
    report = sanitize_text(module(_tdm_body(True), PARAMS, 512))
    # the waves read words the tile's padding skips: never written, so LDS030 — and nothing else
    assert _codes(report) == ["LDS030"]


def test_async_copy_with_wait_and_barrier_is_clean():
    report = sanitize_text(module(ASYNC_KERNEL, PARAMS, 512))
    assert report.clean, report.violations


def test_async_copy_without_wait_is_reported():
    report = sanitize_text(module(ASYNC_KERNEL.replace("rocdl.s.wait.asynccnt 0", ""), PARAMS, 512))
    assert "LDS010" in _codes(report)
