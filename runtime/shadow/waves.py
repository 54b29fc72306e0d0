"""Per-wave synchronization state: counters, waits, asyncmarks and barrier history.

Waves of a batch run in lockstep over the G workgroups, so everything here is wave-level
and shared by the groups; only LDS bytes are per group (see lds.py).

| Name            | Shape / type          | Meaning                                                     |
|-----------------|-----------------------|-------------------------------------------------------------|
| seq[c]          | C ints                | ops issued on counter c (the newest op's sequence number)   |
| done[c]         | C ints                | every op of c with seq <= done[c] is complete               |
| lastwait[c]     | C ints                | seq[c] when the latest wait covering c executed (0 = none)  |
| lw_mark[c]      | C bools               | that latest wait was a wait.asyncmark (not a counter wait)  |
| mark_lo[c]      | C ints                | seq[c] at the last asyncmark before that wait.asyncmark     |
| marks           | list of C-tuples      | asyncmarks not yet removed by a wait.asyncmark              |
| nsig, nwait     | ints                  | barrier -1 signals / returned waits executed                |
| sig_snaps[k]    | Snapshot per phase k  | completion state at the wave's k-th signal (what it published) |
| final           | Snapshot or None      | completion state at wave end                                 |
| copies          | list                  | async/TDM copies not yet known complete (for LDS013)        |
| comp_done[c]    | per copy counter list | done[c] after each wait that raised it (ascending)          |
| comp_at[c]      | per copy counter list | (seg, seq[DS]) at that wait: where the copies completed     |
| sig_ds, end_ds  | ints                  | seq[DS] at each signal / at wave end                        |

Sequence numbers start at 1; 0 means "nothing", so `seq <= done` is the completion test.
"""

from __future__ import annotations

from bisect import bisect_left

from ..records import NO_SITE
from .kinds import COPY_COUNTERS, DS, LOAD, N_COUNTERS, STORE


