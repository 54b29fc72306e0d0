"""Applying access events to the shadow, in canonical order, and naming what they race.

MODEL.md §4 (the check), §6 (naming a pair), §6a (same-phase read/write races decided at
finish). `Applier` is a part of `ShadowEngine` (engine.py); besides the shadow `_lds` it
keeps the records held back until `finish()`:

| Name          | Type                         | Meaning                                          |
|---------------|------------------------------|--------------------------------------------------|
| _uninit       | read event -> [Record]       | LDS030 held back: a later unordered write of the |
|               |                              | bytes means the read raced it (§7)               |
| _ambiguous    | write event -> {(WAR, RAW)}  | same-phase read/write races of that write (§6a)  |
| _consumed     | set of write events          | ... whose data a later half-phase read in order  |
| _seg_recs     | set of Record                | conflict records pushed in the current half-phase|
| _seg_now      | int                          | that half-phase (seg)                            |

It also uses the engine's `_waves`, `_acc`, `_zero`, `ring`, `groups`, `launch`, `G`,
`lds_bytes`, `events_applied`.
"""

from __future__ import annotations

import numpy as np

from ..records import NO_LANE, NO_SITE, NO_WAVE, Cause, Record, Rule
from .classify import AccessInfo, classify
from .kinds import ASYNC, DS, N_COUNTERS, OP_READ, OP_WRITE, TENSOR
from .lds import LANE_PER_BYTE, Clock, first_per_group
from .waves import WaveState

_BIG = np.iinfo(np.int64).max
_U32 = 0xFFFFFFFF


