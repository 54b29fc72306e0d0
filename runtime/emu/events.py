"""What a wave's generated code yields to the scheduler (sched.py): one type per event.

A wave is a generator (codegen.py); it yields at every scheduling point, and the scheduler
dispatches on the event's type. The emitters (ops/*.py) write `yield Barrier(-1, M0)` and
the like: the translation's namespace holds these names (`NAMESPACE`), so an event costs a
tuple, and the events without operands (or with constant ones) are single instances.
Events are told apart by type, never by equality (they are tuples underneath).
"""

from __future__ import annotations

from typing import NamedTuple


class Barrier(NamedTuple):
    """The workgroup barrier (`gpu.barrier`, `s_barrier`): signal then wait barrier `bid`,
    reached under exec mask `mask`; its release fence lands the wave's ds stores first."""

    bid: int
    mask: object


class Signal(NamedTuple):
    """`s_barrier_signal bid` under exec mask `mask` (-3: the cluster barrier)."""

    bid: int
    mask: object


class Wait(NamedTuple):
    """`s_barrier_wait bid` (-3: the cluster barrier)."""

    bid: int


class WaitCount(NamedTuple):
    """`s_wait_<counter>cnt count`: at most `count` of the wave's `counter` ops in flight
    (counter: "ds", "load", "store", "async", "tensor", "exp", "km")."""

    counter: str
    count: int


class WaitAsyncMark(NamedTuple):
    """`wait.asyncmark count`: the copies issued before the newest `count` marks land."""

    count: int


class Issue(NamedTuple):
    """A copy was queued on the wave's `counter` ("async", "tensor"); it may land now."""

    counter: str


class Spin(NamedTuple):
    """A loop iteration (`scf.while`, a divergent loop): lets other waves and resident
    workgroups progress; a run of these with no other event is a spin-wait."""


class Sync(NamedTuple):
    """A global atomic: other workgroups may act on it now."""


SPIN = Spin()
SYNC = Sync()
ISSUE_ASYNC = Issue("async")
ISSUE_TENSOR = Issue("tensor")

# the names generated code uses (codegen.translate puts them in its namespace)
NAMESPACE = {"Barrier": Barrier, "Signal": Signal, "Wait": Wait, "WaitCount": WaitCount,
             "WaitAsyncMark": WaitAsyncMark, "SPIN": SPIN, "SYNC": SYNC, "ISSUE_ASYNC": ISSUE_ASYNC,
             "ISSUE_TENSOR": ISSUE_TENSOR}