class Snapshot:
    """Immutable completion state of one wave between two of its sync ops.

    `serial` is unique per engine; accesses keep the snapshot that was current at issue.
    """

    __slots__ = ("serial", "done", "lastwait", "lw_mark", "mark_lo", "marks")

    def __init__(self, serial, done, lastwait, lw_mark, mark_lo, marks):
        self.serial = serial
        self.done = done  # tuple[int, ...] (C)
        self.lastwait = lastwait  # tuple[int, ...] (C)
        self.lw_mark = lw_mark  # tuple[bool, ...] (C)
        self.mark_lo = mark_lo  # tuple[int, ...] (C)
        self.marks = marks  # tuple of C-tuples: marks left pending by the last wait.asyncmark

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Snapshot(#{self.serial} done={self.done} lastwait={self.lastwait})"


class WaveState:
    """One wave of the batch: what it issued, what it knows complete, where it is."""

    def __init__(self, index: int, serials):
        self.index = index
        self._serials = serials  # itertools.count shared by the engine
        self.seq = [0] * N_COUNTERS
        self.done = [0] * N_COUNTERS
        self.lastwait = [0] * N_COUNTERS
        self.lw_mark = [False] * N_COUNTERS
        self.mark_lo = [0] * N_COUNTERS
        self.marks: list[tuple[int, ...]] = []
        self.last_mark = (0,) * N_COUNTERS
        self.marks_at_wait: tuple = ()
        self.am_site = NO_SITE  # site of the latest wait.asyncmark
        self.live = True
        self.nsig = 0
        self.nwait = 0
        self.po = 0  # program-order position: +1 for every engine call of this wave
        self.sig_snaps: list[Snapshot] = []
        self.sig_sites: list[int] = []
        self.final: Snapshot | None = None
        self.end_site = NO_SITE
        self.copies: list[tuple] = []  # (counter, seq, site, payload) of unfinished copies
        # where copies completed (classify.py: waited in the reader's phase, or before a barrier)
        self.comp_done: dict[int, list[int]] = {c: [] for c in COPY_COUNTERS}
        self.comp_at: dict[int, list[tuple[int, int]]] = {c: [] for c in COPY_COUNTERS}
        self.sig_ds: list[int] = []
        self.end_ds = -1
        self._snap: Snapshot | None = None

    # -- position ---------------------------------------------------------------------------

    @property
    def seg(self) -> int:
        """Barrier events passed: 2*waits, +1 inside a signal-wait window (monotone)."""
        return 2 * self.nwait + (1 if self.nsig > self.nwait else 0)

    def snapshot(self) -> Snapshot:
        snap = self._snap
        if snap is None:
            snap = self._snap = Snapshot(
                next(self._serials), tuple(self.done), tuple(self.lastwait),
                tuple(self.lw_mark), tuple(self.mark_lo), self.marks_at_wait,
            )
        return snap

    # -- counters ---------------------------------------------------------------------------

    def issue(self, counter: int) -> int:
        """One more op on `counter`; its sequence number (the engine inlines this on its hot
        path; the frozen reference engine in tests/shadow/reference/ calls it)."""
        self.seq[counter] += 1
        return self.seq[counter]

    def wait(self, counter: int, n: int) -> None:
        """s_wait_<counter>cnt n: all but the newest n ops of the counter are complete."""
        if counter in COPY_COUNTERS:
            self._completes(counter, self.seq[counter] - n)
        self.done[counter] = max(self.done[counter], self.seq[counter] - n)
        self.lastwait[counter] = self.seq[counter]
        self.lw_mark[counter] = False
        self._snap = None
        if counter in COPY_COUNTERS:
            self._prune_copies()

    def drain_for_fence(self) -> None:
        """A non-one-as fence at workgroup scope or wider: s_wait_{ds,load,store}cnt 0."""
        for c in (DS, LOAD, STORE):
            self.done[c] = self.seq[c]
            self.lastwait[c] = self.seq[c]
            self.lw_mark[c] = False
        self._snap = None

    def asyncmark(self) -> None:
        mark = tuple(self.seq)
        self.marks.append(mark)
        self.last_mark = mark

    def wait_asyncmark(self, n: int, site: int) -> None:
        """wait.asyncmark n: keep the newest n marks; ops before the removed ones complete.

        Ops issued after the last asyncmark are never completed here (they are "unmarked").
        """
        drop = len(self.marks) - n
        if drop > 0:
            mark = self.marks[drop - 1]
            for c in COPY_COUNTERS:
                self._completes(c, mark[c])
                self.done[c] = max(self.done[c], mark[c])
            del self.marks[:drop]
        for c in COPY_COUNTERS:
            self.lastwait[c] = self.seq[c]
            self.lw_mark[c] = True
            self.mark_lo[c] = self.last_mark[c]
        self.marks_at_wait = tuple(self.marks)
        self.am_site = site
        self._snap = None
        self._prune_copies()

    def _completes(self, c: int, upto: int) -> None:
        """A wait completes the copies of counter c up to `upto`: remember where."""
        if upto > self.done[c]:
            self.comp_done[c].append(upto)
            self.comp_at[c].append((self.seg, self.seq[DS]))

    def completion(self, c: int, seq: int) -> tuple[int, int] | None:
        """(seg, seq[DS]) at the wait that completed copy `seq` of counter c; None if none
        has (yet)."""
        i = bisect_left(self.comp_done[c], seq)
        return self.comp_at[c][i] if i < len(self.comp_done[c]) else None

    def ds_issued_by(self, k: int) -> int:
        """seq[DS] at its signal of phase k, or at its end (or now, if still live)."""
        if k < self.nsig:
            return self.sig_ds[k]
        return self.end_ds if not self.live else self.seq[DS]

    def _prune_copies(self) -> None:
        done = self.done
        self.copies = [cp for cp in self.copies if cp[1] > done[cp[0]]]

    # -- barrier and end --------------------------------------------------------------------

    def signal(self, site: int) -> None:
        self.sig_snaps.append(self.snapshot())
        self.sig_sites.append(site)
        self.sig_ds.append(self.seq[DS])
        self.nsig += 1

    def end(self, site: int) -> None:
        self.final = self.snapshot()
        self.end_site = site
        self.end_ds = self.seq[DS]
        self.live = False

    def after_signal(self, k: int) -> Snapshot:
        """Its state at the next signal after phase k, or at its end (or now, if still live)."""
        if k + 1 < self.nsig:
            return self.sig_snaps[k + 1]
        return self.final if self.final is not None else self.snapshot()
