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
    if f.A == s.A:  # no barrier phase between the two
        cause = Cause.SIGNAL_WAIT_WINDOW if (f.seg | s.seg) & 1 else Cause.NO_BARRIER
        return Verdict(rule, cause, 0, flip)
    # A barrier k = s.A - 1 was acquired by s; f did not reach it complete.
    k = s.A - 1
    v = waves[f.wave]
    kv = min(k, v.nsig - 1)  # v's last signal at or before phase k (v may have exited)
    if kv < 0 or f.seg > 2 * kv:  # f was issued after that signal
        cause = Cause.SIGNAL_WAIT_WINDOW if kv == k else Cause.NO_BARRIER
        return Verdict(rule, cause, 0, flip)
    at_signal = v.sig_snaps[kv]
    if not f.copy:
        if f.op == OP_READ:
            return Verdict(rule, Cause.UNPUBLISHED_READ, 0, flip)
        waited = at_signal.lastwait[DS] >= f.seq  # some dscnt wait/fence ran after the store
        cause = Cause.UNPUBLISHED_DS_STORE if waited else Cause.BARE_BARRIER
        return Verdict(rule, cause, 0, flip)
    rule, cause, extra = _copy_cause(rule, f, at_signal, v.after_signal(kv))
    return Verdict(rule, cause, extra, flip)


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
