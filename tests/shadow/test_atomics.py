"""Atomics and the plain writes they follow (MODEL.md §4 step 4): a wave's own atomic must
not hide its unpublished plain store from other waves' atomics (the counter zeroed with no
barrier before every wave, the zeroing one included, adds to it), while atomic-vs-atomic
stays exempt. Every case also runs through the reference engine (`_same`)."""

from __future__ import annotations

import random

import pytest

from ldssan.runtime.records import Rule
from ldssan.runtime.shadow import ShadowEngine
from ldssan.runtime.shadow import lds as lds_mod

from .protocol import Program, random_phases
from .test_fastpath import _run, _same


def _pairs(recs):
    return [(Rule(r.rule), r.site, r.other_site, r.wave, r.other_wave) for r in recs]


def _counter(owner_adds: bool, publish: bool, waves: int = 3) -> Program:
    prog = Program(waves=waves, lds=64, groups=(0, 1))
    prog.wave(0).store(10, at=16)  # zero the counter
    if publish:
        prog.wave(0).wait_ds(0)
        prog.all().barrier()
    for w in range(waves):
        if w or owner_adds:
            prog.wave(w).atomic(20 + w, at=16)
    prog.all().barrier()
    for w in range(waves):
        prog.wave(w).load(30 + w, at=16)
    return prog


@pytest.mark.parametrize("owner_adds", [False, True])
def test_unpublished_zeroing_store_races_every_other_waves_atomic(owner_adds):
    recs = _same(_counter(owner_adds, publish=False))
    races = sorted({(rule, site, other) for rule, site, other, _w, _ow in _pairs(recs)})
    assert races == [(Rule.WAW, 21, 10), (Rule.WAW, 22, 10)]
    assert {r.workgroup for r in recs} == {0, 1}


@pytest.mark.parametrize("owner_adds", [False, True])
def test_published_zeroing_store_and_concurrent_atomics_are_clean(owner_adds):
    assert _same(_counter(owner_adds, publish=True)) == []


def test_a_later_plain_store_of_the_wave_supersedes_the_hidden_one():
    """store 10, atomic 11, store 12 in wave 0: wave 1's atomic races store 12 (the wave's
    last plain write) and is exempt against atomic 11; store 10 is gone."""
    prog = Program(waves=2, lds=64)
    prog.wave(0).store(10, at=0).atomic(11, at=0).store(12, at=0)
    prog.wave(1).atomic(21, at=0)
    assert [(rule, site, other) for rule, site, other, _w, _ow in _pairs(_same(prog))] == [(Rule.WAW, 21, 12)]


def test_plain_accesses_still_name_the_atomic():
    """A plain read of another wave is reported against the atomic (the newer write of
    the wave: it is ordered iff the hidden store is), not a second time against the store."""
    prog = Program(waves=2, lds=64)
    prog.wave(0).store(10, at=0).atomic(11, at=0)
    prog.wave(1).load(31, at=0)
    assert [(rule, site, other) for rule, site, other, _w, _ow in _pairs(_same(prog))] == \
        [(Rule.RAW_UNPUBLISHED, 31, 11)]


def test_hidden_store_keeps_its_lane_and_partial_granules():
    """Lanes 5.. of wave 0 store 4-byte words of a 16-byte granule, its lane 7's atomic
    hides one of them; wave 1's 2-byte atomic (refining the shadow) names that lane."""
    prog = Program(waves=2, lds=64)
    prog.wave(0).store(10, at=0, lanes=range(5, 9), nbytes=4).atomic(11, at=8, lanes=(7,))
    prog.wave(1).atomic(21, at=10, lanes=(2,), nbytes=2)
    recs = _same(prog)
    assert [(r.site, r.other_site, r.lds_offset, r.lane, r.other_lane) for r in recs] == [(21, 10, 10, 2, 7)]


def _counter_program(seed: int) -> Program:
    """Random stores, atomics and loads of a few words (and a copy now and then), in
    random barrier phases: atomics meet hidden plain stores often."""
    rng = random.Random(seed)
    prog = Program(waves=rng.choice([2, 3, 4]), lds=rng.choice([32, 64]), groups=tuple(range(rng.choice([1, 2]))))

    def op(b, sites):
        at = rng.choice([0, 4, 8, 16])
        r = rng.random()
        if r < 0.3:
            b.store(next(sites), at, lanes=rng.choice([(0,), (0, 1), range(4)]), nbytes=rng.choice([4, 8]))
        elif r < 0.65:
            b.atomic(next(sites), at, lanes=rng.choice([(0,), (1, 2)]))
        elif r < 0.8:
            b.load(next(sites), at, lanes=(0,), nbytes=rng.choice([4, 16]))
        elif r < 0.85:
            b.dma_load(next(sites), at)
        elif r < 0.93:
            b.wait_ds(rng.choice([0, 1]))
        else:
            b.wait_async(0)

    return random_phases(rng, prog, rng.randint(0, 3), exit_p=0.1, max_ops=6, op=op, window_op=op, drain_p=0.5)


@pytest.mark.parametrize("seed", range(40))
def test_random_counter_programs_agree_with_the_reference(seed):
    _same(_counter_program(seed), policies=("rr", ("random", seed)))


def test_random_counter_programs_exercise_the_hidden_check():
    """Guard against a vacuous differential test: many of these programs have an atomic
    that races only a hidden plain store."""
    saved = lds_mod.LdsShadow._hidden
    hits = set()

    def spy(self, rows, wave, op, own, clk, conf):
        out = saved(self, rows, wave, op, own, clk, conf)
        if out is not None and (conf is None or out.pos.size > conf.pos.size):
            hits.add(seed)
        return out

    lds_mod.LdsShadow._hidden = spy
    try:
        for seed in range(40):
            _run(_counter_program(seed), ShadowEngine)
    finally:
        lds_mod.LdsShadow._hidden = saved
    assert len(hits) >= 8
