"""Launch memoization: a host call identical to an earlier one is replayed, not run again.

The rule. A host call on the virtual gfx1250 is a deterministic function of

1. the compiled specialization: the module's content hash (its IR with the site table and
   source locations) and the host function's name;
2. the bytes FlyDSL packed into the host function's argument slots: geometry, dynamic LDS,
   scalars and pointer values (addresses, so the regions below are the same memory);
3. the run configuration: scheduler policy (seed included), batch, resident workgroups,
   time limit, step budget, and the checker's ring capacity;
4. the layout of global memory: base and size of every region registered for the call
   (every CPU tensor of its arguments and reachable from them, and the storage of each
   raw-address argument);
5. the bytes of every region the call READ: a region counts as read when any access of the
   call read any byte of it (a load, a TDM or async copy from it, an atomic on it), at any
   point of the call -- also after the call itself wrote there. Its prior contents, as they
   were before the call, are in the key.

A region the call never read cannot have influenced it: every value the call computed came
from parts 1-3 and the read regions. So a call whose parts 1-5 equal a recorded call's
makes the same accesses, stores the same bytes at the same addresses and yields the same
violation records (by induction over its steps: each read returns what the recorded call's
read returned). Its replay writes back, for each region the recorded call read and changed,
the region's whole post-state (its prior bytes were equal), and for each region it only
wrote, exactly the bytes it stored (a byte mask, kept only when it did not store every
byte): whatever such a region held before is never read and, where not stored over, stays.
So an output that is only written (RMSNorm's, in a benchmark loop that reuses it) is not
part of the key: the loop's second launch is replayed. An output the call reads
(accumulation, a read-modify-write, a conditional store that looks first) is in the key and
runs again on other prior contents.

Nothing else reaches a call: an access outside the registered regions is an error, or
(for launches that pass raw addresses or build pointers with `llvm.inttoptr`) registers the
live tensor it hits -- then the call is refused, checked after it ran, since that memory was
not in the key; the scheduler draws its choices from `random.Random(policy.seed)` afresh
for each run (so `random(3)` -- and `random`, which is `random(0)` -- is deterministic),
device globals other than LDS are refused by the emulator, and no op reads a clock. Only
calls that finished are recorded; a call that raised runs again next time. Bytes are
compared by 128-bit XXH3 digest (hashing at memory speed: a 64 MiB input costs ~9 ms, SHA-256
~50 ms; the bytes are not adversarial, and a chance collision of 128 bits is out of reach);
a lookup hashes only the regions the candidate entries read.
The memory's tracking (`GlobalMemory.track`) is on for calls that may be recorded only.

Refused (run normally, counted as not memoizable with the reason):

- a call that registered memory while running (a raw address or an `llvm.inttoptr`
  pointer into a tensor outside the call's arguments): that tensor was not in the key;
- a call that changed a region that no tracked store wrote (fail closed: a writer the
  memory does not see);
- observed runs: taint runs (`ldssan rows`), and while an observer registered with
  `add_observer` says why (the campaign's reliance probe recording each access): they see
  executions, not replays. A torch profiler window is no such observer: a replayed call's
  launches reach it as device events through `add_replay_listener`;
- a checker that cannot be replayed: the device runtime (FLYDSL_LDSSAN_DEVICE=emulated)
  keeps its records in a buffer of process memory, outside the launch's regions;
- a module without a content hash (nothing to key the specialization on);
- a call whose records (and post-state digests) alone exceed the budget (run, not recorded).

Every `sanitize()` block has its own memo (`enable()` one for the process); an `emulate()`
block inside it shares it (`replace` copies the config; the policy is in every key).
Plain emulation outside a sanitizer is never memoized: output checks and the emulator's
benchmarks time and compare executions.

Bounded memory: a `Memo` keeps at most `budget` bytes of post-states and records, least
recently used first out. A call leaving more than `COPY_AFTER` bytes is first kept as digests
too, and as bytes only once it comes again into memory that does not hold them (copying a
big post-state into fresh memory costs more than a benchmark loop ever gains from it). A
call whose post-state does not fit is kept as the digests
of its post-state (and the write masks): it is replayed only where memory already holds
exactly that post-state -- a benchmark loop reusing its output, whose previous identical
launch wrote it -- and then nothing is written back; elsewhere it runs again. FLYDSL_LDSSAN_MEMO / `sanitize(memo=)` / `enable(memo=)` set the
budget (0: off).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
import xxhash

from . import taint as _taint

DEFAULT_BUDGET = 256 << 20  # bytes of post-states kept per sanitized run by default
# A call leaving more bytes than this is first kept as digests; its bytes are kept only when
# it comes again into memory that does not hold them (a benchmark loop never does): copying
# 64 MiB into memory the process has not touched yet costs ~0.3 s of page faults on the CI VMs
COPY_AFTER = 8 << 20

REPLAYED = "replayed"
RECORDED = "recorded"
# Why a call is not memoizable (stable texts: the summary and the JSON report count by them)
TAINT_RUN = "a taint run (ldssan rows) observes the execution itself"
OBSERVED = "observed: "  # + what an observer (add_observer) said
NOT_REPLAYABLE = "its checker cannot be replayed (the device runtime keeps its records in process memory)"
NO_MODULE_HASH = "the module has no content hash"
TOO_LARGE = "its post-state exceeds the memo budget"
NEW_REGIONS = ("it reached memory outside its registered tensors while running (a raw address or "
               "llvm.inttoptr into another tensor): not in the key")
UNTRACKED_WRITE = "it changed memory that no tracked store wrote"
NOT_MEMOIZABLE = "not memoizable: "


# Observers of execution (a profiler window, a probe): each returns why a call must run now, or None
_OBSERVERS: list = []


def add_observer(why) -> None:
    """While `why()` returns a reason, calls run and are counted not memoizable with it."""
    _OBSERVERS.append(why)


def remove_observer(why) -> None:
    if why in _OBSERVERS:
        _OBSERVERS.remove(why)


# Listeners of replays: fn(records, start_ns, end_ns) for each replayed call (a profiler
# window shows a replayed launch as a device event, as it shows an executed one)
_REPLAY_LISTENERS: list = []


def add_replay_listener(fn) -> None:
    """`fn(records, start_ns, end_ns)` is called with each replayed call's launch records
    and the `perf_counter_ns` span of its replay."""
    _REPLAY_LISTENERS.append(fn)


def remove_replay_listener(fn) -> None:
    if fn in _REPLAY_LISTENERS:
        _REPLAY_LISTENERS.remove(fn)


def refused(status: str) -> str | None:
    """The reason of a 'not memoizable: ...' status, else None."""
    return status[len(NOT_MEMOIZABLE):] if status.startswith(NOT_MEMOIZABLE) else None


@dataclass
class _Entry:
    # (region index, bytes, mask, digest): the region's bytes after the call; with a mask
    # (packed bits), only the bytes the call wrote, at the mask's set bits. A large entry
    # keeps the digest of those bytes instead (bytes None): replayed only where memory
    # already holds them
    post: list[tuple[int, np.ndarray | None, np.ndarray | None, bytes | None]]
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
    # (call, read set, digests of the read regions) -> entry; call: what precedes the bytes
    _entries: "OrderedDict[tuple, _Entry]" = field(default_factory=OrderedDict, repr=False)
    # call -> the read sets of its entries (how many entries have each), tried in turn
    _read_sets: dict = field(default_factory=dict, repr=False)
    _bytes: int = 0
    # keys whose digest-only entry was looked up into memory not holding it: kept as bytes next
    _missed: set = field(default_factory=set, repr=False)
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

    def _get(self, call: tuple, digest, usable=lambda entry: True) -> _Entry | None:
        """The entry of `call` whose read regions now hold the bytes they held when it was
        recorded (`digest(i)`: region i's digest now), if any and `usable(entry)`."""
        with self._lock:
            sets = list(self._read_sets.get(call, ()))
        for reads in sets:
            key = (call, reads, tuple(digest(i) for i in reads))
            with self._lock:
                hit = self._entries.get(key)
            if hit is not None and not usable(hit):
                with self._lock:
                    self._missed.add(key)
            elif hit is not None:
                with self._lock:
                    if key in self._entries:  # not evicted meanwhile by another thread
                        self._entries.move_to_end(key)
                    self.replayed += 1
                return hit
        return None

    def _put(self, key: tuple, entry: _Entry) -> None:
        """Keep `entry` (at most the budget), evicting the least recently used."""
        with self._lock:
            self._missed.discard(key)
            old = self._entries.pop(key, None)
            if old is not None:
                self._forget(key[0], key[1], old)
            self._entries[key] = entry
            self._read_sets.setdefault(key[0], Counter())[key[1]] += 1
            self._bytes += entry.nbytes
            self.recorded += 1
            while self._bytes > self.budget:
                k, gone = self._entries.popitem(last=False)
                self._forget(k[0], k[1], gone)
                self.evicted += 1

    def _forget(self, call: tuple, reads: tuple, gone: _Entry) -> None:
        self._bytes -= gone.nbytes
        sets = self._read_sets[call]
        sets[reads] -= 1
        if sets[reads] <= 0:
            del sets[reads]
        if not sets:
            del self._read_sets[call]

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
    t0_ns = time.perf_counter_ns()
    gmem = launcher.gmem
    regions = list(gmem.regions)
    call = (launcher.ir_key, entry, tuple(raws), _run_config(launcher),
            tuple((r.base, r.size) for r in regions))
    digests: dict[int, bytes] = {}

    def digest(i: int) -> bytes:  # hashed when a lookup needs it, once per call
        if i not in digests:
            digests[i] = _digest(regions[i].view)
        return digests[i]

    hit = memo._get(call, digest, lambda entry: _holds(entry, regions))
    if hit is not None:
        _replay(hit, launcher, regions, (time.perf_counter_ns() - t0_ns) / 1e9, t0_ns)
        return
    before = [digest(i) for i in range(len(regions))]  # which of these count is known after the run
    gmem.track()
    try:
        launcher.run_host(entry, values)
    finally:
        gmem.tracking = False
    try:
        _record(memo, launcher, call, regions, before)
    finally:
        gmem.release_masks()


def _record(memo: Memo, launcher, call: tuple, regions, before: list) -> None:
    """Keep the call that just ran on `launcher` (its memory tracked) in `memo`, or say why not."""
    gmem = launcher.gmem
    if len(gmem.regions) != len(regions):
        _mark(launcher, memo._refuse(NEW_REGIONS))
        return
    changed, reason = _changed(regions, before, gmem.read_bases, gmem.written)
    if reason is not None:
        _mark(launcher, memo._refuse(reason))
        return
    reads = tuple(i for i, r in enumerate(regions) if r.base in gmem.read_bases)
    checker = launcher.sanitizer.memo_snapshot() if launcher.sanitizer is not None else None
    rest = getattr(checker, "nbytes", 0) + 512 * (1 + len(launcher.records))  # + the records' and the key's own, roughly
    masks = [(i, None if m is None else np.packbits(m), m) for i, m in changed]
    nbytes = rest + sum((regions[i].size if m is None else int(m.sum()) + p.nbytes) for i, p, m in masks)
    key = (call, reads, tuple(before[i] for i in reads))
    if nbytes <= memo.budget and (nbytes - rest <= COPY_AFTER or key in memo._missed):
        post = [(i, regions[i].view.copy() if m is None else regions[i].view[m], p, None) for i, p, m in masks]
    else:  # digests of the post-state: replayed where memory already holds it (a benchmark loop)
        nbytes = rest + sum(64 + (0 if p is None else p.nbytes) for i, p, m in masks)
        if nbytes > memo.budget:
            _mark(launcher, memo._refuse(TOO_LARGE))
            return
        post = [(i, None, p, _digest(regions[i].view if m is None else regions[i].view[m])) for i, p, m in masks]
    _mark(launcher, RECORDED)
    memo._put(key, _Entry(post, [replace(r, stats=dict(r.stats)) for r in launcher.records], checker, nbytes))


def _changed(regions, before, read_bases, written):
    """[(region index, mask)] of what a replay must write back (mask None: the whole region),
    or the reason the call cannot be kept. A region the call read is in the key, so its
    prior bytes are the recorded call's: all of it, when it changed. A region it only wrote
    may hold other bytes before a replay: only the bytes it wrote (all of it, when it wrote
    every byte). A region that changed otherwise was written by something the memory did
    not track."""
    out = []
    for i, r in enumerate(regions):
        mask = written.get(r.base)
        if r.base in read_bases:
            if _digest(r.view) != before[i]:
                out.append((i, None))
        elif mask is not None:
            out.append((i, None if mask.all() else mask))
        elif _digest(r.view) != before[i]:
            return None, UNTRACKED_WRITE
    return out, None


def _holds(entry: _Entry, regions) -> bool:
    """Whether memory already holds what `entry` keeps only the digest of."""
    for i, data, packed, digest in entry.post:
        if data is None:
            view = regions[i].view if packed is None else regions[i].view[_unpack(packed, regions[i].size)]
            if _digest(view) != digest:
                return False
    return True


def _unpack(packed: np.ndarray, size: int) -> np.ndarray:
    return np.unpackbits(packed, count=size).view(bool)


def _refusal(launcher) -> str | None:
    if not launcher.ir_key:
        return NO_MODULE_HASH
    if launcher.sanitizer is not None and not hasattr(launcher.sanitizer, "replay"):
        return NOT_REPLAYABLE  # first: the device runtime's linked code also builds pointers
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
    return xxhash.xxh3_128_digest(memoryview(np.ascontiguousarray(view)))


def _replay(hit: _Entry, launcher, regions, seconds: float, start_ns: int) -> None:
    """This call is `hit`'s: its post-state written back, its records and report replayed."""
    t0 = time.perf_counter()
    for i, data, packed, _digest_only in hit.post:
        if data is None:
            continue  # memory holds it already (`_holds`)
        if packed is None:
            regions[i].view[:] = data
        else:
            regions[i].view[_unpack(packed, regions[i].size)] = data
    if launcher.sanitizer is not None:
        launcher.sanitizer.replay(hit.checker)
    recs = [replace(r, stats={**r.stats, "memo": REPLAYED}, seconds=0.0) for r in hit.records]
    if recs:  # what the replay cost, hashing included, where a benchmark sums launch seconds
        recs[0].seconds = seconds + time.perf_counter() - t0
    launcher.records.extend(recs)
    if launcher.sanitizer is not None:
        launcher.sanitizer.memo = REPLAYED
    end_ns = time.perf_counter_ns()
    for fn in list(_REPLAY_LISTENERS):
        fn(recs, start_ns, end_ns)


def _mark(launcher, status: str) -> None:
    for r in launcher.records:
        r.stats["memo"] = status
    if launcher.sanitizer is not None:
        launcher.sanitizer.memo = status
