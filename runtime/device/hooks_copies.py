"""The copy hooks of the device runtime (MODEL.md §3.2-3.4, 3.11): async per-lane copies
(`__ldssan_dma`), TDM tiles (`__ldssan_tdm`), their counter waits, the snapshots a barrier
signal takes of them, and the wave's end (LDS013). A mixin of `hooks_ir.Hooks`.

Per wave and copy counter (layout.C_*): SEQ, DONE, LASTWAIT, DONE at the end, DONE and
LASTWAIT at each signal (4 phase slots, as the ds counter), the newest COMP_SLOTS
completions (where a wait completed copies: MODEL.md §6, COPY_WAITED_UNPUBLISHED) and the
sites of the newest FLIGHT copies (LDS013 names them at the wave's end).
"""

from __future__ import annotations

from ldssan.passes.abi import CopyKind, DsKind

from ..records import NO_LANE, NO_SITE, NO_WAVE, Cause, Rule
from . import layout as L
from .emitter import Body

COUNTER_INDEX = {"async": 1, "tensor": 2}  # an entry's counter (layout.WHO_CTR); j = index - 1


class CopyHooks:
    """Needs `lay`, `_who`, `_seg`, `_access`, `_granule`, `_record`, `_leader`, `_func`."""

    def _cw(self, ws: str, j: int, field: int) -> int | str:
        return (ws, L.WAVE_WORDS + j * L.CTR_WORDS + field)

    def _issue_copy(self, b: Body, me: dict, j: int, kind: str) -> dict:
        """§3.2/3.3: one more op on copy counter j (an all-off mask still takes a slot, as
        the hook runs for the wave), its site kept for LDS013; the access's entry."""
        ws = me["ws"]
        seq = b.add(b.ld(b.word(*self._cw(ws, j, L.C_SEQ))), b.c(1))
        b.st(b.word(*self._cw(ws, j, L.C_SEQ)), seq)
        b.st(b.word(ws, L.WAVE_WORDS + j * L.CTR_WORDS + L.C_SITES, b.and_(seq, b.c(L.FLIGHT - 1))), "%site")
        _nsig, nwait, seg = self._seg(b, ws)
        op = b.select(b.cmp("eq", kind, b.c(CopyKind.TO_LDS)), b.c(DsKind.WRITE), b.c(DsKind.READ))
        return {"site1": b.add("%site", b.c(1)), "seq": seq, "seg": seg, "wave": me["wave"], "lane": me["lane"],
                "kind": op, "ctr": b.c(j + 1), "nwait": nwait}

    def dma(self) -> str:
        """An async copy: per lane, `nbytes` of LDS at ptr (ASYNCcnt), checked as a ds op."""
        b = Body()
        me = self._who(b)
        a = self._issue_copy(b, me, 0, "%kind")
        off, on_shadow = self._offset(b, "%ptr", "%nbytes")
        self._access(b, me, a, off, "%nbytes", on_shadow, a["nwait"])
        return self._func("__ldssan_dma", "%site: i32, %ptr: !llvm.ptr<3>, %nbytes: i32, %kind: i32", b)

    def tdm(self) -> str:
        """A TDM op (TENSORcnt): its LDS footprint decoded from D# groups 0-1 as
        runtime/emu/tdm.py does (2-D, dense row-major, `pad amount` bytes skipped after every
        `pad interval`), its 4-byte granules shared out over the active lanes."""
        b = Body()
        me = self._who(b)
        a = self._issue_copy(b, me, 1, "%kind")
        a["lane"] = b.c(NO_LANE)  # a wave-level op, as the host names it
        g0 = [b.let(f"vector.extract %g0[{i}] : i32 from vector<4xi32>") for i in (0, 1)]
        g1 = [b.let(f"vector.extract %g1[{i}] : i32 from vector<8xi32>") for i in (0, 3, 4)]
        cfg = g1[0]
        eb = b.shl(b.c(1), b.and_(b.shr(cfg, b.c(16)), b.c(3)))
        pad = b.cmp("ne", b.and_(b.shr(cfg, b.c(20)), b.c(1)), b.c(0))
        interval = b.select(pad, b.shl(b.c(8), b.and_(b.shr(cfg, b.c(22)), b.c(7))), b.c(1 << 30))
        amount = b.select(pad, b.mul(b.c(4), b.add(b.and_(b.shr(cfg, b.c(25)), b.c(0x7F)), b.c(1))), b.c(0))
        total = b.mul(b.mul(b.shr(g1[1], b.c(16)), b.and_(g1[2], b.c(0xFFFF))), eb)
        total = b.select(b.cmp("ne", b.and_(g0[0], b.c(1)), b.c(0)), total, b.c(0))  # pred 0: nothing moves
        active = b.let(f"rocdl.ballot {b.c(1, 'i1')} : i32")
        rank = b.let(f"rocdl.mbcnt.lo {active}, {b.c(0)} : (i32, i32) -> i32")
        n_act = b.let(f"llvm.intr.ctpop({active}) : (i32) -> i32")
        with b.for_(b.shl(rank, b.c(2)), total, b.shl(n_act, b.c(2))) as d:
            addr = b.add(g0[1], b.add(d, b.mul(b.let(f"arith.divui {d}, {interval} : i32"), amount)))
            oob = b.cmp("ugt", b.add(addr, b.c(L.GRANULE)), me["lds"])
            with b.if_(oob):  # §4.1: the bytes outside leave the shadow untouched
                self._record(b, me, Rule.OOB, Cause.NONE, "%site", b.c(NO_SITE), addr, me["wave"], b.c(0xFFFF),
                             a["lane"], b.c(NO_LANE), event=a)
            with b.if_(b.not_(oob)):
                self._granule(b, me, a, b.shr(addr, b.c(2)), addr, a["nwait"])
        return self._func("__ldssan_tdm", "%site: i32, %g0: vector<4xi32>, %g1: vector<8xi32>, "
                          "%g2: vector<4xi32>, %g3: vector<4xi32>, %kind: i32", b)

    def _copy_wait(self, b: Body, me: dict, j: int, n: str) -> None:
        """§3.4 on copy counter j: all but the newest n complete; where they completed is
        kept (the half-phase and the ds count there) when the wait raised DONE."""
        ws = me["ws"]
        seq = b.ld(b.word(*self._cw(ws, j, L.C_SEQ)))
        upto = b.select(b.cmp("uge", n, seq), b.c(0), b.sub(seq, n))
        done_w = b.word(*self._cw(ws, j, L.C_DONE))
        with b.if_(b.cmp("ugt", upto, b.ld(done_w))):
            _nsig, _nwait, seg = self._seg(b, ws)
            ncomp_w = b.word(*self._cw(ws, j, L.C_NCOMP))
            ncomp = b.ld(ncomp_w)
            entry = b.word(ws, L.WAVE_WORDS + j * L.CTR_WORDS + L.C_COMP,
                           b.mul(b.and_(ncomp, b.c(L.COMP_SLOTS - 1)), b.c(3)))
            b.st(entry, upto)
            b.st(b.word(entry, 1), seg)
            b.st(b.word(entry, 2), b.ld(b.word(ws, L.SEQ)))
            b.st(ncomp_w, b.add(ncomp, b.c(1)))
            b.st(done_w, upto)
        b.st(b.word(*self._cw(ws, j, L.C_LASTWAIT)), seq)

    def _copy_signal(self, b: Body, me: dict, slot: str) -> None:
        """A signal publishes the copy counters' completion too (acc[k], MODEL.md §3.9)."""
        ws = me["ws"]
        for j in range(L.COPY_COUNTERS):
            for src, dst in ((L.C_DONE, L.C_SIG_DONE), (L.C_LASTWAIT, L.C_SIG_LASTWAIT)):
                b.st(b.word(ws, L.WAVE_WORDS + j * L.CTR_WORDS + dst, slot), b.ld(b.word(*self._cw(ws, j, src))))
        b.st(b.word(ws, L.SIG_DS, slot), b.ld(b.word(ws, L.SEQ)))
        self._seg_boundary(b, me, final=True)

    def _seg_boundary(self, b: Body, me: dict, *, final: bool) -> None:
        """The wave leaves a half-phase: at a returned wait, or (`final`) at a signal or its
        end, the point whose state classify.py reads as "its next signal or end". If a
        record is waiting on this wave (layout.SEG_FLAG: settle.py), one R_SEG_CLOSE record
        per copy counter says which copies the wave issued and completed within the
        half-phase, and its DONE here."""
        if not self.lay.copies:
            return
        ws = me["ws"]
        flag = b.word(ws, L.SEG_FLAG)
        with b.if_(b.all_(b.cmp("ne", b.ld(flag), b.c(0)), self._leader(b, me))):
            for j in range(L.COPY_COUNTERS):
                lo = b.umax(b.ld(b.word(*self._cw(ws, j, L.C_SEQ0))), b.ld(b.word(*self._cw(ws, j, L.C_DONE0))))
                hi = b.ld(b.word(*self._cw(ws, j, L.C_DONE)))
                self._record(b, me, L.R_SEG_CLOSE, j + 1, lo, hi, b.c(0), me["wave"], b.c(NO_WAVE),
                             b.c(int(final)), b.c(NO_LANE))
        if final:  # a record waiting for the next signal or end still waits after a wait
            b.st(flag, b.c(0))
        for j in range(L.COPY_COUNTERS):
            b.st(b.word(*self._cw(ws, j, L.C_SEQ0)), b.ld(b.word(*self._cw(ws, j, L.C_SEQ))))
            b.st(b.word(*self._cw(ws, j, L.C_DONE0)), b.ld(b.word(*self._cw(ws, j, L.C_DONE))))

    def end(self) -> str:
        """§3.11 at the kernel's return: every copy still outstanding is LDS013 (WAVE_END;
        the newest FLIGHT per counter are named), then the wave's final state."""
        b = Body()
        me = self._who(b)
        ws = me["ws"]
        if self.lay.copies:
            leader = self._leader(b, me)
            for j in range(L.COPY_COUNTERS):
                seq = b.ld(b.word(*self._cw(ws, j, L.C_SEQ)))
                done = b.ld(b.word(*self._cw(ws, j, L.C_DONE)))
                lo = b.umax(done, b.select(b.cmp("ugt", seq, b.c(L.FLIGHT)), b.sub(seq, b.c(L.FLIGHT)), b.c(0)))
                with b.for_(b.add(lo, b.c(1)), b.add(seq, b.c(1))) as i:
                    site = b.ld(b.word(ws, L.WAVE_WORDS + j * L.CTR_WORDS + L.C_SITES, b.and_(i, b.c(L.FLIGHT - 1))))
                    with b.if_(leader):
                        self._record(b, me, Rule.DMA_NEVER_WAITED, Cause.WAVE_END, site, b.c(NO_SITE), b.c(0),
                                     me["wave"], me["wave"], b.c(NO_LANE), b.c(NO_LANE))
                b.st(b.word(*self._cw(ws, j, L.C_END_DONE)), done)
            b.st(b.word(ws, L.END_DS), b.ld(b.word(ws, L.SEQ)))
            self._seg_boundary(b, me, final=True)
        b.st(b.word(ws, L.ENDED), b.c(1))
        return self._func("__ldssan_end", "", b)
