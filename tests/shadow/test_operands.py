"""Operand payloads and their process-wide caches (runtime/shadow/operands.py): keyed by
content, never by object identity, and cleared by `ldssan.runtime.shadow.clear_caches()`."""

from __future__ import annotations

import numpy as np

from ldssan.runtime import shadow
from ldssan.runtime.records import Ring, Rule
from ldssan.runtime.shadow import CopyKind, ShadowEngine, operands

from .protocol import Program


def test_a_mutated_tdm_offsets_array_gives_a_fresh_footprint():
    arr = np.arange(0, 16, dtype=np.int64)
    first = operands.tdm_payload(arr, 1)
    arr += 32  # the caller reuses its array for another descriptor
    second = operands.tdm_payload(arr, 1)
    np.testing.assert_array_equal(first[1][0], np.arange(0, 16))
    np.testing.assert_array_equal(second[1][0], np.arange(32, 48))


def test_tdm_payloads_follow_content_across_freed_arrays():
    seen = []
    for base in range(0, 160, 16):  # fresh arrays, freed at once: ids are reused
        seen.append(operands.tdm_payload(np.arange(base, base + 16, dtype=np.int64), 1)[1][0].copy())
    for base, got in zip(range(0, 160, 16), seen):
        np.testing.assert_array_equal(got, np.arange(base, base + 16))
    a = operands.tdm_payload(np.arange(16, dtype=np.int32), 1)  # equal content, other dtype
    b = operands.tdm_payload(np.arange(16, dtype=np.int64), 1)
    assert a[1][0] is b[1][0]  # one shared copy (and memo) per content


def test_engine_sees_the_mutated_offsets():
    """Wave 0 copies into bytes 0..15, then (same array object, new content) into 64..79;
    wave 1 reads 64 after a publishing barrier: ordered, nothing to report."""
    ring = Ring(64)
    eng = ShadowEngine(128, 2, ring)
    arr = np.arange(0, 16, dtype=np.int64)
    eng.tdm(0, 1, arr, CopyKind.TO_LDS)
    arr += 64
    eng.tdm(0, 2, arr, CopyKind.TO_LDS)
    eng.wait(0, 3, 4, 0)  # TENSOR
    for w in (0, 1):
        eng.fence(w, 4, "release", "workgroup")
        eng.barrier_signal(w, 5)
    for w in (0, 1):
        eng.barrier_wait(w, 5)
    eng.ds(1, 6, np.full(32, 64, np.int64), 4, 1, np.eye(1, 32, dtype=bool)[0])
    eng.wave_end(0, 7)
    eng.wave_end(1, 7)
    eng.finish()
    assert ring.records() == []


def test_clear_caches_empties_every_engine_cache_and_the_engine_still_works():
    prog = Program(waves=2)
    prog.wave(0).tdm_load(10, at=0).wait_tensor(0).store(11, at=32)
    prog.wave(1).load(30, at=32).load(31, at=36)
    before = prog.run()
    assert operands._TDM_SEEN and operands._LANES_SEEN
    shadow.clear_caches()
    from ldssan.runtime.shadow import tables

    assert not operands._TDM_SEEN and not operands._LANES_SEEN and not tables._READ_GROUPS
    assert prog.run() == before
    assert Rule.RAW_UNPUBLISHED in {r.rule for r in before}
