"""Launch memoization: a host call identical to an earlier one is replayed, not run again.

The rule. A host call on the virtual gfx1250 is a deterministic function of

1. the compiled specialization: the module's content hash (its IR with the site table and
   source locations) and the host function's name;
2. the bytes FlyDSL packed into the host function's argument slots: geometry, dynamic LDS,
   scalars and pointer values (addresses, so the regions below are the same memory);
3. the run configuration: scheduler policy (seed included), batch, resident workgroups,
   time limit, step budget, and the checker's ring capacity;
4. the base, size and bytes of every global-memory region the launch can reach: every CPU
   tensor registered for it (arguments and the tensors reachable from them), outputs'
   prior contents included.

Nothing else reaches a launch: an address outside the registered regions is an error, the
scheduler draws its choices from `random.Random(policy.seed)` afresh for each run (so
`random(3)` -- and `random`, which is `random(0)` -- is deterministic), device globals other
than LDS are refused by the emulator, and no op reads a clock. So a call whose four parts
equal an earlier call's produces the same memory and the same violation records: its
recorded post-state (the bytes of every region it changed) is written back and the
checker's records are replayed as this call's (relabelled with this call's launch number,
decoded and counted like any launch). Only calls that finished are recorded; a call that
raised runs again next time. Bytes are compared by SHA-256 digest.

Refused (run normally, counted as not memoizable with the reason):

- raw addresses: a pointer argument outside the launch's tensors (`from_c_void_p`, an
  integer address) or a kernel that builds global pointers from integers (`llvm.inttoptr`)
  may read any live tensor of the process (`GlobalMemory.reach_process`);
- observed runs: taint runs (`ldssan rows`), and while an observer registered with
  `add_observer` says why (a torch profiler window recording each launch as a device event,
  the campaign's reliance probe recording each access): they see executions, not replays;
- a checker that cannot be replayed: the device runtime (FLYDSL_LDSSAN_DEVICE=emulated)
  keeps its records in a buffer of process memory, outside the launch's regions;
- a module without a content hash (nothing to key the specialization on);
- a call whose post-state alone exceeds the budget (run, not recorded).

Every `sanitize()` block has its own memo (`enable()` one for the process); an `emulate()`
block inside it shares it (`replace` copies the config; the policy is in every key).
Plain emulation outside a sanitizer is never memoized: output checks and the emulator's
benchmarks time and compare executions.

Bounded memory: a `Memo` keeps at most `budget` bytes of post-states and records, least
recently used first out. FLYDSL_LDSSAN_MEMO / `sanitize(memo=)` / `enable(memo=)` set the
budget (0: off).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from . import taint as _taint

DEFAULT_BUDGET = 256 << 20  # bytes of post-states kept per sanitized run by default

REPLAYED = "replayed"
RECORDED = "recorded"
# Why a call is not memoizable (stable texts: the summary and the JSON report count by them)
RAW_ADDRESSES = ("raw addresses: a pointer argument outside the launch's tensors, or llvm.inttoptr, "
                 "may read any live tensor")
TAINT_RUN = "a taint run (ldssan rows) observes the execution itself"
OBSERVED = "observed: "  # + what an observer (add_observer) said
NOT_REPLAYABLE = "its checker cannot be replayed (the device runtime keeps its records in process memory)"
NO_MODULE_HASH = "the module has no content hash"
TOO_LARGE = "its post-state exceeds the memo budget"
NEW_REGIONS = "it registered memory while running"
NOT_MEMOIZABLE = "not memoizable: "


# Observers of execution (a profiler window, a probe): each returns why a call must run now, or None
_OBSERVERS: list = []


def add_observer(why) -> None:
    """While `why()` returns a reason, calls run and are counted not memoizable with it."""
    _OBSERVERS.append(why)


def remove_observer(why) -> None:
    if why in _OBSERVERS:
        _OBSERVERS.remove(why)


def refused(status: str) -> str | None:
    """The reason of a 'not memoizable: ...' status, else None."""
    return status[len(NOT_MEMOIZABLE):] if status.startswith(NOT_MEMOIZABLE) else None


@dataclass
class _Entry:
    post: list[tuple[int, np.ndarray]]  # (region index, its bytes after the call) for each changed region
    records: list  # the call's LaunchRecords
    checker: object  # the sanitizer's snapshot (`memo_snapshot()`), or None
    nbytes: int


@dataclass(eq=False)  # a store: equal only to itself
class Memo:
    """The recorded host calls of one sanitizer (a `sanitize()` block, or the process under
    `enable()`), at most `budget` bytes, least recently used first out."""

    budget: int = DEFAULT_BUDGET
    replayed: int = 0
    recorded: int = 0
    evicted: int = 0
    refusals: Counter = field(default_factory=Counter)
    _entries: "OrderedDict[tuple, _Entry]" = field(default_factory=OrderedDict, repr=False)
    _bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict:
        return {"budget": self.budget, "replayed": self.replayed, "recorded": self.recorded,
                "evicted": self.evicted, "entries": len(self._entries), "bytes": self._bytes,
                "not_memoizable": dict(self.refusals)}

    def _get(self, key: tuple) -> _Entry | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.replayed += 1
            return hit

    def _put(self, key: tuple, entry: _Entry) -> None:
        """Keep `entry` (at most the budget), evicting the least recently used."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = entry
            self._bytes += entry.nbytes
            self.recorded += 1
            while self._bytes > self.budget:
                _k, gone = self._entries.popitem(last=False)
                self._bytes -= gone.nbytes
                self.evicted += 1

    def _refuse(self, reason: str) -> str:
        with self._lock:
            self.refusals[reason] += 1
        return NOT_MEMOIZABLE + reason


