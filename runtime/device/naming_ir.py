"""Naming a conflicting pair on the device (MODEL.md §6; the host's `shadow/classify.py`):
which access is first, the rule by kinds, the cause. A mixin of `hooks_ir.Hooks`.

Everything is computed branch-free with selects (the pair path runs only on a conflict).
The first wave's state is read from its wave block when the pair is found; the host reads
the same values in canonical order (DESIGN.md, "Cross-wave reads of live state").
"""

from __future__ import annotations

from ldssan.passes.abi import DsKind

from ..records import Cause, Rule
from . import layout as L
from .emitter import Body


class Naming:
    """`_pair` and the copy-cause helpers; needs `lay`, `_wave_word`, `_record`."""

    def _cword(self, b: Body, wave: str, ctr: str, field: int, extra: str | int = 0) -> str:
        """The word `field` (+ extra) of copy counter `ctr` (1 async, 2 tensor) of `wave`."""
        j = b.sub(b.umax(ctr, b.c(1)), b.c(1))
        return self._wave_word(b, wave, b.word(b.mul(j, b.c(L.CTR_WORDS)), L.WAVE_WORDS + field, extra))

    def _pair(self, b: Body, me: dict, p: dict, a: dict, byte: str, served: str, wslot: str) -> None:
        """Name a conflicting pair and record it: `p` the shadow entry, `a` the access being
        executed. First/second is canonical: one wave's entry first (program order); else
        the lower half-phase; in one half-phase the write, between two writes the lower wave.
        `served` (i1): the read of the pair had its data from a write ordered before it
        (MODEL.md §6a fact 1); `wslot` the granule's writer slot."""
        read = b.c(DsKind.READ)
        p_w, a_w = b.cmp("ne", p["kind"], read), b.cmp("ne", a["kind"], read)
        same_seg = b.cmp("eq", p["seg"], a["seg"])
        tie = b.any_(b.all_(p_w, b.not_(a_w)), b.all_(b.cmp("eq", p_w, a_w, "i1"),
                                                       b.cmp("ult", p["wave"], a["wave"])))
        p_first = b.any_(b.cmp("eq", p["wave"], a["wave"]), b.cmp("ult", p["seg"], a["seg"]),
                         b.all_(same_seg, tie))
        keys = ("site1", "seq", "seg", "wave", "lane", "ctr")
        f = {k: b.select(p_first, p[k], a[k]) for k in keys}
        s = {k: b.select(p_first, a[k], p[k]) for k in keys}
        f["w"], s["w"] = b.select(p_first, p_w, a_w, "i1"), b.select(p_first, a_w, p_w, "i1")
        f["copy"], s["copy"] = b.cmp("ne", f["ctr"], b.c(0)), b.cmp("ne", s["ctr"], b.c(0))
        c = b.c
        rule = b.select(b.not_(s["w"]), b.select(f["copy"], c(Rule.DMA_READ_BEFORE_WAIT), c(Rule.RAW_UNPUBLISHED)),
                        b.select(b.not_(f["w"]), b.select(f["copy"], c(Rule.DMA_OVERLAP), c(Rule.WAR_REUSE)),
                                 b.select(b.any_(f["copy"], s["copy"]), c(Rule.DMA_OVERLAP), c(Rule.WAW))))
        rule, cause, extra, later, unpub = self._cause(b, me, f, s, rule)
        # §6a: written as the canonical RAW, flagged; settle.py makes it the WAR at the write
        # if a later half-phase consumed the write (an R_CONSUMED record, hooks_ir._consume)
        short = b.cmp("ule", f["seq"], c(0xFFFF))  # the flags carry the write's seq in 16 bits
        sixa = b.all_(served, short, b.cmp("ne", p["wave"], a["wave"]), same_seg, b.cmp("ne", p_w, a_w, "i1"))
        cause = b.or_(cause, b.select(sixa, b.or_(c(L.CAUSE_6A), b.select(s["copy"], c(L.CAUSE_READ_COPY), c(0))),
                                      c(0)))
        with b.if_(sixa):
            who = b.word(wslot, L.E_WHO)
            b.st(who, b.or_(b.ld(who), c(L.F_HELD)))
        flagged = sixa
        if unpub is not None:
            # what f's wave does later settles the cause (settle.py, from its R_SEG_CLOSE)
            later, unpub = b.all_(later, short), b.all_(unpub, short)
            ctr = b.shl(f["ctr"], c(L.CAUSE_CTR_SHIFT))
            cause = b.or_(cause, b.select(later, b.or_(c(L.CAUSE_LATER), ctr), c(0)))
            cause = b.or_(cause, b.select(unpub, b.or_(c(L.CAUSE_PENDING), ctr), c(0)))
            with b.if_(b.any_(later, unpub)):
                b.st(self._wave_word(b, f["wave"], L.SEG_FLAG), c(1))
            flagged = b.any_(sixa, later, unpub)
        extra = b.select(flagged, f["seq"], extra)
        self._record(b, me, rule, cause, b.sub(s["site1"], c(1)), b.sub(f["site1"], c(1)), byte,
                     s["wave"], f["wave"], s["lane"], f["lane"], extra, event=a)

    def _cause(self, b: Body, me: dict, f: dict, s: dict, rule: str) -> tuple:
        """(rule, cause, extra, i1 the cause waits on f's wave's next signal or end) of
        MODEL.md §6 for first `f`, second `s`."""
        c, v = b.c, f["wave"]
        a_f, a_s = b.shr(f["seg"], c(1)), b.shr(s["seg"], c(1))
        k = b.sub(a_s, c(1))
        window = b.cmp("ne", b.and_(b.or_(f["seg"], s["seg"]), c(1)), c(0))
        win_cause = b.select(window, c(Cause.SIGNAL_WAIT_WINDOW), c(Cause.NO_BARRIER))
        nsig = b.ld(self._wave_word(b, v, L.NSIG))
        has = b.cmp("ugt", nsig, c(0))
        kv = b.umin(k, b.sub(nsig, c(1)))  # v's last signal at or before phase k (v may have exited)
        before = b.all_(has, b.cmp("ule", f["seg"], b.shl(kv, c(1))))
        late_cause = b.select(b.all_(has, b.cmp("eq", kv, k)), c(Cause.SIGNAL_WAIT_WINDOW), c(Cause.NO_BARRIER))
        same_phase = b.cmp("eq", a_f, a_s)
        unpub_cause = b.select(same_phase, win_cause, late_cause)  # 1., 2. and 3.
        slot = b.and_(kv, c(L.PHASE_SLOTS - 1))
        waited = b.cmp("uge", b.ld(self._wave_word(b, v, b.add(slot, c(L.SIG_LASTWAIT)))), f["seq"])
        ds_cause = b.select(f["w"], b.select(waited, c(Cause.UNPUBLISHED_DS_STORE), c(Cause.BARE_BARRIER)),
                            c(Cause.UNPUBLISHED_READ))  # 4. for a ds op
        at_sig = b.any_(same_phase, b.not_(before))
        cause = b.select(at_sig, unpub_cause, ds_cause)
        if not self.lay.copies:
            return rule, cause, c(0), None, None
        # copies: the unpublished branch (1-3), the signal branch (4), the same wave
        r1, c1, open1 = self._unpublished(b, f, s, v, rule, unpub_cause, a_f, a_s)
        r4, c4, x4, open4 = self._copy_at_signal(b, f, v, kv, rule)
        lw_now = b.ld(self._cword(b, me["wave"], f["ctr"], L.C_LASTWAIT))
        r0, c0, x0 = self._copy_cause(b, f, rule, lw_now, None)
        same = b.cmp("eq", f["wave"], s["wave"])
        r0 = b.select(f["copy"], r0, c(Rule.DMA_OVERLAP))  # its own ds op undrained under its copy
        c0 = b.select(f["copy"], c0, c(Cause.NONE))
        x0 = b.select(f["copy"], x0, c(0))
        r_copy = b.select(at_sig, r1, r4)
        c_copy = b.select(at_sig, c1, c4)
        x_copy = b.select(at_sig, c(0), x4)
        rule = b.select(same, r0, b.select(f["copy"], r_copy, rule))
        cause = b.select(same, c0, b.select(f["copy"], c_copy, cause))
        extra = b.select(same, x0, b.select(f["copy"], x_copy, c(0)))
        # what v's later state may still change (settle.py): COPY_NOT_WAITED at a signal, a
        # copy v may still complete in its half-phase
        later = b.all_(b.not_(same), f["copy"], b.not_(at_sig), open4, b.cmp("eq", cause, c(Cause.COPY_NOT_WAITED)))
        unpub = b.all_(b.not_(same), f["copy"], at_sig, open1)
        return rule, cause, extra, later, unpub

    def _completion(self, b: Body, wave: str, ctr: str, seq: str) -> tuple[str, str, str]:
        """(found, seg, ds seq) at the wait that completed copy `seq` of `wave`: the kept
        completion with the smallest `done` >= seq (layout.COMP_SLOTS newest are kept)."""
        c = b.c
        n = b.ld(self._cword(b, wave, ctr, L.C_NCOMP))
        best, seg, ds = c(-1), c(0), c(0)
        for i in range(L.COMP_SLOTS):
            at = 3 * i
            upto = b.ld(self._cword(b, wave, ctr, L.C_COMP + at))
            ok = b.all_(b.cmp("ult", c(i), n), b.cmp("uge", upto, seq), b.cmp("ult", upto, best))
            best = b.select(ok, upto, best)
            seg = b.select(ok, b.ld(self._cword(b, wave, ctr, L.C_COMP + at + 1)), seg)
            ds = b.select(ok, b.ld(self._cword(b, wave, ctr, L.C_COMP + at + 2)), ds)
        return b.cmp("ne", best, c(-1)), seg, ds

    def _unpublished(self, b: Body, f: dict, s: dict, v: str, rule: str, cause: str, a_f: str, a_s: str):
        """classify._unpublished: a copy its wave completed in the half-phase it issued it
        in is LDS001 (the data was there; only the publishing barrier is missing). Also
        i1: not yet, but v is still in that half-phase (the host answers with v's final
        state; here the record is flagged and settle.py decides from v's R_SEG_CLOSE)."""
        c = b.c
        closed = b.any_(b.cmp("eq", b.and_(f["seg"], c(1)), c(0)), b.cmp("ult", a_f, a_s))
        found, seg, _ds = self._completion(b, v, f["ctr"], f["seq"])
        can = b.all_(b.cmp("eq", rule, c(Rule.DMA_READ_BEFORE_WAIT)), closed)
        hit = b.all_(can, found, b.cmp("eq", seg, f["seg"]))
        new_cause = b.select(b.cmp("eq", cause, c(Cause.NO_BARRIER)), c(Cause.COPY_WAITED_UNPUBLISHED), cause)
        ws = b.mul(v, c(self.lay.wave_words))
        _n, _w, v_seg = self._seg(b, ws)
        running = b.all_(b.cmp("eq", v_seg, f["seg"]), b.cmp("eq", b.ld(b.word(ws, L.ENDED)), c(0)))
        return (b.select(hit, c(Rule.RAW_UNPUBLISHED), rule), b.select(hit, new_cause, cause),
                b.all_(can, b.not_(hit), running))

    def _copy_at_signal(self, b: Body, f: dict, v: str, kv: str, rule: str):
        """Cause 4 for a copy: v's state at its signal kv, its next signal (or end); and
        i1 v has not reached that next point yet."""
        c = b.c
        slot = b.and_(kv, c(L.PHASE_SLOTS - 1))
        lw = b.ld(self._cword(b, v, f["ctr"], L.C_SIG_LASTWAIT, slot))
        nsig = b.ld(self._wave_word(b, v, L.NSIG))
        ended = b.cmp("ne", b.ld(self._wave_word(b, v, L.ENDED)), c(0))
        nxt = b.add(kv, c(1))
        signalled = b.cmp("ult", nxt, nsig)
        nslot = b.and_(nxt, c(L.PHASE_SLOTS - 1))
        later = b.select(signalled, b.ld(self._cword(b, v, f["ctr"], L.C_SIG_DONE, nslot)),
                         b.select(ended, b.ld(self._cword(b, v, f["ctr"], L.C_END_DONE)),
                                  b.ld(self._cword(b, v, f["ctr"], L.C_DONE))))
        ds_by = b.select(signalled, b.ld(self._wave_word(b, v, b.add(nslot, c(L.SIG_DS)))),
                         b.select(ended, b.ld(self._wave_word(b, v, L.END_DS)), b.ld(self._wave_word(b, v, L.SEQ))))
        # classify._waited_then_used: a pipeline whose READY barrier is gone -> LDS001
        found, seg, ds = self._completion(b, v, f["ctr"], f["seq"])
        used = b.all_(b.cmp("eq", rule, c(Rule.DMA_READ_BEFORE_WAIT)), b.cmp("uge", lw, f["seq"]), found,
                      b.cmp("eq", seg, b.add(b.shl(kv, c(1)), c(2))), b.cmp("ugt", ds_by, ds))
        r, cause, extra = self._copy_cause(b, f, rule, lw, later)
        still_open = b.all_(b.not_(signalled), b.not_(ended))  # `later` is v's state now: not final
        return (b.select(used, c(Rule.RAW_UNPUBLISHED), r), b.select(used, c(Cause.COPY_WAITED_UNPUBLISHED), cause),
                b.select(used, c(0), extra), still_open)

    def _copy_cause(self, b: Body, f: dict, rule: str, lastwait: str, later_done: str | None):
        """classify._copy_cause without marks: a wait after the copy that left it
        outstanding makes a read LDS011 (extra = the count that would have sufficed)."""
        c = b.c
        waited = b.all_(b.cmp("uge", lastwait, f["seq"]), b.cmp("eq", rule, c(Rule.DMA_READ_BEFORE_WAIT)))
        extra = b.umin(b.sub(lastwait, f["seq"]), c(0xFFFF))
        if later_done is None:
            other = c(Cause.COPY_NOT_WAITED)
        else:
            other = b.select(b.cmp("uge", later_done, f["seq"]), c(Cause.COPY_WAITED_NOT_PUBLISHED),
                             c(Cause.COPY_NOT_WAITED))
        return (b.select(waited, c(Rule.WAIT_TOO_WEAK), rule), b.select(waited, c(Cause.NONE), other),
                b.select(waited, extra, c(0)))
