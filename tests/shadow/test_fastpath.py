"""The engine's fast paths agree with the byte-exact engine they replaced.

`reference/` is the engine as it was before the fast paths (per-byte shadow, three gathers
per slot check, one access at a time), frozen verbatim; `reference_now.py` adds, from the
outside, the verdict changes made on purpose since. Every test here runs the same
event streams through it and through the live engine and requires the very same records
in the very same ring order -- so every fast path (coarse granules and their refinement,
lanes recomputed for partially covered granules, clock lineages with bad-event bitmaps,
grouped reads, memoized footprints, the race-free write shortcut) is checked against the
slow path on racy and race-free programs alike. The live engine is also run with the
granule forced to one byte (`MAX_GRANULE_LOG2 = 0`), and with its clean cases checked in C
(`compiled=True`, shadow/compiled.py), which must agree too.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from ldssan.runtime.records import Ring, Rule
from ldssan.runtime.shadow import AccessKind, CopyKind, Counter, ShadowEngine
from ldssan.runtime.shadow import compiled as compiled_mod
from ldssan.runtime.shadow import lds as lds_mod

from .protocol import Program, Scheduler, random_phases
from .reference_now import ReferenceEngine


def _run(prog: Program, engine_cls, policy="rr", pending_cap=None):
    ring = Ring(1 << 16)
    eng = engine_cls(prog.lds, prog.n_waves, ring, groups=prog.groups, launch=5)
    if pending_cap is not None:
        eng.PENDING_CAP = pending_cap
    Scheduler(prog, eng, policy).run()
    eng.finish()
    return ring.records()


CompiledEngine = functools.partial(ShadowEngine, compiled=True)


@pytest.fixture(autouse=True)
def _every_access_through_the_c(monkeypatch):
    """The random programs' accesses are a few rows: below `MIN_ROWS` they would stay numpy."""
    monkeypatch.setattr(compiled_mod, "MIN_ROWS", 0)


def _same(prog: Program, policies=("rr", ("random", 1), ("blocks", 2)), pending_cap=None, byte_granule=True):
    for policy in policies:
        ref = _run(prog, ReferenceEngine, policy, pending_cap)
        got = _run(prog, ShadowEngine, policy, pending_cap)
        assert got == ref, f"policy {policy}: fast engine differs from the reference"
        assert _run(prog, CompiledEngine, policy, pending_cap) == ref, f"policy {policy}: compiled checks"
        if byte_granule:
            saved = lds_mod.MAX_GRANULE_LOG2
            lds_mod.MAX_GRANULE_LOG2 = 0
            try:
                assert _run(prog, ShadowEngine, policy, pending_cap) == ref, f"policy {policy}, K=1"
            finally:
                lds_mod.MAX_GRANULE_LOG2 = saved
    return ref


# -- random programs ----------------------------------------------------------------------------

_SIZES = (1, 2, 4, 4, 8, 16, 16)


def _random_lanes(rng: random.Random):
    r = rng.random()
    if r < 0.35:
        return range(32)
    if r < 0.55:
        return range(rng.randint(1, 8))
    if r < 0.75:
        return sorted(rng.sample(range(32), rng.randint(1, 12)))
    return (rng.randrange(32),)


