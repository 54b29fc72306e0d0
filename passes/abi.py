"""The ldssan hook ABI: the one list of `__ldssan_*` entry points the pass inserts and both
executors implement. Names may grow; an existing name never changes meaning.

Every hook is `void(i32 site, ...)`; `site` indexes the kernel's site table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DsKind(enum.IntEnum):
    READ = 1
    WRITE = 2
    ATOMIC = 3


class CopyKind(enum.IntEnum):
    TO_LDS = 1  # the copy writes LDS (global -> LDS)
    FROM_LDS = 2  # the copy reads LDS (LDS -> global)


class Counter(enum.IntEnum):
    """gfx1250 wait counters (per wave, in order within a type)."""

    DS = 0
    LOAD = 1
    STORE = 2
    ASYNC = 3
    TENSOR = 4


# The wait hook's counter operand for `wait.asyncmark N`: not a hardware counter.
WAIT_ASYNCMARK = 5

# Bytes per lane of the async copy ops, by their name suffix (`...async.to.lds.b32`).
ASYNC_WIDTH_BYTES = {"b8": 1, "b32": 4, "b64": 8, "b128": 16}


class BarrierForm(enum.IntEnum):
    """Where a barrier hook sits relative to the barrier op it describes."""

    FENCED_ARRIVE = 0  # before gpu.barrier / rocdl.barrier: fence release + signal(-1)
    FENCED_DONE = 1  # after gpu.barrier / rocdl.barrier: wait(-1) + fence acquire
    SIGNAL = 2  # before rocdl.s.barrier.signal (raw, no fence)
    WAIT = 3  # after rocdl.s.barrier.wait (raw, no fence)
    BARE_ARRIVE = 4  # before rocdl.s.barrier (signal + wait, no fence)
    BARE_DONE = 5  # after rocdl.s.barrier


# LLVM AtomicOrdering numbering, as MLIR's llvm.fence stores it.
ORDERINGS = {2: "monotonic", 4: "acquire", 5: "release", 6: "acq_rel", 7: "seq_cst"}
SCOPES = ["", "workgroup", "workgroup-one-as", "agent", "agent-one-as", "wavefront",
          "wavefront-one-as", "cluster", "cluster-one-as", "one-as", "singlethread"]


# Fence orderings that compile to counter waits on gfx1250 (docs/memory-model.md, fences).
DRAINING_ORDERINGS = frozenset({"release", "acquire", "acq_rel", "seq_cst"})
# Scopes narrower than the workgroup emit no dscnt wait; "*-one-as" fences never do.
NON_DRAINING_SCOPES = frozenset({"singlethread", "wavefront"})


def fence_drains(ordering: str, scope: str) -> bool:
    """True when `llvm.fence ordering syncscope(scope)` waits dscnt/loadcnt/storecnt 0.

    The one decision both the emulator (does a fence land queued ds stores?) and the
    happens-before engine (does it drain the wave's outstanding ops?) use.
    """
    if ordering not in DRAINING_ORDERINGS:
        return False
    scope = scope.strip().lower()
    if scope.endswith("one-as"):
        return False
    return scope not in NON_DRAINING_SCOPES


def scope_id(scope: str) -> int:
    try:
        return SCOPES.index(scope)
    except ValueError:
        raise ValueError(f"ldssan: unknown fence syncscope {scope!r}; known: {SCOPES}") from None


@dataclass(frozen=True)
class Hook:
    name: str
    operands: tuple[str, ...]  # MLIR types after the i32 site id
    doc: str


HOOKS = {
    h.name: h
    for h in (
        Hook("__ldssan_ds", ("!llvm.ptr<3>", "i32", "i32"),
             "ds: an LDS load/store/atomic of `bytes` per active lane at ptr; kind = DsKind"),
        Hook("__ldssan_dma", ("!llvm.ptr<3>", "i32", "i32"),
             "dma: an async per-lane copy touching `bytes` of LDS at ptr; kind = CopyKind"),
        Hook("__ldssan_tdm", ("vector<4xi32>", "vector<8xi32>", "vector<4xi32>", "vector<4xi32>", "i32"),
             "tdm: a tensor-data-mover op; the engine decodes its LDS footprint from D# groups 0-3"),
        Hook("__ldssan_wait", ("i32", "i32"), "wait: s_wait_<counter>cnt n (or wait.asyncmark n) executed"),
        Hook("__ldssan_mark", (), "mark: rocdl.asyncmark executed"),
        Hook("__ldssan_barrier", ("i32", "i32"), "barrier: a barrier event; form = BarrierForm, then the id"),
        Hook("__ldssan_fence", ("i32", "i32"), "fence: llvm.fence with an ordering and a scope id (SCOPES)"),
        Hook("__ldssan_use", (), "use: the first use of a ds load's result (site = the load); LLVM's "
             "waitcnt insertion completes that load, and every earlier ds op of the wave, before it"),
    )
}
