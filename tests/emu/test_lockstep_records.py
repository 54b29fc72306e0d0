"""The lockstep fast paths change no record: every record the engines push to the ring (before
the ring folds duplicates), field for field and in order, is the same with the fast paths as
with the reference paths they shortcut -- on kernels with planted bugs, so the records are
many and of several rules.

Fast paths under test (each with its reference):

* `wave.LockstepHooks.direct`: a hook call with every lane active goes straight to each
  wave's hooks (reference: through `LockstepCtx.split`);
* `tdm.FAST_ROW`: a descriptor of one workgroup decodes with Python ints (reference: numpy);
* `memory.LocalMemory.remember_index`: LDS index arrays remembered by address pattern
  (reference: computed on every access).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import ldssan.runtime
from ldssan import hook
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.runtime import records
from ldssan.runtime.emu import frontend, tdm
from ldssan.runtime.emu.memory import LocalMemory
from ldssan.runtime.emu.wave import LockstepHooks
from ldssan.variants import load_variant

from ..sanitizer.test_gemm_bugs import BUGS as GEMM_BUGS
from ..sanitizer.test_mega_moe_bugs import BUGS as MOE_BUGS
from ..sanitizer.test_mega_moe_bugs import _inputs as moe_inputs


def _pushed(monkeypatch, launch, *, fast: bool, **options) -> list:
    """Every record pushed while `launch()` runs sanitized in lockstep (launch ids zeroed:
    they count sessions), with the fast paths on or off; asserts lockstep ran."""
    monkeypatch.setattr(LockstepHooks, "direct", fast)
    monkeypatch.setattr(tdm, "FAST_ROW", fast)
    monkeypatch.setattr(LocalMemory, "remember_index", fast)
    ldssan.runtime.reset_caches()
    tdm.clear_cache()
    got = []
    push = records.Ring.push

    def spy(ring, rec):
        got.append(dataclasses.replace(rec, launch=0))
        push(ring, rec)

    monkeypatch.setattr(records.Ring, "push", spy)
    with hook.sanitize("lockstep", **options):
        launch()
        ran = {r.policy for r in frontend.current().launches}
    monkeypatch.setattr(records.Ring, "push", push)
    assert ran == {"lockstep"}, ran
    return got


def _same_records(monkeypatch, launch, **options) -> list:
    fast = _pushed(monkeypatch, launch, fast=True, **options)
    ref = _pushed(monkeypatch, launch, fast=False, **options)
    assert fast == ref
    return fast


@pytest.mark.parametrize("name", list(MOE_BUGS))
def test_mega_moe_records_are_the_reference_records(monkeypatch, name):
    # the persistent grouped GEMM: one lockstep context per resident workgroup
    mod = load_variant(M, MOE_BUGS[name][0], tag=name)
    args = moe_inputs()
    got = _same_records(monkeypatch, lambda: mod.mega_moe(*args), resident=M.DEFAULTS["persistent"])
    assert got, name


@pytest.mark.parametrize("name", ["tensor_wait_deleted", "kstep_barrier_deleted", "epilogue_reuse_barrier_deleted"])
def test_gemm_records_are_the_reference_records(monkeypatch, name):
    # batched lockstep: the waves of several workgroups in one lane array
    edit, (m, n, k), *_ = GEMM_BUGS[name]
    mod = load_variant(G, [edit], tag=name)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    got = _same_records(monkeypatch, lambda: mod.gemm(a, b, waves=4, nb=3))
    assert got, name


def _words(rng, n: int) -> np.ndarray:
    w = rng.integers(0, 2 ** 32, size=(n, 20), dtype=np.int64)
    w[:, 12:] = 0
    w[: n // 2, 4] &= ~(1 << 19)  # half without the iterate bit: they decode
    # small tiles (footprints are materialized): tile dim0 = g1[3] 31:16, dim1 = g1[4] 15:0
    w[:, 7] = (w[:, 7] & 0xFFFF) | (rng.integers(0, 40, n) << 16)
    w[:, 8] = (w[:, 8] & ~0xFFFF) | rng.integers(0, 40, n)
    return w


def test_one_row_decode_is_the_numpy_decode():
    rng = np.random.default_rng(7)
    decoded = 0
    for row in _words(rng, 400):
        try:
            want = tdm.decode_words(row[None, :])
        except NotImplementedError as exc:
            with pytest.raises(NotImplementedError, match=str(exc)):
                tdm.TdmBatch.of_row(row.tolist())
            continue
        got = tdm.TdmBatch.of_row(row.tolist())
        decoded += 1
        for f in tdm.FIELDS:
            a, b = getattr(got, f), getattr(want, f)
            assert (a.dtype, a.shape, a.tolist()) == (b.dtype, b.shape, b.tolist()), f
            assert not a.flags.writeable
        assert got.row(0) == want.row(0)
        assert [x.tolist() for x in got.footprints()] == [x.tolist() for x in want.footprints()]
    assert decoded >= 150
    beyond = _words(rng, 1)[0]
    beyond[4] &= ~(1 << 19)
    beyond[15] = 1
    with pytest.raises(NotImplementedError, match="beyond 2-D"):
        tdm.TdmBatch.of_row(beyond.tolist())


def test_remembered_lds_indices_are_read_only_and_masks_are_the_callers():
    lds = LocalMemory(256, 1)
    base = np.zeros(4, np.int64)
    addr = np.array([0, 4, 8, 300], np.int64)  # the last lane out of range
    arr, idx, ok = lds.index(base, addr, 4)
    arr2, idx2, ok2 = lds.index(base, addr.copy(), 4)
    assert idx2 is idx and arr2 is arr and not idx.flags.writeable
    assert ok.tolist() == ok2.tolist() == [True, True, True, False] and ok2 is not ok
    ok &= False  # the caller's own mask: the next look-up is unaffected
    assert lds.index(base, addr, 4)[2].tolist() == [True, True, True, False]
    # a different group base (another context) is another entry
    other = np.full(4, 0, np.int64)
    assert lds.index(other, addr, 4)[1] is not idx


def _indices(lds, rounds: int, patterns: int) -> list:
    base = np.zeros(4, np.int64)
    out = []
    for i in range(rounds):
        addr = np.arange(4, dtype=np.int64) * 4 + 16 * (i % patterns)
        arr, idx, ok = lds.index(base, addr, 4)
        assert idx.tolist() == (addr >> 2).tolist() and ok.all()  # one dword-start index per lane
        out.append(idx)
    return out


def test_an_lds_whose_addresses_never_repeat_stops_remembering():
    fresh = LocalMemory(1 << 16, 1)
    _indices(fresh, 300, 300)  # 300 patterns, none seen twice: past the trial, no more look-ups
    a, b = _indices(fresh, 2, 1)
    assert a is not b  # one pattern twice: computed twice
    kept = LocalMemory(1 << 16, 1)
    _indices(kept, 600, 8)  # a kernel's few patterns, over and over: still remembered
    a, b = _indices(kept, 2, 1)
    assert a is b