class Applier:
    """The shadow side of `ShadowEngine`: checks, records, held-back records."""

    def _clock(self, A: int, wave: int, snap, is_ds: bool):
        """The clock lineage of `wave`'s ds (or copy) accesses, moved on to this access.

        T depends on the phases acquired, and of the wave's own completion state only on
        the counters that can hold LDS events (DS -- +inf for a ds access -- ASYNC, TENSOR)."""
        lds = self._lds
        c = lds.lineages[2 * wave + is_ds]
        if c is None:
            c = lds.lineages[2 * wave + is_ds] = Clock()
        if c.snap is not snap or c.A != A:
            done = snap.done
            key = (A, -1 if is_ds else done[DS], done[ASYNC], done[TENSOR])
            if c.key != key:
                lds.retime(c, key, self._table(A, wave, done, is_ds))
            c.snap, c.A = snap, A
        if len(c.bad) <= lds.events.n:
            lds._grow(c, 2 * lds.events.n + 64)
        return c

    def _table(self, A: int, wave: int, done, is_ds: bool) -> np.ndarray:
        M = (self._acc[A - 1] if A else self._zero).copy()
        M[wave] = done
        if is_ds:
            M[wave, DS] = _BIG  # ds after ds in one wave: the LDS queue is in order
        return M.ravel()

    def _apply_reads(self, items: list, wave: int) -> None:
        """Consecutive ds reads of one wave in one half-phase, in program order.

        Reads do not change what reads check (write slots, last_w), so a run whose members
        share the clock table is checked with one gather; only if it is clean throughout (no
        conflict, no never-written byte) are its events recorded at once, in order (a later
        read's slot entries win, as they would one by one). Otherwise, or when a member
        needs the per-byte path or the same-phase bookkeeping of MODEL §6a is active, the
        reads are applied one by one -- the check has changed nothing yet.
        """
        lds = self._lds
        fpkey = lds.fpkey
        fps = []
        for it in items:  # LdsShadow.footprint, memo hit inlined (ds reads: lane payloads)
            pay = it.pay
            fp = pay[4].get(fpkey, False)
            fps.append(lds.footprint(pay) if fp is False else fp)
        if lds.fpkey is not fpkey or self._ambiguous:  # refined while mapping: one by one
            for it in items:
                self._apply(it, wave)
            return
        n = len(items)
        i = 0
        while i < n:
            it, fp = items[i], fps[i]
            if fp is None or not fp.group_ok or self._ambiguous:
                self._apply(it, wave, fp)
                i += 1
                continue
            A, snap = it.A, it.snap
            d = snap.done
            a_done, t_done = d[ASYNC], d[TENSOR]
            j = i + 1
            while j < n:
                fj, nxt = fps[j], items[j]
                if fj is None or not fj.group_ok or nxt.A != A:
                    break
                s2 = nxt.snap
                if s2 is not snap:
                    d = s2.done
                    if d[ASYNC] != a_done or d[TENSOR] != t_done:
                        break
                j += 1
            if j - i == 1:
                self._apply(it, wave, fp)
                i = j
                continue
            group = lds.read_group(fps[i:j])
            clk = self._clock(A, wave, snap, True)
            last = lds.check_reads(group, clk)
            if last is None:
                for m in range(i, j):
                    self._apply(items[m], wave, fps[m])
            else:
                wc0 = wave * N_COUNTERS
                tix = clk.tix
                # EventTable rows: (seq, wc, op, tix, copy, site, A, seg)
                eid0 = lds.events.extend([(x.seq, wc0 + x.ctr, x.op, tix, x.copy, x.site, x.A, x.seg)
                                          for x in items[i:j]])
                for m in group.per_byte:
                    lds.register_per_byte(eid0 + m, items[i + m].pay, eid0)  # the group is stored below
                lds.store_reads(eid0, wave, group, last)
                self.events_applied += j - i
            i = j

    def _apply(self, item, wave: int, fp=None) -> None:
        seg, po, site, op, copy, ctr, seq, A, snap, pay = item
        lds = self._lds
        if fp is None:
            fp = lds.footprint(pay)
        if fp is None or not fp.rows.size:
            self._values.discard(wave, po)
        if fp is None:
            return
        self.events_applied += 1
        recs = []
        if fp.oob is not None:  # negative offsets count as huge (u32 wrap)
            for g, b, ln in fp.oob:
                recs.append(self._record(Rule.OOB, Cause.NONE, site, NO_SITE, b, wave, NO_WAVE, ln, NO_LANE, g))
        if fp.rows.size:
            clk = self._clock(A, wave, snap, not copy)
            eid = lds.events.append(seq, wave * N_COUNTERS + ctr, op, copy, site, A, seg, clk.tix)
            if isinstance(fp.lanes, int) and fp.lanes == LANE_PER_BYTE:
                lds.register_per_byte(eid, pay)
            if op == OP_WRITE and not copy:
                self._values.attach(wave, po, eid, pay, lds.wl)
            conf, uninit = lds.apply(eid, wave, op, fp, clk)
            if self._ambiguous and op == OP_READ:
                self._note_consumed(seg, clk)
            if uninit is not None:
                grp, byte, lane = fp.rep()
                self._uninit[eid] = [
                    self._record(Rule.UNINIT_READ, Cause.NONE, site, NO_SITE, int(byte[i]), wave, NO_WAVE,
                                 int(lane[i]), NO_LANE, grp[i])
                    for i in first_per_group(uninit, grp, self.G)]
            if conf is not None:
                if self._uninit and op != OP_READ:
                    self._retract_uninit(conf.prior)
                cur = AccessInfo(wave, site, op, copy, ctr, seq, A, seg)
                recs += self._conflict_records(cur, snap, conf, fp.rep(), eid)
        if recs:
            self._push_once(seg, recs)

    def _push_once(self, seg: int, recs: list) -> None:
        """Push records, each at most once per half-phase: a loop without a barrier (a
        spin-wait) repeats the same race a schedule-dependent number of times."""
        if seg != self._seg_now:
            self._seg_now = seg
            self._seg_recs.clear()
        seen = self._seg_recs
        for rec in recs:
            if rec not in seen:
                seen.add(rec)
                self.ring.push(rec)

    def _note_consumed(self, seg: int, clk) -> None:
        """§6a fact 2: a read in a later half-phase than a held write, ordered after it,
        consumed its data. A read in the writer's own half-phase cannot count: it is the
        writer's own (nothing else is ordered within a half-phase), and whether it is applied
        before or after the race is found depends on wave numbering, not on the program."""
        lds = self._lds
        last = lds.read_last
        ordered = (last != 0) & lds.events.ordered(last, clk.T)
        if not ordered.any():
            return
        for e in np.unique(last[ordered]).tolist():
            if e in self._ambiguous and lds.events.info(e).seg < seg:
                self._consumed.add(e)

    def _retract_uninit(self, priors: np.ndarray) -> None:
        """A write raced these reads: their bytes were being written, not never written.
        Equal records held by earlier reads go too (a repeated read -- a poll -- is one
        read for LDS030: only the newest stays in the wave's slot)."""
        dropped = set()
        for prior in np.unique(priors).tolist():
            dropped.update(self._uninit.pop(prior, ()))
        if not dropped:
            return
        for eid in list(self._uninit):
            kept = [r for r in self._uninit[eid] if r not in dropped]
            if kept:
                self._uninit[eid] = kept
            else:
                del self._uninit[eid]

    def _flush_held(self) -> None:
        """At finish: the LDS030 records not retracted (each distinct one once: a repeated
        read holds equal ones), then §6a's pairs by consumption."""
        pushed = set()
        peer = self._peer_bytes
        for eid in sorted(self._uninit):
            for rec in self._uninit[eid]:
                if peer is not None and rec.lds_offset < peer.size and peer[rec.lds_offset]:
                    continue  # written by a cluster peer's multicast (LDS014 orders it)
                if rec not in pushed:
                    pushed.add(rec)
                    self.ring.push(rec)
        self._uninit.clear()
        for writer in sorted(self._ambiguous):
            consumed = writer in self._consumed
            for war, raw in self._ambiguous[writer]:
                self.ring.push(war if consumed else raw)
        self._ambiguous.clear()

    def _conflict_records(self, cur: AccessInfo, snap, conf, rep, eid: int) -> list:
        """One record per (group, rule, cause, site, other_site), at its first byte/lane."""
        grp, byte, lane = rep
        g = grp[conf.row] if self.G > 1 else np.zeros(conf.row.size, np.int64)
        key = (g << 32) | conf.prior.astype(np.int64)
        _uniq, first = np.unique(key, return_index=True)
        first = first[np.argsort(conf.pos[first], kind="stable")]
        lds = self._lds
        events = lds.events
        theirs_lane = lds.lanes_at(conf.prior[first], conf.prior_lane[first], grp[conf.row[first]],
                                   byte[conf.row[first]]).tolist()
        infos: dict = {}
        verdicts: dict = {}  # per (prior, served): classify asks nothing of the workgroup
        out: dict = {}
        for n, i in enumerate(first.tolist()):
            prior = int(conf.prior[i])
            p = infos.get(prior)
            if p is None:
                p = infos[prior] = events.info(prior)
            r = int(conf.row[i])
            mine = (cur.site, cur.wave, int(lane[r]))
            theirs = (p.site, p.wave, theirs_lane[n])
            if conf.served[i] and _same_phase_read_write(p, cur):
                war, raw = (self._verdict(verdicts, prior, p, cur, snap, s) for s in (True, False))
                war = self._pair_record(war, mine, theirs, int(byte[r]), g[i])
                raw = self._pair_record(raw, mine, theirs, int(byte[r]), g[i])
                writer = prior if p.op != OP_READ else eid
                # an ordered set: a list's `in` made a race in every workgroup of a batch quadratic
                self._ambiguous.setdefault(writer, {})[(war, raw)] = None
                continue
            v = self._verdict(verdicts, prior, p, cur, snap, False)
            if v.rule == Rule.WAW and self._values.same(prior, eid, int(g[i])):
                v = v._replace(rule=Rule.WAW_SAME_VALUE)  # benign: every order stores these bytes
            if v.flip:
                mine, theirs = theirs, mine
            k = (int(g[i]), v.rule, v.cause, mine[0], theirs[0])
            if k not in out:
                out[k] = self._record(v.rule, v.cause, mine[0], theirs[0], int(byte[r]), mine[1], theirs[1],
                                      mine[2], theirs[2], g[i], v.extra)
        return list(out.values())

    def _verdict(self, memo: dict, prior: int, p, cur, snap, served: bool):
        got = memo.get((prior, served))
        if got is None:
            got = memo[(prior, served)] = classify(p, cur, snap, self._waves, served=served)
        return got

    def _pair_record(self, v, mine, theirs, byte, g) -> Record:
        if v.flip:
            mine, theirs = theirs, mine
        return self._record(v.rule, v.cause, mine[0], theirs[0], byte, mine[1], theirs[1],
                            mine[2], theirs[2], g, v.extra)

    def _record(self, rule, cause, site, other_site, offset, wave, other_wave, lane, other_lane, g,
                extra=0) -> Record:
        return Record(int(rule), int(cause), site & _U32, other_site & _U32, offset & _U32, wave,
                      other_wave, lane, other_lane, extra, self.groups[int(g)], self.launch)

    def _never_waited(self, w: WaveState, end_site: int) -> list:
        """LDS013 for the wave's copies still outstanding at its end (site = the copy)."""
        snap = w.snapshot()
        out: dict = {}
        for ctr, seq, site, pay in w.copies:
            if seq <= w.done[ctr]:
                continue
            unmarked = snap.lw_mark[ctr] and snap.lastwait[ctr] >= seq > snap.mark_lo[ctr]
            if unmarked:  # the wave relied on wait.asyncmark for a copy after the last mark
                cause, other = Cause.ASYNCMARK_UNMARKED, w.am_site
            else:
                cause, other = Cause.WAVE_END, end_site
            grp, byte, lane = self._lds.byte_footprint(pay)
            inside = np.flatnonzero(byte.view(np.uint64) < self.lds_bytes)
            for i in first_per_group(inside, grp, self.G):
                k = (int(grp[i]), cause, site, other)
                if k not in out:
                    out[k] = self._record(Rule.DMA_NEVER_WAITED, cause, site, other, int(byte[i]), w.index,
                                          w.index, int(lane[i]), NO_LANE, grp[i])
        return list(out.values())


def _same_phase_read_write(p: AccessInfo, a: AccessInfo) -> bool:
    return p.wave != a.wave and p.seg == a.seg and (p.op == OP_READ) != (a.op == OP_READ)
