"""ldssan.runtime.shadow.peers: the cluster checker's ordering rule for TDM multicast into
a peer's LDS (LDS014), event by event, in each wave's program order. Two workgroups of one
cluster (flat ids 0 and 1), one or two waves each; the copy is wave 0 of workgroup 0
writing bytes 0..15 of workgroup 1's LDS. FlyDSL's `cluster_barrier()` is a workgroup
barrier (-1, every wave), a signal -3 by wave 0, a wait -3 by every wave."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.records import NO_LANE, Cause, Ring, Rule
from ldssan.runtime.shadow.peers import ClusterChecker

TILE = np.arange(16)
COPY, READ, WRITE = 7, 9, 11  # sites


def _checker():
    return ClusterChecker({0: 100, 1: 101}, Ring(64), launch=3)


def _cluster_barrier(c, g: int, waves: int = 1) -> None:
    for w in range(waves):
        c.signal(g, w, -1)
    for w in range(waves):
        c.wait(g, w, -1)
    c.signal(g, 0, -3)
    for w in range(waves):
        c.wait(g, w, -3)


def _copy(c, wait: bool = True) -> None:
    c.tensor_op(0, 0, COPY, {1: TILE})
    if wait:
        c.tensor_wait(0, 0, 0)


def _read(c, wave: int = 0, write: bool = False) -> None:
    c.access(1, wave, WRITE if write else READ, TILE[4:8], np.full(4, 2), write=write)


def _records(c) -> list:
    c.finish()
    return [(r.rule, Cause(r.cause), r.site, r.other_site, r.lds_offset, r.wave, r.other_wave, r.extra,
             r.workgroup, r.launch) for r in c.ring.records()]


def test_waited_then_cluster_barrier_then_read_is_clean():
    c = _checker()
    _copy(c)
    _cluster_barrier(c, 0)
    _cluster_barrier(c, 1)
    _read(c)
    assert _records(c) == []


def test_the_issuer_s_other_wave_is_published_through_the_workgroup_barrier():
    # wave 1 of workgroup 0 issues and waits; wave 0 signals -3 after the workgroup barrier
    c = _checker()
    c.tensor_op(0, 1, COPY, {1: TILE})
    c.tensor_wait(0, 1, 0)
    _cluster_barrier(c, 0, waves=2)
    _cluster_barrier(c, 1, waves=2)
    _read(c, wave=1)
    assert _records(c) == []


def test_no_cluster_barrier_is_no_barrier_with_both_sites():
    c = _checker()
    _copy(c)
    _read(c)
    assert _records(c) == [(Rule.CLUSTER_COPY_UNORDERED, Cause.NO_BARRIER, READ, COPY, 4, 0, 0, 0, 101, 3)]


def test_a_copy_not_waited_before_the_signal_is_copy_not_waited():
    c = _checker()
    _copy(c, wait=False)
    _cluster_barrier(c, 0)
    c.tensor_wait(0, 0, 0)  # too late: after the signal
    _cluster_barrier(c, 1)
    _read(c)
    assert [r[1] for r in _records(c)] == [Cause.COPY_NOT_WAITED]


def test_a_wait_too_weak_leaves_the_copy_unpublished():
    c = _checker()
    _copy(c, wait=False)
    c.tensor_op(0, 0, COPY + 1, {})
    c.tensor_wait(0, 0, 1)  # completes the first op only
    _cluster_barrier(c, 0)
    _cluster_barrier(c, 1)
    _read(c)
    assert _records(c) == []
    c = _checker()
    c.tensor_op(0, 0, COPY + 1, {})
    _copy(c, wait=False)
    c.tensor_wait(0, 0, 1)  # leaves the multicast, the newest, outstanding
    _cluster_barrier(c, 0)
    _cluster_barrier(c, 1)
    _read(c)
    assert [r[1] for r in _records(c)] == [Cause.COPY_NOT_WAITED]


def test_only_the_reading_wave_s_own_cluster_wait_counts():
    # wave 1 of the reader skips the -3 wait (it only took the workgroup barrier): conservative
    c = _checker()
    _copy(c)
    _cluster_barrier(c, 0, waves=1)
    for w in (0, 1):
        c.signal(1, w, -1)
    for w in (0, 1):
        c.wait(1, w, -1)
    c.signal(1, 0, -3)
    c.wait(1, 0, -3)
    _read(c, wave=1)
    assert [r[1] for r in _records(c)] == [Cause.NO_BARRIER]


@pytest.mark.parametrize("barrier_between", [True, False])
def test_a_refill_after_the_peer_s_read_needs_a_cluster_barrier_after_the_read(barrier_between):
    # workgroup 1 reads; then workgroup 0 multicasts a refill of the same bytes
    c = _checker()
    _cluster_barrier(c, 0)  # phase 0: both start
    _cluster_barrier(c, 1)
    _read(c)
    if barrier_between:
        _cluster_barrier(c, 1)
        _cluster_barrier(c, 0)
    _copy(c)
    got = _records(c)
    if barrier_between:
        assert got == []
    else:
        # the copy issued in the same cluster phase as the read: no barrier between them
        assert [r[1] for r in got] == [Cause.NO_BARRIER]


def test_a_copy_issued_a_phase_after_the_access_it_races_is_named_so():
    # wave 1 of workgroup 1 writes; wave 0 arrives at the cluster barrier for its workgroup
    # with no workgroup barrier after that write, so the peer's refill is not ordered after it
    c = _checker()
    _read(c, wave=1, write=True)
    c.signal(1, 0, -3)
    _cluster_barrier(c, 0)
    _copy(c)
    got = _records(c)
    assert [(r[1], r[2]) for r in got] == [(Cause.PEER_COPY_AFTER_ACCESS, WRITE)], got


def test_accesses_outside_the_copy_s_bytes_are_not_checked_and_lanes_are_kept():
    c = _checker()
    _copy(c)
    c.access(1, 0, READ, np.arange(64, 80), np.arange(16))
    c.access(1, 0, READ + 1, np.array([20, 15]), np.array([5, 6]))
    got = _records(c)
    assert [(r[2], r[4]) for r in got] == [(READ + 1, 15)]
    assert c.ring.records()[0].lane == 6 != NO_LANE


# -- merged requests: both workgroups issue the same multicast (docs/memory-model.md) ----------
GLOBAL, MASK = 0x1000, 0b11
EARLY, RENDEZVOUS = 1, 0  # the descriptor's early-timeout bit


def _both_issue(c, *, tile=GLOBAL, own_wave: int = 1, own_wait: bool = True, early: int = EARLY) -> None:
    """Workgroup 0 (wave 0) and workgroup 1 (wave `own_wave`) multicast the same tile (or
    workgroup 1 another one, `tile`) into both LDS; the peer's copy is waited by its issuer."""
    c.tensor_op(0, 0, COPY, {1: TILE}, own=TILE, tile=(GLOBAL, MASK), early=early)
    c.tensor_wait(0, 0, 0)
    c.tensor_op(1, own_wave, COPY, {0: TILE}, own=TILE, tile=(tile, MASK), early=early)
    if own_wait:
        c.tensor_wait(1, own_wave, 0)


