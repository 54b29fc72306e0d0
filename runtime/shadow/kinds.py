"""The shadow engine's vocabulary: the enums the emulator passes in, and internal op codes.

The public enums mirror `ldssan.passes.abi` (same numbers), so a hook operand converts with
a plain `AccessKind(kind)`.
"""

from __future__ import annotations

from enum import IntEnum


class AccessKind(IntEnum):
    """What a ds op does to LDS."""

    READ = 1
    WRITE = 2
    ATOMIC = 3  # LDS read-modify-write (atomicrmw / cmpxchg / ds_*_rtn)


class CopyKind(IntEnum):
    """Direction of an async/TDM copy, seen from LDS."""

    TO_LDS = 1  # global -> LDS: the copy writes LDS
    FROM_LDS = 2  # LDS -> global: the copy reads LDS


class Counter(IntEnum):
    """gfx1250 wait counters the engine tracks (per wave, in order within a type)."""

    DS = 0
    LOAD = 1
    STORE = 2
    ASYNC = 3
    TENSOR = 4


N_COUNTERS = 5  # C: the counter axis of every per-wave completion vector
DS, LOAD, STORE, ASYNC, TENSOR = range(N_COUNTERS)
COPY_COUNTERS = (ASYNC, TENSOR)

# What one processed event does to LDS (the `op` column of the event table).
OP_READ = 1  # ds load, or a copy that reads LDS (FROM_LDS)
OP_WRITE = 2  # ds store, or a copy that writes LDS (TO_LDS)
OP_ATOMIC = 3  # ds atomic: a write that does not race with other atomics

# Fence orderings that compile to counter waits on gfx1250 (GFX1250_SYNC_MODEL §3.3).
DRAINING_ORDERINGS = frozenset({"release", "acquire", "acq_rel", "seq_cst"})
# Scopes narrower than the workgroup emit no dscnt wait; "*-one-as" fences never do.
NON_DRAINING_SCOPES = frozenset({"singlethread", "wavefront"})


def fence_drains(ordering: str, scope: str) -> bool:
    """True when `llvm.fence ordering syncscope(scope)` waits dscnt/loadcnt/storecnt 0."""
    if ordering not in DRAINING_ORDERINGS:
        return False
    scope = scope.strip().lower()
    if scope.endswith("one-as"):
        return False
    return scope not in NON_DRAINING_SCOPES
