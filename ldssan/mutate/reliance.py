"""Which conflicting cross-wave LDS pairs each barrier orders on a kernel's cases ("reliance").

A surviving mutant that deletes or moves a barrier is either a miss of the sanitizer or a
change that leaves every conflicting pair ordered on the inputs run. This module decides
which, from the clean kernel alone, independently of the engine's own check:

1. `Probe` records, during the clean kernel's sanitized launches, every ds access (wave,
   site, LDS bytes per lane, read/write/atomic) with the wave's barrier count at that point,
   and which site each barrier instance was (the events the engine receives, as its
   `shadow.Listener`; nothing is changed);
2. `reliance` joins the accesses byte by byte: a pair of accesses of *different waves* of one
   workgroup to one byte, not both reads and not both atomics, with `a` before barrier
   instance k and `b` after instance j >= k (a's signal count < k <= b's wait count), is
   ordered by instances k..j; it *relies on* site S when every one of those instances is S
   (no other barrier orders it; for ds accesses only barriers order waves);
3. `affected` names the pairs a mutation of S leaves unordered: deleting S, all of them;
   moving S below the statement on line L, those whose later access is in L; moving the
   statement on line P below S, those whose earlier access is in P; a raw split barrier
   (no fences), all of them (BAR-MM needs both fences for any pair); copies do not matter
   there, as fences never order them and the execution barrier stays.

No affected pair means the sync is redundant on the cases run: deleting or moving it cannot
make any execution of these inputs race, whatever the schedule. Async and TDM copies are
ordered by counter waits, not by barriers alone; a kernel with copies is analysed for its ds
pairs and says so (`copies`).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

_MAX_RECORDS = 4_000_000  # byte-level access records per batch; beyond it the probe gives up
_MAX_PAIRS = 20_000_000
_MAX_EVENTS = 200_000  # ds access events per batch the probe keeps


@dataclass
class _Batch:
    sites_json: str
    n_waves: int
    nsig: list[int] = field(default_factory=list)
    nwait: list[int] = field(default_factory=list)
    instance_site: dict[int, int] = field(default_factory=dict)  # barrier instance (1-based) -> site
    events: list = field(default_factory=list)  # (wave, site, op, nsig, nwait, addr, mask, nbytes)
    copies: int = 0
    dropped: bool = False  # more than _MAX_EVENTS accesses: not recorded, not judged


def _probing() -> str:
    return "the reliance probe records each launch's accesses"


class _Recorder:
    """The `shadow.Listener` of one batch's engine: fills its `_Batch`."""

    def __init__(self, batch: _Batch) -> None:
        self.b = batch

    def ds(self, engine, wave, site, addr, nbytes, kind, mask) -> None:
        from ldssan.runtime.shadow.operands import lane_payload

        b = self.b
        if b.dropped:
            return
        if len(b.events) >= _MAX_EVENTS:
            b.dropped, b.events = True, []
            return
        pay = lane_payload(addr, mask, nbytes, engine.n_lanes)
        b.events.append((int(wave), int(site), int(kind), b.nsig[wave], b.nwait[wave], pay[1], pay[2], pay[3]))

    def dma(self, engine, wave, site, addr, nbytes, kind, mask) -> None:
        self.b.copies += 1

    def tdm(self, engine, wave, site, offsets, kind) -> None:
        self.b.copies += 1

    def barrier_signal(self, engine, wave, site, barrier_id=-1) -> None:
        b = self.b
        if barrier_id == -1:
            b.nsig[wave] += 1
            b.instance_site.setdefault(b.nsig[wave], int(site))

    def barrier_wait(self, engine, wave, site, barrier_id=-1) -> None:
        b = self.b
        if barrier_id == -1 and b.nwait[wave] < b.nsig[wave]:
            b.nwait[wave] += 1


class Probe:
    """Context manager: record the ds accesses and barriers of the sanitized launches inside
    it, as a listener of each batch's engine (`runtime.session.observing_batches`; nothing is
    changed)."""

    def __init__(self) -> None:
        self.batches: list[_Batch] = []
        self._observing = None

    def _begun(self, engine, sites_json: str) -> None:
        n = engine.n_waves
        batch = _Batch(sites_json, n, [0] * n, [0] * n)
        self.batches.append(batch)
        engine.listen(_Recorder(batch))

    def __enter__(self) -> "Probe":
        from ldssan.runtime.emu import memo
        from ldssan.runtime.session import observing_batches

        self._observing = observing_batches(self._begun)
        self._observing.__enter__()
        memo.add_observer(_probing)  # a replayed launch would record no access here
        return self

    def __exit__(self, *exc) -> bool:
        from ldssan.runtime.emu import memo

        memo.remove_observer(_probing)
        self._observing.__exit__(*exc)
        self._observing = None
        return False

    def result(self) -> dict:
        """The JSON-ready reliance table of everything recorded (`reliance`)."""
        return reliance(list(self.batches))