def _random_access(rng: random.Random, b, site: int, lds: int, G: int):
    nbytes = rng.choice(_SIZES)
    align = rng.choice([nbytes, nbytes, 16, 4, 1])
    at = rng.randrange(0, max(lds // 2, 1), max(align, 1))
    if rng.random() < 0.04:  # out of bounds: past the end, or negative
        at = rng.choice([lds - nbytes // 2 - 1, lds - 4, -align or -1])
    lanes = _random_lanes(rng)
    stride = rng.choice([None, None, None, 0, nbytes * 2, max(nbytes // 2, 1)])
    groups = None if G == 1 or rng.random() < 0.7 else sorted(rng.sample(range(G), rng.randint(1, G)))
    kw = dict(lanes=lanes, nbytes=nbytes, stride=stride, groups=groups)
    r = rng.random()
    if r < 0.30:
        b.store(site, at, **kw)
    elif r < 0.62:
        b.load(site, at, **kw)
    elif r < 0.67:
        kw["stride"] = 0 if stride is None else stride
        b.atomic(site, at, **kw)
    elif r < 0.72:
        b.dma_load(site, at, **kw)
    elif r < 0.75:
        b.dma_store(site, at, **kw)
    else:
        _random_tdm(rng, b, site, lds)


def _random_tdm(rng: random.Random, b, site: int, lds: int):
    kind = rng.random()
    if kind < 0.45:  # a tile of 16-byte aligned rows, maybe padded
        rows, row, pad = rng.randint(1, 4), rng.choice([16, 32]), rng.choice([0, 0, 16, 4])
        base = rng.randrange(0, max(lds // 2, 1), 16)
        starts = [base + r * (row + pad) for r in range(rows)]
        offs = np.concatenate([np.arange(st, st + row) for st in starts])
    elif kind < 0.75:
        at = rng.randrange(0, max(lds // 2, 1), rng.choice([1, 4, 16]))
        offs = np.arange(at, at + rng.choice([4, 8, 16, 24, 32]))
    elif kind < 0.9:  # descending / shuffled bytes
        at = rng.randrange(0, max(lds // 2, 1), 4)
        offs = np.arange(at, at + 16)
        if rng.random() < 0.5:
            offs = offs[::-1].copy()
        else:
            rng.shuffle(offs)
    else:  # partly out of bounds
        offs = np.arange(lds - 8, lds + 8)
    if rng.random() < 0.75:
        b.tdm_load(site, offsets=offs)
    else:
        b.tdm_store(site, offsets=offs)


def _random_program(seed: int) -> Program:
    rng = random.Random(seed)
    n_waves = rng.choice([1, 2, 3, 4])
    lds = rng.choice([64, 96, 128, 100, 256, 60])
    G = rng.choice([1, 1, 2, 3])
    prog = Program(waves=n_waves, lds=lds, groups=tuple(range(10, 10 + G)))
    phases = rng.randint(0, 4)

    def access(b, sites):
        _random_access(rng, b, next(sites), lds, G)

    def op(b, sites):
        if rng.random() < 0.7:
            access(b, sites)
        else:
            _random_sync(rng, b)

    return random_phases(rng, prog, phases, exit_p=0.2, max_ops=7, op=op, window_op=access, drain_p=0.5)


def _random_sync(rng: random.Random, b):
    r = rng.random()
    if r < 0.35:
        b.wait_ds(rng.choice([0, 0, 1, 2]))
    elif r < 0.55:
        b.wait_tensor(rng.choice([0, 1]))
    elif r < 0.65:
        b.wait_async(rng.choice([0, 1]))
    elif r < 0.75:
        b.mark()
    elif r < 0.82:
        b.wait_mark(rng.choice([0, 1]))
    else:
        b.fence(rng.choice(["release", "acquire"]), rng.choice(["workgroup", "workgroup-one-as"]))


def _random_pipeline(seed: int) -> Program:
    """Mostly race-free: LDS filled by a TDM copy, then phases of long read runs (the
    grouped check), wave-private writes and barriers -- with a few planted bugs."""
    rng = random.Random(seed)
    n_waves = rng.choice([2, 3, 4])
    lds = rng.choice([256, 512])
    G = rng.choice([1, 2])
    prog = Program(waves=n_waves, lds=lds, groups=tuple(range(G)))
    private = lds // 2 // n_waves  # wave w owns [lds/2 + w*private, ...)
    prog.wave(0).tdm_load(40, offsets=np.arange(lds)).wait_tensor(0)
    prog.all().barrier(100)
    site = iter(range(1000, 100000))
    for ph in range(rng.randint(1, 4)):
        for w in range(n_waves):
            b = prog.wave(w)
            for _ in range(rng.randint(1, 12)):
                nbytes = rng.choice([4, 8, 16, 16])
                lanes = rng.choice([range(32), range(8), (rng.randrange(32),)])
                top = lds // 2 if rng.random() < 0.8 else lds
                at = rng.randrange(0, max(top - nbytes * 32, 1), nbytes)
                b.load(next(site), at, lanes=lanes, nbytes=nbytes)
                if rng.random() < 0.5:
                    b.wait_ds(rng.choice([0, 1]))
            if rng.random() < 0.5:
                base = lds // 2 + w * private
                b.store(next(site), base, lanes=range(min(8, private // 4)), nbytes=4)
                b.load(next(site), base, lanes=range(2), nbytes=8)
            if rng.random() < 0.1:  # a bug: a write into the shared half
                b.store(next(site), rng.randrange(0, lds // 2, 4), nbytes=4)
        style = rng.choice(["gpu", "gpu", "raw", "nowait"])
        for w in range(n_waves):
            b = prog.wave(w)
            if style == "gpu":
                b.barrier(101 + ph)
            elif style == "raw":
                b.wait_ds(0).raw_barrier(101 + ph)
            else:
                b.raw_barrier(101 + ph)  # reads not drained: a reuse would be a WAR
    return prog


@pytest.mark.parametrize("seed", range(40))
def test_random_pipelines_agree_with_the_reference(seed):
    _same(_random_pipeline(seed), policies=("rr", ("blocks", seed)))


def test_random_pipelines_exercise_grouped_reads_both_ways():
    outcomes = []
    saved = lds_mod.LdsShadow.check_reads

    def spy(self, g, clk):
        last = saved(self, g, clk)
        outcomes.append(last is not None)
        return last

    lds_mod.LdsShadow.check_reads = spy
    try:
        for seed in range(40):
            _run(_random_pipeline(seed), ShadowEngine)
    finally:
        lds_mod.LdsShadow.check_reads = saved
    assert outcomes.count(True) > 30 and outcomes.count(False) > 5


@pytest.mark.parametrize("seed", range(150))
def test_random_programs_agree_with_the_reference(seed):
    _same(_random_program(seed), policies=("rr", ("blocks", seed)))


def test_random_programs_cover_the_rules_and_fast_paths():
    """Guard against a vacuous differential test: the programs are racy and exercise the
    per-byte path (refinement, partially covered granules) as well as coarse granules."""
    rules, granules = set(), set()
    saved = lds_mod.LdsShadow._set_granule

    def spy(self, k, fresh=False):
        granules.add((fresh, k))
        return saved(self, k, fresh)

    lds_mod.LdsShadow._set_granule = spy
    try:
        for seed in range(150):
            rules |= {r.rule for r in _run(_random_program(seed), ShadowEngine)}
    finally:
        lds_mod.LdsShadow._set_granule = saved
    assert {Rule.RAW_UNPUBLISHED, Rule.WAR_REUSE, Rule.WAW, Rule.DMA_READ_BEFORE_WAIT, Rule.DMA_OVERLAP,
            Rule.UNINIT_READ, Rule.OOB, Rule.WAIT_TOO_WEAK} <= rules
    assert (False, 0) in granules and (True, 4) in granules and (True, 2) in granules


def test_random_programs_exercise_the_compiled_checks_both_ways(monkeypatch):
    """Guard against a vacuous comparison: the compiled read-group and write checks both
    record accesses and hand others back to numpy (an unordered entry, a never-written byte)."""
    assert compiled_mod.kernels(8) is not None and compiled_mod.kernels(4) is not None
    seen = {"reads": [], "write": []}
    for name, key in (("reads_check", "reads"), ("write", "write")):
        real = getattr(compiled_mod.Kernels, name)

        def spy(self, *a, _real=real, _key=key):
            got = _real(self, *a)
            seen[_key].append(got)
            return got

        monkeypatch.setattr(compiled_mod.Kernels, name, spy)
    for seed in range(40):
        _run(_random_pipeline(seed), CompiledEngine)
        _run(_random_program(seed), CompiledEngine)
    for key, got in seen.items():
        assert got.count(True) > 30 and got.count(False) > 5, (key, got.count(True), got.count(False))


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_agree_under_forced_drains(seed):
    _same(_random_program(1000 + seed), policies=("rr",), pending_cap=3, byte_granule=False)


# -- targeted cases -----------------------------------------------------------------------------

def _ring_program(waves=4, groups=(0,), width=16, racy=False) -> Program:
    """A TDM-fed ring read by ds_load_b128-like accesses (the GEMM pattern), with an
    epilogue staged through the ring; `racy` drops the reuse barrier."""
    prog = Program(waves=waves, lds=1024, groups=groups)
    tile = np.concatenate([np.arange(r * 144, r * 144 + 128) for r in range(2)])  # padded rows
    for it in range(3):
        slot = 0 if racy else (it % 2) * 320  # racy: refill the slot just read, no reuse barrier
        prog.wave(0).tdm_load(40 + it, offsets=tile + slot).wait_tensor(0)
        prog.all().barrier(100)
        for w in range(waves):
            prog.wave(w).load(20 + w, at=slot + 16 * w, lanes=range(4), nbytes=width)
            prog.wave(w).load(30 + w, at=slot + 144, lanes=range(32), nbytes=4)  # scale words
            prog.wave(w).wait_ds(0)
        if not racy:
            prog.all().barrier(101)
    for w in range(waves):
        prog.wave(w).store(60 + w, at=700 + 64 * w, lanes=range(4), nbytes=16)
    prog.all().barrier(102)
    prog.wave(0).tdm_store(70, offsets=np.arange(700, 700 + 64 * waves))
    prog.wave(0).wait_tensor(0)
    return prog


@pytest.mark.parametrize("racy", [False, True])
@pytest.mark.parametrize("groups", [(0,), (3, 4, 5)])
def test_ring_pipeline_agrees(racy, groups):
    recs = _same(_ring_program(groups=groups, racy=racy))
    assert bool(recs) == racy


def test_refinement_midway_keeps_every_slot():
    """Coarse granules first, then accesses that split them (2-byte, odd offsets): the
    refined shadow must still hold every earlier unordered entry and lane."""
    prog = Program(waves=3, lds=256, groups=(1, 2))
    prog.wave(0).store(10, at=0, lanes=range(8), nbytes=16)  # bytes 0..127, 16 per lane
    prog.wave(1).load(30, at=0, lanes=range(32), nbytes=4)  # races, 4-byte lanes
    prog.wave(2).store(11, at=6, lanes=(0, 1), nbytes=2, stride=5)  # splits granules
    prog.wave(1).load(31, at=3, lanes=(3,), nbytes=1).store(12, at=96, lanes=range(8), nbytes=4)
    prog.all().barrier()
    prog.wave(2).load(32, at=0, lanes=range(32), nbytes=8)
    assert len(_same(prog)) >= 4


def test_partially_covering_lanes_report_the_exact_prior_lane():
    """4-byte lanes in a 16-byte granule (the granule keeps one event, lanes differ inside
    it): the record names the lane that wrote the byte actually reported."""
    prog = Program(waves=2, lds=64)
    prog.wave(0).store(10, at=0, lanes=(7, 3, 9, 1), nbytes=4)  # bytes 0..15, lanes differ
    prog.wave(1).load(30, at=8, lanes=(5,), nbytes=8)
    prog.wave(1).load(31, at=4, lanes=(6,), nbytes=4)
    recs = _same(prog)
    assert [(r.site, r.lds_offset, r.lane, r.other_lane) for r in recs] == [(30, 8, 5, 9), (31, 4, 6, 3)]


def test_grouped_reads_fall_back_in_order_on_a_conflict():
    """A run of reads of one wave with racy members in the middle, and never-written
    bytes: records come out as if the reads were applied one by one (the racy reads had
    ordered data from store 10, so their pairs wait for finish() -- MODEL §6a -- and come
    after the LDS030 of read 34)."""
    prog = Program(waves=2, lds=256)
    prog.wave(0).store(10, at=0, lanes=range(8), nbytes=16).barrier()
    prog.wave(0).store(11, at=64, lanes=(0,), nbytes=16)  # unpublished
    prog.wave(1).barrier()
    for i, at in enumerate((0, 16, 64, 32, 200, 48)):
        prog.wave(1).load(30 + i, at=at, lanes=range(2), nbytes=16)
    recs = _same(prog)
    assert [(r.site, r.other_site) for r in recs] == [(34, 0xFFFFFFFF), (32, 11), (35, 11)]


def test_same_phase_refill_bookkeeping_agrees():
    """MODEL §6a: a refill racing reads that had ordered data, consumed in order later."""
    prog = Program(waves=3, lds=128)
    prog.wave(0).tdm_load(40, at=0, size=32).wait_tensor(0).barrier()
    prog.wave(0).load(20, at=0).wait_ds(0).tdm_load(41, at=0, size=32).wait_tensor(0).barrier()
    prog.wave(0).load(21, at=0).load(22, at=16)
    prog.wave(1).barrier().load(30, at=0, lanes=range(4), nbytes=16).load(31, at=16).barrier()
    prog.wave(1).load(32, at=0).load(33, at=4)
    prog.wave(2).barrier().barrier().load(34, at=0).load(35, at=8)
    assert _same(prog)


# -- caches keyed by caller arrays ----------------------------------------------------------------

def test_reused_and_mutated_operand_arrays_are_not_trusted():
    """Footprint memos are keyed by content: a caller may reuse one array object for
    different addresses / TDM offsets between calls."""
    def drive(engine_cls):
        ring = Ring()
        eng = engine_cls(128, 2, ring)
        addr = np.zeros(32, np.int64)
        mask = np.zeros(32, bool)
        mask[:4] = True
        offs = np.arange(0, 16, dtype=np.int64)
        eng.tdm(0, 40, [offs], CopyKind.TO_LDS)
        offs += 64  # same object, new footprint
        eng.tdm(0, 41, [offs], CopyKind.TO_LDS)
        eng.wait(0, 1, Counter.TENSOR, 0)
        addr[:4] = np.arange(4) * 4
        eng.ds(1, 30, addr, 4, AccessKind.READ, mask)
        addr[:4] += 64
        eng.ds(1, 31, addr, 4, AccessKind.READ, mask)
        mask[0] = False
        eng.ds(1, 32, addr, 4, AccessKind.READ, mask)
        addr[:] = 96  # after the call: the engine kept its own copy
        eng.wave_end(0, 9)
        eng.wave_end(1, 9)
        eng.finish()
        return ring.records()

    ref = drive(ReferenceEngine)
    assert drive(ShadowEngine) == ref
    assert [(r.site, r.other_site) for r in ref] == [(30, 40), (31, 41), (32, 41)]


# -- bounded caches and storage variants ----------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_tiny_cache_bounds_and_int32_slots_agree(seed, monkeypatch):
    """Flush every memo and cache almost immediately, sync the event table every few
    events, and store event ids as int32: still the reference's records."""
    from ldssan.runtime.shadow import operands as operands_mod

    monkeypatch.setattr(lds_mod.EventTable, "_SYNC_EVERY", 3)
    monkeypatch.setattr(lds_mod, "_GROUP_ROWS_MAX", 8)
    monkeypatch.setattr(lds_mod, "_INTP_SLOTS_MAX", 0)
    monkeypatch.setattr(operands_mod, "_SEEN_MAX_BYTES", 64)
    _same(_random_program(2000 + seed), policies=("rr", ("random", seed)), byte_granule=False)