def run_host(memo: Memo | None, launcher, entry: str, values: list, raws: list[bytes]) -> None:
    """Run the host call `entry` on `launcher` (its memory, checker and records), or replay
    it from `memo` (None or a zero budget: always run). The outcome ("replayed",
    "recorded", "not memoizable: ...") is in each launch record's `stats["memo"]` and in the
    checker's `memo` attribute (the report counts it)."""
    if memo is None or memo.budget <= 0:
        launcher.run_host(entry, values)
        return
    reason = _refusal(launcher)
    if reason is not None:
        launcher.run_host(entry, values)
        _mark(launcher, memo._refuse(reason))
        return
    t0 = time.perf_counter()
    regions = list(launcher.gmem.regions)
    digests = [_digest(r.view) for r in regions]
    key = (launcher.ir_key, entry, tuple(raws), _run_config(launcher),
           tuple((r.base, r.size, d) for r, d in zip(regions, digests)))
    hit = memo._get(key)
    if hit is not None:
        _replay(hit, launcher, regions, time.perf_counter() - t0)
        return
    launcher.run_host(entry, values)
    if len(launcher.gmem.regions) != len(regions):
        _mark(launcher, memo._refuse(NEW_REGIONS))
        return
    changed = [i for i, (r, d) in enumerate(zip(regions, digests)) if _digest(r.view) != d]
    checker = launcher.sanitizer.memo_snapshot() if launcher.sanitizer is not None else None
    nbytes = (sum(regions[i].size for i in changed) + getattr(checker, "nbytes", 0)
              + 512 * (1 + len(launcher.records)))  # + the records' and the key's own, roughly
    if nbytes > memo.budget:  # said before the post-state is copied
        _mark(launcher, memo._refuse(TOO_LARGE))
        return
    _mark(launcher, RECORDED)
    post = [(i, regions[i].view.copy()) for i in changed]
    memo._put(key, _Entry(post, [replace(r, stats=dict(r.stats)) for r in launcher.records], checker, nbytes))


def _refusal(launcher) -> str | None:
    if not launcher.ir_key:
        return NO_MODULE_HASH
    if launcher.sanitizer is not None and not hasattr(launcher.sanitizer, "replay"):
        return NOT_REPLAYABLE  # first: the device runtime's linked code also builds pointers
    if launcher.gmem.reach_process:
        return RAW_ADDRESSES
    if _taint.current() is not None:
        return TAINT_RUN
    for why in list(_OBSERVERS):
        said = why()
        if said:
            return OBSERVED + said
    return None


def _run_config(launcher) -> tuple:
    """What of the run's configuration a call's outcome may depend on."""
    ring = getattr(getattr(launcher.sanitizer, "ring", None), "capacity", None)
    return (launcher.policy, launcher.batch, launcher.resident, launcher.limits,
            type(launcher.sanitizer).__qualname__, ring)


def _digest(view: np.ndarray) -> bytes:
    return hashlib.sha256(memoryview(view)).digest()


def _replay(hit: _Entry, launcher, regions, seconds: float) -> None:
    """This call is `hit`'s: its post-state written back, its records and report replayed."""
    t0 = time.perf_counter()
    for i, data in hit.post:
        regions[i].view[:] = data
    if launcher.sanitizer is not None:
        launcher.sanitizer.replay(hit.checker)
    recs = [replace(r, stats={**r.stats, "memo": REPLAYED}, seconds=0.0) for r in hit.records]
    if recs:  # what the replay cost, hashing included, where a benchmark sums launch seconds
        recs[0].seconds = seconds + time.perf_counter() - t0
    launcher.records.extend(recs)
    if launcher.sanitizer is not None:
        launcher.sanitizer.memo = REPLAYED


def _mark(launcher, status: str) -> None:
    for r in launcher.records:
        r.stats["memo"] = status
    if launcher.sanitizer is not None:
        launcher.sanitizer.memo = status