# ----------------------------------------------------------------------------- the join


def _lines_of(sites_json: str) -> dict[int, list[str]]:
    """site id -> `file:line` of the site and of every frame of its call chain."""
    from ldssan.sitetable import SiteTable
    from ldssan.variants import original_path

    out = {}
    for sid, site in SiteTable.from_json(sites_json).items():
        frames = [(site.file, site.line), *((f.file, f.line) for f in site.chain)]
        out[sid] = list(dict.fromkeys(f"{os.path.basename(original_path(f or ''))}:{ln}" for f, ln in frames))
    return out


def _records(b: _Batch):
    """Byte-level rows (key, wave, op, nsig, nwait, site) of a batch's ds accesses, deduplicated."""
    cols = [[] for _ in range(6)]
    total = 0
    for wave, site, op, s, t, addr, mask, nbytes in b.events:
        lanes = np.flatnonzero(mask)
        if not lanes.size:
            continue
        byte = (addr[lanes][:, None] + np.arange(nbytes)).ravel() & 0xFFFFFFFF
        key = (np.repeat(lanes // 32, nbytes).astype(np.int64) << 32) | byte
        total += key.size
        if total > _MAX_RECORDS:
            return None
        for col, v in zip(cols, (key, wave, op, s, t, site)):
            col.append(v if isinstance(v, np.ndarray) else np.full(key.size, v, np.int64))
    if not cols[0]:
        return np.zeros((0, 6), np.int64)
    rows = np.stack([np.concatenate(c) for c in cols], axis=1)
    return np.unique(rows, axis=0)


def _runs(instance_site: dict[int, int]) -> list[tuple[int, int, int]]:
    """Maximal runs (first, last, site) of consecutive barrier instances of one site."""
    runs: list[list[int]] = []
    for k in sorted(instance_site):
        site = instance_site[k]
        if runs and runs[-1][2] == site and runs[-1][1] == k - 1:
            runs[-1][1] = k
        else:
            runs.append([k, k, site])
    return [tuple(r) for r in runs]


def _join(a: np.ndarray, b: np.ndarray):
    """Row pairs of `a` and `b` with equal keys (column 0), as index arrays."""
    order = np.argsort(b[:, 0], kind="stable")
    keys = b[order, 0]
    lo = np.searchsorted(keys, a[:, 0], "left")
    hi = np.searchsorted(keys, a[:, 0], "right")
    n = hi - lo
    if int(n.sum()) > _MAX_PAIRS:
        raise OverflowError
    ia = np.repeat(np.arange(a.shape[0]), n)
    starts = np.repeat(lo - np.cumsum(n) + n, n)
    ib = order[starts + np.arange(ia.size)]
    return ia, ib


_READ, _WRITE, _ATOMIC = 1, 2, 3  # runtime.shadow.kinds OP_* (DsKind values)


def _relying_pairs(rows: np.ndarray, first: int, last: int) -> Counter:
    """(site_a, site_b, kind) -> distinct bytes, for pairs ordered only by instances first..last."""
    key, wave, op, s, t, site = (rows[:, i] for i in range(6))
    a_side = rows[(s + 1 >= first) & (s + 1 <= last)]
    b_side = rows[(t >= first) & (t <= last)]
    out: Counter = Counter()
    if not a_side.size or not b_side.size:
        return out
    ia, ib = _join(a_side, b_side)
    A, B = a_side[ia], b_side[ib]
    keep = (A[:, 1] != B[:, 1]) & (B[:, 4] >= A[:, 3] + 1)
    keep &= ~((A[:, 2] == _READ) & (B[:, 2] == _READ)) & ~((A[:, 2] == _ATOMIC) & (B[:, 2] == _ATOMIC))
    A, B = A[keep], B[keep]
    kind = np.where(A[:, 2] == _READ, 1, np.where(B[:, 2] == _READ, 0, 2))  # 0 raw, 1 war, 2 waw
    table = np.unique(np.stack([A[:, 5], B[:, 5], kind, A[:, 0]], axis=1), axis=0)  # distinct bytes
    uniq, counts = np.unique(table[:, :3], axis=0, return_counts=True)
    for (sa, sb, k), n in zip(uniq.tolist(), counts.tolist()):
        out[(sa, sb, k)] += n
    return out


def _unordered(rows: np.ndarray) -> int:
    """Distinct bytes with a conflicting pair of accesses of two waves that no barrier orders:
    each access lies in the phases from its wait count to its signal count (one phase unless
    it is between a signal and its wait); two accesses sharing a phase are unordered."""
    t, s = rows[:, 4], rows[:, 3]
    extra = rows[s > t]  # between a signal and its wait: also in the phase of the signal
    phased = np.concatenate([np.column_stack([rows, t]), np.column_stack([extra, extra[:, 3]])])
    both = np.column_stack([phased[:, 0], phased[:, 6], phased[:, 1:6]])  # (key, phase, wave, op, s, t, site)
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    starts = np.flatnonzero(np.r_[True, (np.diff(both[:, 0]) != 0) | (np.diff(both[:, 1]) != 0)])
    wave, op = both[:, 2], both[:, 3]
    two_waves = np.minimum.reduceat(wave, starts) != np.maximum.reduceat(wave, starts)
    writes = np.maximum.reduceat((op == _WRITE).astype(np.int8), starts) > 0
    atomics = np.maximum.reduceat((op == _ATOMIC).astype(np.int8), starts) > 0
    bad = set(both[starts[two_waves & writes], 0].tolist())  # a write and another wave's access
    ends = np.r_[starts[1:], len(both)]
    for g in np.flatnonzero(two_waves & ~writes & atomics).tolist():  # atomics vs another wave's read
        w, o = wave[starts[g]:ends[g]], op[starts[g]:ends[g]]
        if np.any(w[o == _READ][:, None] != w[o == _ATOMIC][None, :]):
            bad.add(int(both[starts[g], 0]))
    return len(bad)


_KINDS = ("raw", "war", "waw")


def reliance(batches: list[_Batch]) -> dict:
    """{"barriers": {"file:line": instances}, "pairs": [{barrier, before, after, kind, bytes}],
    "copies": n, "skipped": why-or-""} over all recorded batches (site lines with call chains)."""
    barriers: Counter = Counter()
    pairs: Counter = Counter()
    copies, skipped, unordered = 0, "", 0
    for b in batches:
        lines = _lines_of(b.sites_json)
        copies += b.copies
        for site in b.instance_site.values():
            for where in lines.get(site, []):
                barriers[where] += 1
        rows = _records(b)
        if rows is None:
            skipped = f"more than {_MAX_RECORDS} byte accesses in one batch"
            continue
        if b.dropped:
            skipped = f"more than {_MAX_EVENTS} ds accesses in one batch"
            continue
        unordered += _unordered(rows) if rows.size else 0
        try:
            for first, last, site in _runs(b.instance_site):
                for (sa, sb, k), n in _relying_pairs(rows, first, last).items():
                    key = (tuple(lines.get(site, [])), tuple(lines.get(sa, [])), tuple(lines.get(sb, [])), _KINDS[k])
                    pairs[key] += n
        except OverflowError:
            skipped = f"more than {_MAX_PAIRS} candidate pairs in one batch"
    return {"barriers": dict(barriers),
            "pairs": [{"barrier": list(bar), "before": list(x), "after": list(y), "kind": k, "bytes": n}
                      for (bar, x, y, k), n in sorted(pairs.items())],
            "unordered": unordered, "copies": copies, "skipped": skipped}


# ----------------------------------------------------------------------------- a mutation


def affected(table: dict, kernel_file: str, operator: str, edits: list[dict]) -> tuple[list[dict], int] | None:
    """(the relying pairs the mutation leaves unordered, executed instances of its barrier),
    or None when the mutation is no barrier deletion or move the table can judge."""
    if not table or table.get("skipped"):
        return None
    if table.get("copies") and operator != "raw-split-barrier":
        return None  # copies are ordered by counter waits and barriers: the ds-only table cannot judge them
    base = os.path.basename(kernel_file)
    here = lambda line: f"{base}:{line}"  # noqa: E731
    lines = [e["line"] for e in edits]
    if operator in ("delete-sync", "raw-split-barrier") and len(edits) == 1:
        bar, pick = here(lines[0]), lambda p: True
    elif operator == "wait-after-consumer" and len(edits) == 2:
        bar, moved = here(lines[0]), here(lines[1])
        pick = lambda p: moved in p["after"]  # noqa: E731
    elif operator == "store-below-barrier" and len(edits) == 2:
        bar, moved = here(lines[1]), here(lines[0])
        pick = lambda p: moved in p["before"]  # noqa: E731
    else:
        return None
    if not _is_barrier_edit(edits, operator):
        return None
    hit = [p for p in table["pairs"] if bar in p["barrier"] and pick(p)]
    return hit, int(table["barriers"].get(bar, 0))


def _is_barrier_edit(edits: list[dict], operator: str) -> bool:
    """The edited sync statement is a barrier (the only sync the table knows)."""
    from .equivalence import _statements, _sync_call
    from .source import Sync

    text = edits[1]["before"] if operator == "store-below-barrier" else edits[0]["before"]
    for stmt in _statements(text) or []:
        sync = _sync_call(stmt)
        if sync is not None:
            return sync[1] == Sync.BARRIER
    return False
