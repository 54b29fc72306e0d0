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
from .hooks_copies import CopyHooks
from .naming_ir import Naming

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


class Hooks(CopyHooks, Naming):
    """Writes the hook definitions for one shadow layout and one record buffer address."""

    def __init__(self, lay: L.ShadowLayout, ring_addr: int, block: tuple[int, int, int] | None = None):
        self.lay = lay
        self.ring_addr = ring_addr
        self.block = block  # the kernels' known block size: constants, no dispatch-packet reads

    # ------------------------------------------------------------------ shared pieces
    def _ids(self, b: Body) -> dict:
        ids = {}
        for i, d in enumerate("xyz"):
            ids["t" + d] = b.index_i32(b.let(f"gpu.thread_id {d}"))
            ids["b" + d] = b.index_i32(b.let(f"gpu.block_dim {d}")) if self.block is None else b.c(self.block[i])
            ids["g" + d] = b.index_i32(b.let(f"gpu.block_id {d}"))
        return ids

    def _ring(self, b: Body) -> str:
        """The record buffer's address (i64): baked in when the build is bound to a buffer
        (the virtual gfx1250, `on_device()`), else read from the module global
        `@__ldssan_ring` that the host sets after loading a standalone code object
        (`hardware.bind_module_global`)."""
        if self.ring_addr != L.RING_UNBOUND:
            return b.c(self.ring_addr, "i64")
        cell = b.let(f"llvm.mlir.addressof @{L.RING_GLOBAL} : !llvm.ptr<1>")
        # invariant: the kernel never writes it, so LLVM may load it once per kernel
        return b.let(f"llvm.load {cell} invariant {{alignment = 8 : i64}} : !llvm.ptr<1> -> i64")

    def _desc(self, b: Body, field: int, ty: str = "i32") -> str:
        """A field of the launch descriptor (layout.DESC), just before the ring."""
        return b.gld(b.add(self._ring(b), b.c(field - L.DESC_BYTES, "i64"), "i64"), ty)

    def _bind_scratch(self, b: Body, ids: dict) -> None:
        """Global placement: the shadow is this workgroup's slot, at its linear id (the
        grid comes from the launch descriptor: no ROCm device library call)."""
        if not self.lay.scratch:
            return
        gx, gy = self._desc(b, L.D_GRID_X), self._desc(b, L.D_GRID_Y)
        linear = b.add(ids["gx"], b.mul(gx, b.add(ids["gy"], b.mul(gy, ids["gz"]))))
        stride = b.mul(b.let(f"arith.extui {self._desc(b, L.D_SLOT_WORDS)} : i32 to i64"), b.c(4, "i64"), "i64")
        at = b.add(self._desc(b, L.D_SLOTS, "i64"),
                   b.mul(b.let(f"arith.extui {linear} : i32 to i64"), stride, "i64"), "i64")
        # an SGPR pair for LLVM: a slot base it keeps in VGPRs gets moved out of a saddr
        # global_load/store after instruction selection with its scale_offset bit left set,
        # which its own verifier rejects (gfx1250, MegaMoE)
        b.scratch = b.global_ptr(b.let(f"rocdl.readfirstlane {at} : i64"))

    def _who(self, b: Body) -> dict:
        """Wave, lane, workgroup, the wave's state base and B of the executing lane."""
        ids = self._ids(b)
        self._bind_scratch(b, ids)
        tid = b.add(ids["tx"], b.mul(b.add(ids["ty"], b.mul(ids["tz"], ids["by"])), ids["bx"]))
        # the block id packed (layout.WG_*); the host linearizes it with the launch's grid
        wg = b.or_(b.or_(ids["gx"], b.shl(ids["gy"], b.c(L.WG_Y_SHIFT))), b.shl(ids["gz"], b.c(L.WG_Z_SHIFT)))
        wave = b.shr(tid, b.c(5))
        lane = b.and_(tid, b.c(31))
        lds = self._desc(b, L.D_LDS) if self.lay.scratch else b.c(self.lay.lds_bytes)
        return {"wave": wave, "lane": lane, "wg": wg, "ws": b.mul(wave, b.c(self.lay.wave_words)), "lds": lds}

    def _wave_word(self, b: Body, wave: str, field: int | str) -> str:
        return b.word(b.mul(wave, b.c(self.lay.wave_words)), field)

    def _leader(self, b: Body, me: dict) -> str:
        first = b.let(f"rocdl.readfirstlane {me['lane']} : i32")
        return b.cmp("eq", me["lane"], first)

    def _record(self, b: Body, me: dict, rule: int | str, cause: int | str, site: str, other: str,
                offset: str, wave: str, other_wave: str, lane: str, other_lane: str, extra: int | str = 0,
                event: dict | None = None) -> None:
        """Append one 32-byte record: an atomic cursor on the header's `written`; past the
        capacity only `dropped` is counted (runtime/records.py's Ring contract). With the
        access `event` (modules with copies), a record equal in key to one this wave already
        wrote for that access is not written again (layout.DEDUP)."""
        def val(x):
            return b.c(x) if isinstance(x, int) else x

        fields = [val(x) for x in (rule, cause, site, other, offset, wave, other_wave, lane, other_lane, extra)]
        if event is None or not self.lay.copies:
            self._write_record(b, me, fields)
            return
        key = [b.or_(b.or_(val(rule), b.shl(val(cause), b.c(8))), b.shl(other_wave, b.c(16))), site, other,
               b.or_(event["seq"], b.shl(event["ctr"], b.c(28)))]
        h = b.and_(b.add(b.add(key[0], site), b.mul(other, b.c(7))), b.c(L.DEDUP - 1))
        slot = b.word(me["ws"], L.DEDUP_AT, b.mul(h, b.c(4)))
        hit = b.all_(*(b.cmp("eq", b.ld(b.word(slot, i)), k) for i, k in enumerate(key)))
        with b.if_(b.not_(hit)):
            for i, k in enumerate(key):
                b.st(b.word(slot, i), k)
            self._write_record(b, me, fields)

    def _write_record(self, b: Body, me: dict, fields: list) -> None:
        rule, cause, site, other, offset, wave, other_wave, lane, other_lane, extra = fields
        base = self._ring(b)
        written = b.global_ptr(b.add(base, b.c(L.WRITTEN_AT, "i64"), "i64"))
        at = b.let(f"llvm.atomicrmw add {written}, {b.c(1, 'i64')} monotonic : !llvm.ptr<1>, i64")
        cap = b.let(f"llvm.load {b.global_ptr(base)} : !llvm.ptr<1> -> i64")
        fits = b.cmp("ult", at, cap, "i64")
        with b.if_(fits):
            rec = b.add(base, b.add(b.c(L.RECORDS_AT, "i64"), b.mul(at, b.c(32, "i64"), "i64"), "i64"), "i64")
            launch = b.gld(b.add(base, b.c(L.LAUNCH_AT, "i64"), "i64"))
            words = [
                b.or_(rule, b.shl(cause, b.c(16))),
                site, other, offset,
                b.or_(wave, b.shl(other_wave, b.c(16))),
                b.or_(b.or_(lane, b.shl(other_lane, b.c(8))), b.shl(extra, b.c(16))),
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
    def _ctr_word(self, b: Body, ctr: str, ds_field: int, c_field: int, extra: str | int = 0) -> str:
        """Offset in a wave block of a per-counter field: the ds word for counter 0, the
        copy counter's block otherwise (ctr clamped so a ds entry never reads outside)."""
        if not self.lay.copies:
            return b.word(ds_field, extra)
        j = b.sub(b.umax(ctr, b.c(1)), b.c(1))
        copy = b.word(b.mul(j, b.c(L.CTR_WORDS)), L.WAVE_WORDS + c_field, extra)
        return b.select(b.cmp("eq", ctr, b.c(0)), b.word(ds_field, extra), copy)

    def _published(self, b: Body, wave: str, seq: str, ctr: str, nwait: str) -> str:
        """i1: op `seq` on counter `ctr` of `wave` happens before an access of a wave that
        returned from `nwait` barrier phases: it was complete at that wave's signal of phase
        min(nwait, nsig) - 1 (acc[k] of MODEL.md §1-2: monotone, so the last one counts)."""
        nsig = b.ld(self._wave_word(b, wave, L.NSIG))
        k = b.umin(nwait, nsig)
        slot = b.and_(b.sub(k, b.c(1)), b.c(L.PHASE_SLOTS - 1))
        at_sig = b.ld(self._wave_word(b, wave, self._ctr_word(b, ctr, L.SIG_DONE, L.C_SIG_DONE, slot)))
        return b.all_(b.cmp("ugt", k, b.c(0)), b.cmp("uge", at_sig, seq))

    def _ordered(self, b: Body, me: dict, p: dict, a: dict, nwait: str) -> str:
        """MODEL.md §2: one wave's ds ops are in order; a copy on either side of one wave is
        ordered by the wave's wait on the entry's counter; other waves by a barrier."""
        same = b.cmp("eq", p["wave"], a["wave"])
        other = self._published(b, p["wave"], p["seq"], p["ctr"], nwait)
        if not self.lay.copies:
            return b.any_(same, other)
        both_ds = b.all_(b.cmp("eq", p["ctr"], b.c(0)), b.cmp("eq", a["ctr"], b.c(0)))
        done = b.ld(b.word(me["ws"], self._ctr_word(b, p["ctr"], L.DONE, L.C_DONE)))
        own = b.any_(both_ds, b.cmp("uge", done, p["seq"]))
        return b.select(same, own, other, "i1")

    def _entry(self, b: Body, slot: str) -> dict:
        who = b.ld(b.word(slot, L.E_WHO))
        return {"site1": b.ld(b.word(slot, L.E_SITE)), "seq": b.ld(b.word(slot, L.E_SEQ)),
                "seg": b.ld(b.word(slot, L.E_SEG)), "wave": b.and_(who, b.c(0xFF)),
                "lane": b.and_(b.shr(who, b.c(8)), b.c(0xFF)), "kind": b.and_(b.shr(who, b.c(L.WHO_OP)), b.c(0xF)),
                "ctr": b.and_(b.shr(who, b.c(L.WHO_CTR)), b.c(0xF)), "who": who}

    def _check(self, b: Body, me: dict, p: dict, slot: str, a: dict, nwait: str, byte: str, *,
               clear: bool, served: str, wslot: str, ordered: str | None = None) -> None:
        """Check entry `p` (loaded from `slot`) against access `a` (`ordered`: p happens
        before a, when the caller has it); with `clear`, an entry that happens before `a` is
        dropped (a write supersedes it, MODEL.md §4.4)."""
        atomic = b.c(DsKind.ATOMIC)
        with b.if_(b.cmp("ne", p["site1"], b.c(0))):
            both_atomic = b.all_(b.cmp("eq", p["kind"], atomic), b.cmp("eq", a["kind"], atomic))
            if ordered is None:
                ordered = self._ordered(b, me, p, a, nwait)
            with b.if_(b.all_(b.not_(ordered), b.not_(both_atomic))):
                self._pair(b, me, p, a, byte, served, wslot)
                # §7: a write racing a read that found the granule never written: that
                # read's LDS030 is withdrawn (settle.py drops it)
                uninit = b.cmp("ne", b.and_(p["who"], b.c(L.F_UNINIT)), b.c(0))
                with b.if_(b.all_(uninit, b.cmp("ne", a["kind"], b.c(DsKind.READ)))):
                    self._record(b, me, L.R_RETRACT, Cause.NONE, b.sub(p["site1"], b.c(1)), b.c(NO_SITE), byte,
                                 p["wave"], p["wave"], p["lane"], b.c(NO_LANE), self._seq16(b, p["seq"]), event=a)
            if clear:
                with b.if_(ordered):
                    b.st(b.word(slot, L.E_SITE), b.c(0))

    @staticmethod
    def _seq16(b: Body, seq: str) -> str:
        return b.and_(seq, b.c(0xFFFF))

    def _put(self, b: Body, slot: str, a: dict, flags: str | None = None) -> None:
        b.st(b.word(slot, L.E_SITE), a["site1"])
        b.st(b.word(slot, L.E_SEQ), a["seq"])
        b.st(b.word(slot, L.E_SEG), a["seg"])
        who = b.or_(b.or_(a["wave"], b.shl(a["lane"], b.c(8))), b.shl(a["kind"], b.c(L.WHO_OP)))
        who = b.or_(who, b.shl(a["ctr"], b.c(L.WHO_CTR)))
        b.st(b.word(slot, L.E_WHO), who if flags is None else b.or_(who, flags))

    # ------------------------------------------------------------------ one access
    def _offset(self, b: Body, ptr: str, nbytes: str) -> tuple[str, str]:
        """(kernel LDS offset, i1 the bytes touch the shadow). LLVM's LDS lowering may place
        an LDS shadow before the kernel's globals (the virtual gfx1250 puts it after them),
        so its bytes are squeezed out; touching them is out of bounds."""
        raw = b.let(f"llvm.ptrtoint {ptr} : !llvm.ptr<3> to i32")
        if self.lay.scratch:
            return raw, b.c(0, "i1")
        sh = b.let(f"llvm.ptrtoint {b.let(f'llvm.mlir.addressof @{SHADOW} : !llvm.ptr<3>')} : !llvm.ptr<3> to i32")
        sh_end = b.add(sh, b.c(self.lay.bytes))
        off = b.select(b.cmp("uge", raw, sh_end), b.sub(raw, b.c(self.lay.bytes)), raw)
        return off, b.all_(b.cmp("ugt", b.add(raw, nbytes), sh), b.cmp("ult", raw, sh_end))

    def _access(self, b: Body, me: dict, a: dict, off: str, nbytes: str, on_shadow: str, nwait: str) -> None:
        """MODEL.md §4 for the bytes [off, off + nbytes) of one lane, applied at once."""
        end = b.add(off, nbytes)
        oob = b.any_(on_shadow, b.cmp("ugt", end, me["lds"]), b.cmp("ult", end, off))
        with b.if_(oob):  # §4.1: LDS031, the shadow untouched
            self._record(b, me, Rule.OOB, Cause.NONE, b.sub(a["site1"], b.c(1)), b.c(NO_SITE), off, me["wave"],
                         b.c(NO_WAVE), a["lane"], b.c(NO_LANE), event=a)
        with b.if_(b.all_(b.not_(oob), b.cmp("ugt", nbytes, b.c(0)))):
            g0 = b.shr(off, b.c(2))
            g1 = b.add(b.shr(b.sub(end, b.c(1)), b.c(2)), b.c(1))
            with b.for_(g0, g1) as g:
                self._granule(b, me, a, g, b.umax(off, b.shl(g, b.c(2))), nwait)

    def _granule(self, b: Body, me: dict, a: dict, g: str, byte: str, nwait: str) -> None:
        """Publish `a` in granule g's shadow row, then check the row's other entries."""
        lay, c = self.lay, b.c
        row = b.mul(g, c(lay.slots_per_granule * L.ENTRY_WORDS))
        wslot = b.word(row, lay.granule_base)
        pslot = b.word(wslot, L.ENTRY_WORDS)  # the write the last one superseded (§6a)

        def rslot(v):
            return b.word(wslot, b.mul(b.add(v, c(2)), c(L.ENTRY_WORDS)))

        is_read = b.cmp("eq", a["kind"], c(DsKind.READ))
        prev = self._entry(b, wslot)
        written = b.cmp("ne", prev["site1"], c(0))
        prev_ordered = self._ordered(b, me, prev, a, nwait)  # (wave state only: publishing below keeps it)
        before = b.all_(written, prev_ordered)  # the last write happened before a
        uninit = b.all_(b.not_(written), b.cmp("ne", a["kind"], c(DsKind.WRITE)))
        flags = b.or_(b.select(uninit, c(L.F_UNINIT), c(0)), b.select(b.all_(is_read, before), c(L.F_SERVED), c(0)))
        # Publish this access's entry before looking at the others': two waves racing
        # through these lines then see at least one of each other (a record write is a
        # yield point of the virtual gfx1250, and a real one interleaves).
        with b.if_(is_read):
            self._put(b, rslot(me["wave"]), a, flags)
        with b.if_(b.not_(is_read)):
            for i in range(L.ENTRY_WORDS):
                b.st(b.word(pslot, i), b.ld(b.word(wslot, i)))
            self._put(b, wslot, a, flags)
        with b.if_(uninit):
            # §4.3: LDS030 (atomics read too); withdrawn if a write raced it (R_RETRACT)
            self._record(b, me, Rule.UNINIT_READ, Cause.NONE, b.sub(a["site1"], c(1)), c(NO_SITE), byte,
                         me["wave"], c(NO_WAVE), a["lane"], c(NO_LANE), self._seq16(b, a["seq"]), event=a)
        self._consume(b, me, a, prev, wslot, b.all_(is_read, before), byte)
        # §6a fact 1 for a read meeting a racing write: the write that one superseded
        # happened before the read
        sup = self._entry(b, pslot)
        served = b.all_(is_read, b.cmp("ne", sup["site1"], c(0)), self._ordered(b, me, sup, a, nwait))
        self._check(b, me, prev, wslot, a, nwait, byte, clear=False, served=served, wslot=wslot,
                    ordered=prev_ordered)
        with b.if_(b.not_(is_read)):  # §4.4: a write checks every wave's read slot
            with b.for_(c(0), c(lay.waves)) as v:
                r = rslot(v)
                e = self._entry(b, r)
                served = b.cmp("ne", b.and_(e["who"], c(L.F_SERVED)), c(0))
                self._check(b, me, e, r, a, nwait, byte, clear=True, served=served, wslot=wslot)

    def _consume(self, b: Body, me: dict, a: dict, w: dict, wslot: str, ordered_read: str, byte: str) -> None:
        """§6a fact 2: a read of a later half-phase ordered after a write named in a §6a
        pair (F_HELD) consumed it: an R_CONSUMED record (once per granule) for settle.py."""
        c = b.c
        held = b.cmp("ne", b.and_(w["who"], c(L.F_HELD)), c(0))
        with b.if_(b.all_(ordered_read, held, b.cmp("ult", w["seg"], a["seg"]))):
            b.st(b.word(wslot, L.E_WHO), b.and_(w["who"], c(~L.F_HELD)))
            self._record(b, me, L.R_CONSUMED, Cause.NONE, c(NO_SITE), b.sub(w["site1"], c(1)), byte, me["wave"],
                         w["wave"], c(NO_LANE), c(NO_LANE), self._seq16(b, w["seq"]), event=a)

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
             "lane": me["lane"], "kind": "%kind", "ctr": b.c(0)}
        off, on_shadow = self._offset(b, "%ptr", "%nbytes")
        self._access(b, me, a, off, "%nbytes", on_shadow, nwait)
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
        """MODEL.md §3.4: the DS counter here, the copy counters in hooks_copies.py
        (LOAD/STORE order no LDS access; wait.asyncmark is refused by the linker)."""
        b = Body()
        me = self._who(b)
        n = b.and_("%n", b.c(0xFFFF))  # a 16-bit immediate, as the hardware reads it
        with b.if_(b.cmp("eq", "%counter", b.c(Counter.DS))):
            seq = b.ld(b.word(me["ws"], L.SEQ))
            self._complete_upto(b, me["ws"], b.select(b.cmp("uge", n, seq), b.c(0), b.sub(seq, n)))
        if self.lay.copies:
            for j, ctr in enumerate((Counter.ASYNC, Counter.TENSOR)):
                with b.if_(b.cmp("eq", "%counter", b.c(ctr))):
                    self._copy_wait(b, me, j, n)
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
                self._seg_boundary(b, me, final=False)  # the signal-wait window's half-phase is over
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
        if lay.copies:
            self._copy_signal(b, me, slot)
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
        ids = self._ids(b)
        self._bind_scratch(b, ids)
        if self.lay.scratch:  # 16 bytes a store (slots are whole multiples of 4 words)
            zero = b.let("arith.constant dense<0> : vector<4xi32>")
            with b.for_(b.shl(tid, b.c(2)), self._desc(b, L.D_SLOT_WORDS), b.shl(threads, b.c(2))) as i:
                b.emit(f"llvm.store {zero}, {b.shadow_ptr(i)} {{alignment = 16 : i64}} : vector<4xi32>, !llvm.ptr<1>")
        else:
            with b.for_(tid, b.c(self.lay.words), threads) as i:
                b.st(i, b.c(0))
        b.emit("gpu.barrier")
        return self._func("__ldssan_init", "", b)

    def _func(self, name: str, params: str, b: Body) -> "HookBody":
        names = [p.split(":")[0].strip() for p in params.split(",") if p.strip()]
        return HookBody(name, tuple(names), b.text())

    def bodies(self) -> dict[str, "HookBody"]:
        """Every hook's body, by name, and the kernel prologue (`__ldssan_init`)."""
        out = [self.ds(), self.use(), self.wait(), self.fence(), self.barrier(), self.init(), self.end()]
        if self.lay.copies:
            out += [self.dma(), self.tdm()]
        return {h.name: h for h in out}

    def shadow_global(self) -> str | None:
        if self.lay.scratch:
            return None
        return (f"llvm.mlir.global internal @{SHADOW}() {{addr_space = 3 : i32, alignment = 16 : i64}} "
                f": !llvm.array<{self.lay.words} x i32>")

    def ring_global(self) -> str | None:
        """An unbound build's `@__ldssan_ring` (u64, global memory, 0 until the host binds
        it): external, so the code object exports it for `hipModuleGetGlobal`."""
        if self.ring_addr != L.RING_UNBOUND:
            return None
        return (f"llvm.mlir.global external @{L.RING_GLOBAL}(0 : i64) "
                "{addr_space = 1 : i32, alignment = 8 : i64} : i64")


@dataclass(frozen=True)
class HookBody:
    """A hook's body as MLIR text over its parameters (`%site`, ...): the linker writes it
    in place of each call, with the parameters bound to the call's operands."""

    name: str
    params: tuple[str, ...]
    text: str


NOT_YET = ("__ldssan_mark",)  # asyncmark / wait.asyncmark: DESIGN.md, "Not yet"
