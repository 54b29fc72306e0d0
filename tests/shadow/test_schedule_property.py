"""Property (issue #13 item 7): the verdict does not depend on the schedule.

Random small LDS-exchange programs over 2-4 waves -- ds stores and loads of a few shared
words, spin-like repeated loads, TDM copies, waits, fences, fenced / raw / split barriers --
run under every protocol scheduler policy, and with every spin repeated once or three times
(how often a spin-wait polls is up to the schedule). The ring must receive the same records
in the same order every time (MODEL.md §5), so in particular the same set of
(rule, site, other_site).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .protocol import POLICIES, Program

WORDS = (0, 16, 32, 48, 64)  # the shared LDS words (16 bytes apart: one granule each)

_op = st.one_of(
    st.tuples(st.just("store"), st.sampled_from(WORDS), st.sampled_from(((0,), (0, 1, 2, 3), (5,)))),
    st.tuples(st.just("load"), st.sampled_from(WORDS), st.sampled_from(((0,), (0, 1, 2, 3), (5,)))),
    st.tuples(st.just("spin"), st.sampled_from(WORDS)),
    st.tuples(st.just("wait_ds"), st.integers(0, 1)),
    st.tuples(st.just("tdm_load"), st.sampled_from(WORDS)),
    st.tuples(st.just("wait_tensor"), st.integers(0, 1)),
    st.tuples(st.just("fence")),
)
_sync = st.sampled_from(("barrier", "raw_barrier", "split"))
# per wave: phases of ops; all waves run the same number of barriers (a shared kind per
# barrier, so the only divergence is which ops each phase holds)
_program = st.integers(2, 4).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(_sync, min_size=0, max_size=3),
).flatmap(lambda nb: st.tuples(
    st.just(nb[0]), st.just(nb[1]),
    st.lists(st.lists(st.lists(_op, max_size=4), min_size=len(nb[1]) + 1, max_size=len(nb[1]) + 1),
             min_size=nb[0], max_size=nb[0]),
    st.lists(st.lists(_op, max_size=2), min_size=nb[0], max_size=nb[0]),  # inside split windows
)))


def build(spec, polls: int) -> Program:
    n, syncs, phases, windows = spec
    prog = Program(waves=n, lds=128)
    for w in range(n):
        b = prog.wave(w)
        site = 1000 * (w + 1)
        for k, ops in enumerate(phases[w]):
            for i, op in enumerate(ops):
                _emit(b, op, site + 10 * k + i, polls)
            if k < len(syncs):
                kind = syncs[k]
                if kind == "split":
                    b.signal(100 + k)
                    for i, op in enumerate(windows[w]):
                        _emit(b, op, site + 500 + 10 * k + i, polls)
                    b.wait_barrier(100 + k)
                else:
                    getattr(b, kind)(100 + k)
    return prog


def _emit(b, op, site: int, polls: int) -> None:
    name = op[0]
    if name in ("store", "load"):
        getattr(b, name)(site, at=op[1], lanes=op[2])
    elif name == "spin":
        for _ in range(polls):  # each poll's result is used: the compiler's dscnt wait
            b.load(site, at=op[1]).wait_ds(0)
    elif name == "wait_ds":
        b.wait_ds(op[1])
    elif name == "tdm_load":
        b.tdm_load(site, at=op[1], size=16)
    elif name == "wait_tensor":
        b.wait_tensor(op[1])
    else:
        b.fence()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_program)
def test_random_lds_exchange_verdict_is_the_same_under_every_schedule(spec):
    baseline = None
    for polls in (1, 3):
        prog = build(spec, polls)
        for policy in POLICIES:
            recs = prog.run(policy)
            if baseline is None:
                baseline = recs
                continue
            verdict = {(r.rule, r.site, r.other_site) for r in recs}
            assert verdict == {(r.rule, r.site, r.other_site) for r in baseline}, (polls, policy)
            assert recs == baseline, (polls, policy)
