"""The host's last step on a device buffer: settle what the device could only know later.

The device runtime decides each pair when its second access runs; the host engine decides
some of them with facts that arrive later in canonical order (MODEL.md §6, §6a, §7). A
record cannot be taken back once another wave may have read the cursor, so the device
writes such records flagged (layout.CAUSE_*) with the access's 16-bit counter sequence in
`extra`, and writes three internal records with the facts when they happen:

- `R_RETRACT` (§7): a write raced a read that had found its granule never written: that
  read's LDS030 goes, with the equal LDS030s of earlier executions of the read (a poll).
- `R_SEG_CLOSE` (§6, classify._unpublished and _copy_cause): at the end of a half-phase of
  wave v (if a record waits on it), the copies v issued and completed within it and its
  DONE there. A flagged LDS010 whose copy is among them is LDS001 (COPY_WAITED_UNPUBLISHED
  when its cause was NO_BARRIER); a COPY_NOT_WAITED whose copy v had completed at its next
  signal or end after the record (the first such R_SEG_CLOSE later in the ring: the ring is
  in execution order) is COPY_WAITED_NOT_PUBLISHED.
- `R_CONSUMED` (§6a fact 2): a read of a later half-phase, ordered after a write that a
  §6a pair named, consumed it. The pair's RAW record then becomes the WAR at the write
  (LDS002, or LDS012 when the read was a copy's), else it stays the RAW.

`settle` applies them and drops the internal records: what remains is what the host engine
would have recorded, as far as the device's bounded tables saw it (DESIGN.md).
"""

from __future__ import annotations

from dataclasses import replace

from ..records import Cause, Record, Rule
from . import layout as L

def settle(records: list[Record]) -> list[Record]:
    """The records of one buffer in ring order (workgroups already linear), settled (module
    docstring)."""
    retracted, closes, consumed = set(), {}, set()
    for i, r in enumerate(records):
        if r.rule == L.R_RETRACT:
            retracted.add((r.site, r.wave, r.workgroup, r.launch, r.extra))
        elif r.rule == L.R_SEG_CLOSE:
            closes.setdefault((r.wave, r.cause, r.workgroup, r.launch), []).append((i, r))
        elif r.rule == L.R_CONSUMED:
            consumed.add((r.other_site, r.other_wave, r.workgroup, r.launch, r.extra))
    out = []
    for i, r in enumerate(records):
        if r.rule in L.INTERNAL_RULES:
            continue
        if r.rule == Rule.UNINIT_READ or r.cause <= L.CAUSE_MASK:
            out.append(r)
            continue
        if r.cause & L.CAUSE_6A and (r.other_site, r.other_wave, r.workgroup, r.launch, r.extra) in consumed:
            out.append(_war(r))
            continue
        ends = closes.get((r.other_wave, (r.cause >> L.CAUSE_CTR_SHIFT) & 3, r.workgroup, r.launch), ())
        if r.cause & L.CAUSE_PENDING:
            r = _unpublished(r, ends)
        if r.cause & L.CAUSE_LATER:
            r = _waited_later(r, i, ends)
        out.append(replace(r, cause=r.cause & L.CAUSE_MASK, extra=0))
    return _retract(out, retracted)


def _war(r: Record) -> Record:
    """§6a: the RAW (write first, read second) as the WAR reported at the write."""
    low = r.cause & L.CAUSE_MASK
    cause = Cause.SIGNAL_WAIT_WINDOW if low == Cause.SIGNAL_WAIT_WINDOW else Cause.NO_BARRIER
    rule = Rule.DMA_OVERLAP if r.cause & L.CAUSE_READ_COPY else Rule.WAR_REUSE
    return replace(r, rule=int(rule), cause=int(cause), site=r.other_site, other_site=r.site, wave=r.other_wave,
                   other_wave=r.wave, lane=r.other_lane, other_lane=r.lane, extra=0)


def _unpublished(r: Record, ends) -> Record:
    """An LDS010 whose copy (seq r.extra) its wave completed in the half-phase it issued it
    in is LDS001 (classify._unpublished)."""
    for _i, close in ends:
        if close.site < r.extra <= close.other_site:
            low = r.cause & L.CAUSE_MASK
            cause = Cause.COPY_WAITED_UNPUBLISHED if low == Cause.NO_BARRIER else low
            return replace(r, rule=int(Rule.RAW_UNPUBLISHED), cause=int(cause) | (r.cause & ~L.CAUSE_MASK))
    return r


def _waited_later(r: Record, at: int, ends) -> Record:
    """COPY_NOT_WAITED, or COPY_WAITED_NOT_PUBLISHED if the copy's wave had completed it by
    its next signal or end after the record was written (classify._copy_cause's `later`)."""
    for i, close in ends:
        if i > at and close.lane == 1:
            if close.other_site >= r.extra:
                return replace(r, cause=int(Cause.COPY_WAITED_NOT_PUBLISHED) | (r.cause & ~L.CAUSE_MASK))
            return r
    return r


def _retract(records: list[Record], retracted: set) -> list[Record]:
    """§7: drop each LDS030 of a raced read, and the LDS030s equal to it (a repeated read
    is one read for LDS030, as the host engine keeps it)."""
    dropped = {(r.site, r.wave, r.workgroup, r.launch, r.lds_offset, r.lane) for r in records
               if r.rule == Rule.UNINIT_READ and (r.site, r.wave, r.workgroup, r.launch, r.extra) in retracted}
    out = []
    for r in records:
        if r.rule == Rule.UNINIT_READ:
            if (r.site, r.wave, r.workgroup, r.launch, r.lds_offset, r.lane) in dropped:
                continue
            r = replace(r, extra=0)
        out.append(r)
    return out
