"""What a wave's generated code yields to the scheduler (sched.py): one type per event.

A wave is a generator (codegen.py); it yields at every scheduling point, and the scheduler
dispatches on the event's type. Every event's operands are known at translation, so each
is built once per translation (`codegen.Translator.yield_event`), never at the yield: the
scheduler's hot path builds nothing. A barrier signal is reached under an exec mask that is
known only as the wave runs: the generated code sets `ctx.sync_mask` right before yielding
a `Barrier` or `Signal`. Events are told apart by type, never by equality (they are tuples
underneath: `Wait(0) == WaitAsyncMark(0)`).
"""

from __future__ import annotations

from typing import NamedTuple


class Barrier(NamedTuple):
    """The workgroup barrier (`gpu.barrier`, `s_barrier`): signal then wait barrier `bid`
    (exec mask: `ctx.sync_mask`); its release fence lands the wave's ds stores first."""

    bid: int


class Signal(NamedTuple):
    """`s_barrier_signal bid` (-3: the cluster barrier; exec mask: `ctx.sync_mask`)."""

    bid: int


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


WORKGROUP_BARRIER = Barrier(-1)
SPIN = Spin()
SYNC = Sync()
ISSUE_ASYNC = Issue("async")
ISSUE_TENSOR = Issue("tensor")
