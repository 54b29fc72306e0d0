"""Naming an unordered conflicting pair: which rule, which cause, which access is "first".

Pure functions over two `AccessInfo`s and the issuing waves' published snapshots; called
only on the slow path (a conflict was found). MODEL.md §4 is the table this code follows.

Everything used here is fixed once the pair is processed in canonical order (engine.py):
the accesses' own positions, the first wave's snapshot at its signal of the phase the
second access acquired, and its snapshot at the following signal (or its end). Nothing
depends on how far other waves have run in wall-clock order.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from ..records import Cause, Rule
from .kinds import DS, OP_READ
from .waves import Snapshot, WaveState

U16 = 0xFFFF


class AccessInfo(NamedTuple):
    """One processed access, as the event table remembers it."""

    wave: int
    site: int
    op: int  # OP_READ / OP_WRITE / OP_ATOMIC
    copy: bool  # async or TDM copy (counts on ASYNC/TENSOR) rather than a ds op
    ctr: int  # counter it was issued on
    seq: int  # its sequence number on that counter
    A: int  # barrier phases the wave had acquired (returned waits) at issue
    seg: int  # 2*A, +1 when issued inside the wave's signal-wait window


class Verdict(NamedTuple):
    rule: Rule
    cause: Cause
    extra: int
    flip: bool  # True: the current access is the *first* of the pair (report the prior one)


def classify(p: AccessInfo, a: AccessInfo, a_snap: Snapshot, waves: Sequence[WaveState],
             served: bool = False) -> Verdict:
    """Rule and cause for prior `p` (processed earlier) conflicting unordered with `a`.

    The pair is ordered canonically: the access at the lower `seg` is first; at equal `seg`
    (different waves) the write is first, so a read racing a write in the same phase is a
    RAW, and only an overwrite in a later half-phase is a WAR -- unless the read is `served`:
    its bytes came from an earlier write ordered before it, which the racing write replaced.
    Then the read had its data and the write came too early (a ring slot refilled while
    another wave still reads it): a WAR, reported at the write.
    """
    if served and p.wave != a.wave and p.seg == a.seg and (p.op == OP_READ) != (a.op == OP_READ):
        cause = Cause.SIGNAL_WAIT_WINDOW if (p.seg | a.seg) & 1 else Cause.NO_BARRIER
        rule = Rule.DMA_OVERLAP if (p.op == OP_READ and p.copy) or (a.op == OP_READ and a.copy) \
            else Rule.WAR_REUSE
        return Verdict(rule, cause, 0, a.op == OP_READ)
    flip = p.wave != a.wave and p.seg == a.seg and p.op == OP_READ and a.op != OP_READ
    f, s = (a, p) if flip else (p, a)
    rule = _rule(f, s)
    if f.wave == s.wave:  # same wave, program order: only copies are unordered with it
        if not f.copy:
            # its own ds op was still in the LDS queue when it issued a copy over the bytes
            return Verdict(Rule.DMA_OVERLAP, Cause.NONE, 0, flip)
        rule, cause, extra = _copy_cause(rule, f, a_snap, None)
        return Verdict(rule, cause, extra, flip)
    v = waves[f.wave]
    if f.A == s.A:  # no barrier phase between the two
        cause = Cause.SIGNAL_WAIT_WINDOW if (f.seg | s.seg) & 1 else Cause.NO_BARRIER
        return _unpublished(rule, cause, f, s, v, flip)
    # A barrier k = s.A - 1 was acquired by s; f did not reach it complete.
    k = s.A - 1
    kv = min(k, v.nsig - 1)  # v's last signal at or before phase k (v may have exited)
    if kv < 0 or f.seg > 2 * kv:  # f was issued after that signal
        cause = Cause.SIGNAL_WAIT_WINDOW if kv == k else Cause.NO_BARRIER
        return _unpublished(rule, cause, f, s, v, flip)
    at_signal = v.sig_snaps[kv]
    if not f.copy:
        if f.op == OP_READ:
            return Verdict(rule, Cause.UNPUBLISHED_READ, 0, flip)
        waited = at_signal.lastwait[DS] >= f.seq  # some dscnt wait/fence ran after the store
        cause = Cause.UNPUBLISHED_DS_STORE if waited else Cause.BARE_BARRIER
        return Verdict(rule, cause, 0, flip)
    if rule == Rule.DMA_READ_BEFORE_WAIT and _waited_then_used(f, v, kv, at_signal):
        return Verdict(Rule.RAW_UNPUBLISHED, Cause.COPY_WAITED_UNPUBLISHED, 0, flip)
    rule, cause, extra = _copy_cause(rule, f, at_signal, v.after_signal(kv))
    return Verdict(rule, cause, extra, flip)


def _unpublished(rule: Rule, cause: Cause, f: AccessInfo, s: AccessInfo, v: WaveState,
                 flip: bool) -> Verdict:
    """No barrier the reader acquired follows the copy in its wave. If that wave completed
    the copy before leaving the half-phase it issued it in, the data was there and only the
    publication is missing: LDS001, whose fix is a barrier, not a wait."""
    if rule != Rule.DMA_READ_BEFORE_WAIT:
        return Verdict(rule, cause, 0, flip)
    # v's half-phase f.seg is over once v signalled phase s.A (even f.seg: f.A <= s.A) or
    # s.A-1 (odd f.seg: its wait of f.A returned), so the answer is schedule-independent
    closed = not f.seg & 1 or f.A < s.A
    done = v.completion(f.ctr, f.seq)
    if closed and done is not None and done[0] == f.seg:
        if cause == Cause.NO_BARRIER:
            cause = Cause.COPY_WAITED_UNPUBLISHED
        return Verdict(Rule.RAW_UNPUBLISHED, cause, 0, flip)
    return Verdict(rule, cause, 0, flip)


def _waited_then_used(f: AccessInfo, v: WaveState, kv: int, at: Snapshot) -> bool:
    """Pipeline with its publishing barrier gone: the copy missed v's signal kv although a
    wait on its counter ran in between (that wait was for older copies), v's covering wait
    came after it left barrier kv, and v went on to issue ds ops before its next signal (or
    end) -- it waited to use the data in that phase, and only a barrier between its wait and
    the other waves' reads is missing. Otherwise LDS010/LDS011 stay: no wait before the
    barrier (the wait sits after it: move it up), or a covering wait with no LDS use after
    it in its phase (the next iteration's wait, right before the next barrier: the earlier
    wait's count was one step too weak).

    Final when classified: the reader acquired phase k >= kv and is applied only once phase
    k+1 completed (ordering.py), so v signalled kv+1 or ended."""
    c = f.ctr
    if at.lastwait[c] < f.seq or (at.lw_mark[c] and f.seq > at.mark_lo[c]):
        return False
    done = v.completion(c, f.seq)
    return done is not None and done[0] == 2 * kv + 2 and v.ds_issued_by(kv + 1) > done[1]


def _rule(f: AccessInfo, s: AccessInfo) -> Rule:
    f_read, s_read = f.op == OP_READ, s.op == OP_READ
    if s_read:  # RAW (f is a write: two reads never conflict)
        return Rule.DMA_READ_BEFORE_WAIT if f.copy else Rule.RAW_UNPUBLISHED
    if f_read:  # WAR
        return Rule.DMA_OVERLAP if f.copy else Rule.WAR_REUSE
    return Rule.DMA_OVERLAP if (f.copy or s.copy) else Rule.WAW


def _copy_cause(rule: Rule, f: AccessInfo, at: Snapshot, later: Snapshot | None):
    """Cause for an unfinished copy `f`, given the issuer's state `at` the relevant point.

    `at` is the issuer's snapshot at the consuming access (same wave) or at its signal of
    the phase the consumer acquired (other wave); `later` its next signal or end.
    """
    c, s = f.ctr, f.seq
    if at.lastwait[c] >= s:  # a wait ran after the copy and still left it outstanding
        if at.lw_mark[c]:
            if s > at.mark_lo[c]:
                # wait.asyncmark never completes ops issued after the last asyncmark
                return rule, Cause.ASYNCMARK_UNMARKED, 0
            if rule == Rule.DMA_READ_BEFORE_WAIT:
                pending = [m for m in at.marks if m[c] >= s]
                return Rule.WAIT_TOO_WEAK, Cause.NONE, min(len(pending) - 1, U16) if pending else 0
        elif rule == Rule.DMA_READ_BEFORE_WAIT:
            return Rule.WAIT_TOO_WEAK, Cause.NONE, min(at.lastwait[c] - s, U16)
    if later is not None and later.done[c] >= s:
        return rule, Cause.COPY_WAITED_NOT_PUBLISHED, 0
    return rule, Cause.COPY_NOT_WAITED, 0