def _workgroup_barrier(c, g: int, waves: int = 2) -> None:
    for w in range(waves):
        c.signal(g, w, -1)
    for w in range(waves):
        c.wait(g, w, -1)


def test_merged_request_read_after_the_own_wait_and_a_workgroup_barrier_is_clean():
    c = _checker()
    _both_issue(c)
    _workgroup_barrier(c, 1)
    _read(c, wave=0)
    assert _records(c) == []


@pytest.mark.parametrize("case", ["own_not_waited", "another_tile", "write_after_it", "newer_own_tile"])
def test_early_timeout_merge_needs_the_own_wait_the_same_tile_a_read_and_no_newer_tile(case):
    c = _checker()
    _both_issue(c, own_wait=case != "own_not_waited", tile=GLOBAL + 64 if case == "another_tile" else GLOBAL)
    if case == "newer_own_tile":  # workgroup 1 refills the bytes with its next tile, then reads that
        c.tensor_op(1, 1, COPY, {}, own=TILE, tile=(GLOBAL + 64, MASK), early=EARLY)
        c.tensor_wait(1, 1, 0)
    _workgroup_barrier(c, 1)
    _read(c, wave=0, write=case == "write_after_it")
    got = [(rule, cause) for rule, cause, *_ in _records(c)]
    assert got and all(rule == Rule.CLUSTER_COPY_UNORDERED for rule, _ in got), got


def test_merged_request_access_before_the_own_request_is_ordered_before_the_peer_copy():
    # the peer's copy reaches this LDS no earlier than its own request: a read (or write) of
    # the old contents before issuing it, through a workgroup barrier, is ordered
    c = _checker()
    c.tensor_op(0, 0, COPY, {1: TILE}, own=TILE, tile=(GLOBAL, MASK), early=EARLY)
    _read(c, wave=0, write=True)
    _workgroup_barrier(c, 1)
    c.tensor_op(1, 1, COPY, {0: TILE}, own=TILE, tile=(GLOBAL, MASK), early=EARLY)
    assert _records(c) == []


@pytest.mark.parametrize("case", ["write_after_it", "newer_own_tile"])
def test_a_rendezvous_is_the_own_request_so_later_writes_and_tiles_are_the_own_engine_s(case):
    # early timeout clear: the tile moves once both issued, covered by each one's own wait
    c = _checker()
    _both_issue(c, early=RENDEZVOUS)
    if case == "newer_own_tile":
        c.tensor_op(1, 1, COPY, {}, own=TILE, tile=(GLOBAL + 64, MASK), early=RENDEZVOUS)
        c.tensor_wait(1, 1, 0)
    _workgroup_barrier(c, 1)
    _read(c, wave=0, write=case == "write_after_it")
    assert _records(c) == []


def test_a_rendezvous_without_the_matching_own_request_keeps_the_cluster_rule():
    c = _checker()
    _both_issue(c, early=RENDEZVOUS, tile=GLOBAL + 64)
    _workgroup_barrier(c, 1)
    _read(c, wave=0)
    assert [r[0] for r in _records(c)] == [Rule.CLUSTER_COPY_UNORDERED]
