"""The `__ldssan_*` hooks as MLIR function bodies: the device runtime's state machine.

Each hook body runs per lane, SIMT, like the kernel code around it. Uniform hooks (barrier,
fence, wait, use) have every active lane write the same value into the wave's words, so
they need no election; records of uniform hooks are written by the first active lane only.
The steps follow runtime/shadow/MODEL.md; section numbers below refer to it, and
DESIGN.md lists where this state machine differs from the host engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ldssan.passes.abi import ORDERINGS, SCOPES, BarrierForm, Counter, DsKind, fence_drains

from ..records import NO_LANE, NO_SITE, NO_WAVE, Cause, Rule
from . import layout as L
from .emitter import SHADOW, Body

# Which (ordering, scope) pairs drain, as two bit masks (abi.fence_drains is the one
# decision; it is separable into an ordering test and a scope test, checked here).
_ORDER_IDS = range(8)
_DRAIN_ORDERS = [o for o in _ORDER_IDS if any(fence_drains(ORDERINGS.get(o, "monotonic"), s) for s in SCOPES)]
_DRAIN_SCOPES = [i for i, s in enumerate(SCOPES) if fence_drains("release", s)]
assert all(fence_drains(ORDERINGS.get(o, "monotonic"), s) == (o in _DRAIN_ORDERS and i in _DRAIN_SCOPES)
           for o in _ORDER_IDS for i, s in enumerate(SCOPES)), "fence_drains is no longer separable"
ORDER_MASK = sum(1 << o for o in _DRAIN_ORDERS)
SCOPE_MASK = sum(1 << i for i in _DRAIN_SCOPES)

SIGNALS = (BarrierForm.FENCED_ARRIVE, BarrierForm.SIGNAL, BarrierForm.BARE_ARRIVE)
WAITS = (BarrierForm.FENCED_DONE, BarrierForm.WAIT, BarrierForm.BARE_DONE)


class Hooks:
    """Writes the hook definitions for one shadow layout and one record buffer address."""

    def __init__(self, lay: L.ShadowLayout, ring_addr: int, block: tuple[int, int, int] | None = None):
        self.lay = lay
        self.ring_addr = ring_addr
        self.block = block  # the kernels' known block size: constants, no dispatch-packet reads

    # ------------------------------------------------------------------ shared pieces
    def _who(self, b: Body) -> dict:
        """Wave, lane, workgroup and the wave's state base of the executing lane."""
        ids = {}
        for i, d in enumerate("xyz"):
            ids["t" + d] = b.index_i32(b.let(f"gpu.thread_id {d}"))
            ids["b" + d] = b.index_i32(b.let(f"gpu.block_dim {d}")) if self.block is None else b.c(self.block[i])
            ids["g" + d] = b.index_i32(b.let(f"gpu.block_id {d}"))
        tid = b.add(ids["tx"], b.mul(b.add(ids["ty"], b.mul(ids["tz"], ids["by"])), ids["bx"]))
        # the block id packed (layout.WG_*); the host linearizes it with the launch's grid
        # (the grid size would need ROCm's device libraries on gfx1250: __ockl_get_num_groups)
        wg = b.or_(b.or_(ids["gx"], b.shl(ids["gy"], b.c(L.WG_Y_SHIFT))), b.shl(ids["gz"], b.c(L.WG_Z_SHIFT)))
        wave = b.shr(tid, b.c(5))
        lane = b.and_(tid, b.c(31))
        return {"wave": wave, "lane": lane, "wg": wg, "ws": b.mul(wave, b.c(L.WAVE_WORDS))}

    def _wave_word(self, b: Body, wave: str, field: int | str) -> str:
        return b.word(b.mul(wave, b.c(L.WAVE_WORDS)), field)

    def _leader(self, b: Body, me: dict) -> str:
        first = b.let(f"rocdl.readfirstlane {me['lane']} : i32")
        return b.cmp("eq", me["lane"], first)

    def _record(self, b: Body, me: dict, rule: int | str, cause: int | str, site: str, other: str,
                offset: str, wave: str, other_wave: str, lane: str, other_lane: str) -> None:
        """Append one 32-byte record: an atomic cursor on the header's `written`; past the
        capacity only `dropped` is counted (runtime/records.py's Ring contract)."""
        def val(x):
            return b.c(x) if isinstance(x, int) else x

        base = b.c(self.ring_addr, "i64")
        written = b.global_ptr(b.add(base, b.c(L.WRITTEN_AT, "i64"), "i64"))
        at = b.let(f"llvm.atomicrmw add {written}, {b.c(1, 'i64')} monotonic : !llvm.ptr<1>, i64")
        cap = b.let(f"llvm.load {b.global_ptr(base)} : !llvm.ptr<1> -> i64")
        fits = b.cmp("ult", at, cap, "i64")
        with b.if_(fits):
            rec = b.add(base, b.add(b.c(L.RECORDS_AT, "i64"), b.mul(at, b.c(32, "i64"), "i64"), "i64"), "i64")
            launch = b.let(f"llvm.load {b.global_ptr(b.add(base, b.c(L.LAUNCH_AT, 'i64'), 'i64'))} "
                           ": !llvm.ptr<1> -> i32")
            words = [
                b.or_(val(rule), b.shl(val(cause), b.c(16))),
                site, other, offset,
                b.or_(wave, b.shl(other_wave, b.c(16))),
                b.or_(lane, b.shl(other_lane, b.c(8))),  # extra = 0: LDS011 is not on the device yet
                me["wg"], launch,
            ]
            for i, w in enumerate(words):
                p = b.global_ptr(b.add(rec, b.c(4 * i, "i64"), "i64"))
                b.emit(f"llvm.store {w}, {p} : i32, !llvm.ptr<1>")
        with b.if_(b.not_(fits)):
            dropped = b.global_ptr(b.add(base, b.c(L.DROPPED_AT, "i64"), "i64"))
            b.let(f"llvm.atomicrmw add {dropped}, {b.c(1, 'i64')} monotonic : !llvm.ptr<1>, i64")

    def _seg(self, b: Body, ws: str) -> tuple[str, str, str]:
        """(nsig, nwait, seg): seg = 2 * nwait + (1 inside a signal-wait window), MODEL.md §1."""
        nsig = b.ld(b.word(ws, L.NSIG))
        nwait = b.ld(b.word(ws, L.NWAIT))
        window = b.let(f"arith.extui {b.cmp('ugt', nsig, nwait)} : i1 to i32")
        return nsig, nwait, b.add(b.shl(nwait, b.c(1)), window)

    def _drain(self, b: Body, ws: str) -> None:
        """A draining fence: every ds op issued so far is complete (MODEL.md §3.5)."""
        seq = b.ld(b.word(ws, L.SEQ))
        b.st(b.word(ws, L.DONE), seq)
        b.st(b.word(ws, L.LASTWAIT), seq)

    def _complete_upto(self, b: Body, ws: str, upto: str) -> None:
        """A dscnt wait: ds ops up to sequence `upto` are complete; LASTWAIT = seq (§3.4)."""
        done = b.word(ws, L.DONE)
        b.st(done, b.umax(b.ld(done), upto))
        b.st(b.word(ws, L.LASTWAIT), b.ld(b.word(ws, L.SEQ)))

    # ------------------------------------------------------------------ happens-before
    def _published(self, b: Body, wave: str, seq: str, nwait: str) -> str:
        """i1: ds op `seq` of `wave` happens before an access of a wave that returned from
        `nwait` barrier phases: it was complete at that wave's signal of phase
        min(nwait, nsig) - 1 (acc[k] of MODEL.md §1-2: monotone, so the last one counts)."""
        nsig = b.ld(self._wave_word(b, wave, L.NSIG))
        k = b.umin(nwait, nsig)
        slot = b.and_(b.sub(k, b.c(1)), b.c(L.PHASE_SLOTS - 1))
        at_sig = b.ld(self._wave_word(b, wave, b.add(slot, b.c(L.SIG_DONE))))
        return b.all_(b.cmp("ugt", k, b.c(0)), b.cmp("uge", at_sig, seq))

    def _entry(self, b: Body, slot: str) -> dict:
        who = b.ld(b.word(slot, L.E_WHO))
        return {"site1": b.ld(b.word(slot, L.E_SITE)), "seq": b.ld(b.word(slot, L.E_SEQ)),
                "seg": b.ld(b.word(slot, L.E_SEG)), "wave": b.and_(who, b.c(0xFF)),
                "lane": b.and_(b.shr(who, b.c(8)), b.c(0xFF)), "kind": b.shr(who, b.c(16))}

    def _pair(self, b: Body, me: dict, p: dict, a: dict, byte: str) -> None:
        """Name a conflicting pair (MODEL.md §6) and record it: `p` the shadow entry, `a`
        the access being executed. First/second is canonical: lower half-phase first; in
        one half-phase the write first, between two writes the lower wave."""
        read = b.c(DsKind.READ)
        p_w, a_w = b.cmp("ne", p["kind"], read), b.cmp("ne", a["kind"], read)
        same_seg = b.cmp("eq", p["seg"], a["seg"])
        tie = b.any_(b.all_(p_w, b.not_(a_w)), b.all_(b.cmp("eq", p_w, a_w, "i1"),
                                                       b.cmp("ult", p["wave"], a["wave"])))
        p_first = b.any_(b.cmp("ult", p["seg"], a["seg"]), b.all_(same_seg, tie))
        f = {k: b.select(p_first, p[k], a[k]) for k in ("site1", "seq", "seg", "wave", "lane")}
        s = {k: b.select(p_first, a[k], p[k]) for k in ("site1", "seg", "wave", "lane")}
        f_w = b.select(p_first, p_w, a_w, "i1")
        s_w = b.select(p_first, a_w, p_w, "i1")
        rule = b.select(f_w, b.select(s_w, b.c(Rule.WAW), b.c(Rule.RAW_UNPUBLISHED)), b.c(Rule.WAR_REUSE))
        # cause (MODEL.md §6, different waves); k = the last phase the second acquired
        a_f, a_s = b.shr(f["seg"], b.c(1)), b.shr(s["seg"], b.c(1))
        k = b.sub(a_s, b.c(1))
        window = b.cmp("ne", b.and_(b.or_(f["seg"], s["seg"]), b.c(1)), b.c(0))
        same_phase = b.select(window, b.c(Cause.SIGNAL_WAIT_WINDOW), b.c(Cause.NO_BARRIER))
        f_nsig = b.ld(self._wave_word(b, f["wave"], L.NSIG))
        exited = b.cmp("ule", f_nsig, k)  # 2. it never signalled phase k: it ended
        after_last = b.cmp("uge", f["seg"], b.sub(b.shl(f_nsig, b.c(1)), b.c(1)))
        j = b.select(exited, b.sub(f_nsig, b.c(1)), k)
        lw = b.ld(self._wave_word(b, f["wave"], b.add(b.and_(j, b.c(L.PHASE_SLOTS - 1)), b.c(L.SIG_LASTWAIT))))
        waited = b.cmp("uge", lw, f["seq"])  # 4. a dscnt wait / fence ran after it, before the signal
        unpublished = b.select(f_w, b.select(waited, b.c(Cause.UNPUBLISHED_DS_STORE), b.c(Cause.BARE_BARRIER)),
                               b.c(Cause.UNPUBLISHED_READ))
        in_window = b.cmp("uge", f["seg"], b.add(b.shl(k, b.c(1)), b.c(1)))  # 3.
        later = b.select(b.all_(exited, after_last), b.c(Cause.NO_BARRIER),
                         b.select(b.all_(b.not_(exited), in_window), b.c(Cause.SIGNAL_WAIT_WINDOW), unpublished))
        cause = b.select(b.cmp("eq", a_f, a_s), same_phase, later)
        self._record(b, me, rule, cause, b.sub(s["site1"], b.c(1)), b.sub(f["site1"], b.c(1)), byte,
                     s["wave"], f["wave"], s["lane"], f["lane"])

    def _check(self, b: Body, me: dict, p: dict, slot: str, a: dict, nwait: str, byte: str, *,
               clear: bool) -> None:
        """Check entry `p` (loaded from `slot`) against access `a`; with `clear`, an entry
        that happens before `a` is dropped (a write supersedes it, MODEL.md §4.4)."""
        atomic = b.c(DsKind.ATOMIC)
        live = b.all_(b.cmp("ne", p["site1"], b.c(0)), b.cmp("ne", p["wave"], a["wave"]))
        with b.if_(live):
            both_atomic = b.all_(b.cmp("eq", p["kind"], atomic), b.cmp("eq", a["kind"], atomic))
            ordered = self._published(b, p["wave"], p["seq"], nwait)
            with b.if_(b.all_(b.not_(ordered), b.not_(both_atomic))):
                self._pair(b, me, p, a, byte)
            if clear:
                with b.if_(ordered):
                    b.st(b.word(slot, L.E_SITE), b.c(0))

    def _put(self, b: Body, slot: str, a: dict) -> None:
        b.st(b.word(slot, L.E_SITE), a["site1"])
        b.st(b.word(slot, L.E_SEQ), a["seq"])
        b.st(b.word(slot, L.E_SEG), a["seg"])
        b.st(b.word(slot, L.E_WHO), b.or_(b.or_(a["wave"], b.shl(a["lane"], b.c(8))), b.shl(a["kind"], b.c(16))))

    # ------------------------------------------------------------------ the hooks
    def ds(self) -> str:
        """MODEL.md §3.1 (issue) and §4 (check), applied at once in execution order."""
        lay, b = self.lay, Body()
        me = self._who(b)
        ws = me["ws"]
        seq = b.add(b.ld(b.word(ws, L.SEQ)), b.c(1))
        b.st(b.word(ws, L.SEQ), seq)
        b.st(b.word(b.mul(me["wave"], b.c(lay.sites)), "%site", lay.use_base), seq)
        _nsig, nwait, seg = self._seg(b, ws)
        a = {"site1": b.add("%site", b.c(1)), "seq": seq, "seg": seg, "wave": me["wave"],
             "lane": me["lane"], "kind": "%kind"}
        # The kernel's offset of the access: LLVM's LDS lowering may place the shadow before
        # the kernel's globals (the virtual gfx1250 puts it after them), so its bytes are
        # squeezed out; touching them is out of bounds.
        raw = b.let("llvm.ptrtoint %ptr : !llvm.ptr<3> to i32")
        sh = b.let(f"llvm.ptrtoint {b.let(f'llvm.mlir.addressof @{SHADOW} : !llvm.ptr<3>')} : !llvm.ptr<3> to i32")
        sh_end = b.add(sh, b.c(lay.bytes))
        off = b.select(b.cmp("uge", raw, sh_end), b.sub(raw, b.c(lay.bytes)), raw)
        end = b.add(off, "%nbytes")
        on_shadow = b.all_(b.cmp("ugt", b.add(raw, "%nbytes"), sh), b.cmp("ult", raw, sh_end))
        oob = b.any_(on_shadow, b.cmp("ugt", end, b.c(lay.lds_bytes)), b.cmp("ult", end, off))
        with b.if_(oob):  # §4.1: LDS031, the shadow untouched
            self._record(b, me, Rule.OOB, Cause.NONE, "%site", b.c(NO_SITE), off, me["wave"], b.c(NO_WAVE),
                         me["lane"], b.c(NO_LANE))
        with b.if_(b.all_(b.not_(oob), b.cmp("ugt", "%nbytes", b.c(0)))):
            g0 = b.shr(off, b.c(2))
            g1 = b.add(b.shr(b.sub(end, b.c(1)), b.c(2)), b.c(1))
            is_read = b.cmp("eq", "%kind", b.c(DsKind.READ))
            with b.for_(g0, g1) as g:
                byte = b.umax(off, b.shl(g, b.c(2)))
                row = b.mul(g, b.c(lay.slots_per_granule * L.ENTRY_WORDS))
                wslot = b.word(row, lay.granule_base)
                # Publish this access's entry before looking at the others': two waves
                # racing through these lines then see at least one of each other (a record
                # write is a yield point of the virtual gfx1250, and a real one interleaves).
                prev = self._entry(b, wslot)
                with b.if_(is_read):
                    self._put(b, b.word(wslot, b.mul(b.add(me["wave"], b.c(1)), b.c(L.ENTRY_WORDS))), a)
                with b.if_(b.not_(is_read)):
                    self._put(b, wslot, a)
                written = b.cmp("ne", prev["site1"], b.c(0))
                with b.if_(b.all_(b.not_(written), b.cmp("ne", "%kind", b.c(DsKind.WRITE)))):
                    # §4.3: LDS030 (atomics read too); retracted on the host if a write raced it
                    self._record(b, me, Rule.UNINIT_READ, Cause.NONE, "%site", b.c(NO_SITE), byte, me["wave"],
                                 b.c(NO_WAVE), me["lane"], b.c(NO_LANE))
                self._check(b, me, prev, wslot, a, nwait, byte, clear=False)
                with b.if_(b.not_(is_read)):  # §4.4: a write checks every wave's read slot
                    with b.for_(b.c(0), b.c(lay.waves)) as v:
                        rslot = b.word(wslot, b.mul(b.add(v, b.c(1)), b.c(L.ENTRY_WORDS)))
                        self._check(b, me, self._entry(b, rslot), rslot, a, nwait, byte, clear=True)
        return self._func("__ldssan_ds", "%site: i32, %ptr: !llvm.ptr<3>, %nbytes: i32, %kind: i32", b)

    def use(self) -> str:
        """MODEL.md §6b: the compiler's s_wait_dscnt before a load's result is used
        completes that load and every earlier ds op of the wave."""
        b = Body()
        me = self._who(b)
        issued = b.ld(b.word(b.mul(me["wave"], b.c(self.lay.sites)), "%site", self.lay.use_base))
        with b.if_(b.cmp("ne", issued, b.c(0))):
            self._complete_upto(b, me["ws"], issued)
        return self._func("__ldssan_use", "%site: i32", b)

    def wait(self) -> str:
        """MODEL.md §3.4 for the DS counter; the copy counters have nothing to complete
        here (kernels with copies are refused by the linker)."""
        b = Body()
        me = self._who(b)
        with b.if_(b.cmp("eq", "%counter", b.c(Counter.DS))):
            seq = b.ld(b.word(me["ws"], L.SEQ))
            n = b.and_("%n", b.c(0xFFFF))  # a 16-bit immediate, as the hardware reads it
            self._complete_upto(b, me["ws"], b.select(b.cmp("uge", n, seq), b.c(0), b.sub(seq, n)))
        return self._func("__ldssan_wait", "%site: i32, %counter: i32, %n: i32", b)

    def fence(self) -> str:
        """MODEL.md §3.5, with abi.fence_drains's decision as two masks."""
        b = Body()
        me = self._who(b)
        o_ok = b.cmp("ne", b.and_(b.shl(b.c(1), "%ordering"), b.c(ORDER_MASK)), b.c(0))
        s_ok = b.cmp("ne", b.and_(b.shl(b.c(1), "%scope"), b.c(SCOPE_MASK)), b.c(0))
        with b.if_(b.all_(o_ok, s_ok, b.cmp("ult", "%ordering", b.c(8)), b.cmp("ult", "%scope", b.c(32)))):
            self._drain(b, me["ws"])
        return self._func("__ldssan_fence", "%site: i32, %ordering: i32, %scope: i32", b)

    def barrier(self) -> str:
        """MODEL.md §3.8-3.10 for the workgroup barrier (-1); other ids order nothing (§7)."""
        b = Body()
        me = self._who(b)
        ws = me["ws"]
        wg_bar = b.cmp("eq", "%id", b.c(-1))

        def form_in(forms):
            return b.all_(wg_bar, b.any_(*(b.cmp("eq", "%form", b.c(f)) for f in forms)))

        with b.if_(form_in([BarrierForm.FENCED_ARRIVE])):  # fence release, then the signal
            self._drain(b, ws)
        with b.if_(form_in(SIGNALS)):
            self._signal(b, me)
        with b.if_(form_in(WAITS)):
            nsig, nwait = b.ld(b.word(ws, L.NSIG)), b.ld(b.word(ws, L.NWAIT))
            pending = b.cmp("ugt", nsig, nwait)
            with b.if_(pending):
                b.st(b.word(ws, L.NWAIT), b.add(nwait, b.c(1)))
            with b.if_(b.all_(b.not_(pending), self._leader(b, me))):  # §3.10: a wait with no signal
                self._record(b, me, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, "%site", b.c(NO_SITE),
                             b.c(0), me["wave"], b.c(NO_WAVE), b.c(NO_LANE), b.c(NO_LANE))
        with b.if_(form_in([BarrierForm.FENCED_DONE])):  # the wait, then the fence acquire
            self._drain(b, ws)
        return self._func("__ldssan_barrier", "%site: i32, %form: i32, %id: i32", b)

    def _signal(self, b: Body, me: dict) -> None:
        ws, lay = me["ws"], self.lay
        nsig, nwait = b.ld(b.word(ws, L.NSIG)), b.ld(b.word(ws, L.NWAIT))
        site1 = b.add("%site", b.c(1))
        leader = self._leader(b, me)
        with b.if_(b.all_(b.cmp("ugt", nsig, nwait), leader)):  # §3.8: signalled twice
            self._record(b, me, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, "%site",
                         b.sub(b.ld(b.word(ws, L.LASTSIG)), b.c(1)), b.c(0), me["wave"], b.c(NO_WAVE),
                         b.c(NO_LANE), b.c(NO_LANE))
        # §3.9: the first signaller of phase k names its site; a different site is LDS020
        ph = b.word(b.shl(b.and_(nsig, b.c(L.PHASE_SLOTS - 1)), b.c(1)), lay.phase_base)
        tag = b.add(nsig, b.c(1))
        first = b.cmp("ne", b.ld(ph), tag)
        with b.if_(first):
            b.st(ph, tag)
            b.st(b.word(ph, 1), site1)
        ref = b.ld(b.word(ph, 1))
        with b.if_(b.all_(b.not_(first), b.cmp("ne", ref, site1), leader)):
            self._record(b, me, Rule.BARRIER_DIVERGENCE, Cause.BARRIER_MISMATCH, "%site", b.sub(ref, b.c(1)),
                         b.c(0), me["wave"], b.c(NO_WAVE), b.c(NO_LANE), b.c(NO_LANE))
        slot = b.and_(nsig, b.c(L.PHASE_SLOTS - 1))
        b.st(b.word(ws, b.add(slot, b.c(L.SIG_DONE))), b.ld(b.word(ws, L.DONE)))
        b.st(b.word(ws, b.add(slot, b.c(L.SIG_LASTWAIT))), b.ld(b.word(ws, L.LASTWAIT)))
        b.st(b.word(ws, L.LASTSIG), site1)
        b.st(b.word(ws, L.NSIG), b.add(nsig, b.c(1)))

    def init(self) -> str:
        """Zero the workgroup's shadow, then a barrier, before the kernel's first op."""
        b = Body()
        threads = b.c(1)
        tid = b.c(0)
        for i, d in enumerate("xyz"):
            dim = b.index_i32(b.let(f"gpu.block_dim {d}")) if self.block is None else b.c(self.block[i])
            tid = b.add(b.mul(tid, dim), b.index_i32(b.let(f"gpu.thread_id {d}")))  # z-major
            threads = b.mul(threads, dim)
        with b.for_(tid, b.c(self.lay.words), threads) as i:
            b.st(i, b.c(0))
        b.emit("gpu.barrier")
        return self._func("__ldssan_init", "", b)

    def _func(self, name: str, params: str, b: Body) -> "HookBody":
        names = [p.split(":")[0].strip() for p in params.split(",") if p.strip()]
        return HookBody(name, tuple(names), b.text())

    def bodies(self) -> dict[str, "HookBody"]:
        """Every hook's body, by name, and the kernel prologue (`__ldssan_init`)."""
        out = [self.ds(), self.use(), self.wait(), self.fence(), self.barrier(), self.init()]
        return {h.name: h for h in out}

    def shadow_global(self) -> str:
        return (f"llvm.mlir.global internal @{SHADOW}() {{addr_space = 3 : i32, alignment = 16 : i64}} "
                f": !llvm.array<{self.lay.words} x i32>")


@dataclass(frozen=True)
class HookBody:
    """A hook's body as MLIR text over its parameters (`%site`, ...): the linker writes it
    in place of each call, with the parameters bound to the call's operands."""

    name: str
    params: tuple[str, ...]
    text: str


NOT_YET = ("__ldssan_dma", "__ldssan_tdm", "__ldssan_mark")  # copies: DESIGN.md, "Not yet"
