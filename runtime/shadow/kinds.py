"""The shadow engine's vocabulary: the hook ABI's enums (one set, `ldssan.passes.abi`), and
the engine's internal op codes.
"""

from __future__ import annotations

from ldssan.passes.abi import CopyKind, Counter, fence_drains  # noqa: F401  (the engine's fence rule)
from ldssan.passes.abi import DsKind as AccessKind

__all__ = ["AccessKind", "CopyKind", "Counter"]


N_COUNTERS = len(Counter)  # C: the counter axis of every per-wave completion vector
DS, LOAD, STORE, ASYNC, TENSOR = range(N_COUNTERS)
COPY_COUNTERS = (ASYNC, TENSOR)

# What one processed event does to LDS (the `op` column of the event table).
OP_READ = 1  # ds load, or a copy that reads LDS (FROM_LDS)
OP_WRITE = 2  # ds store, or a copy that writes LDS (TO_LDS)
OP_ATOMIC = 3  # ds atomic: a write that does not race with other atomics
