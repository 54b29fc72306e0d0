"""The rule catalogue: code, name, title, explanation and fix hint for every `Rule`,
and a one-line text for every `Cause`.

The semantics behind each entry are in docs/memory-model.md ("Barriers": a barrier does not
wait for the wave's LDS stores; "Rules": what each rule needs). Fix hints are written in FlyDSL
terms, since that is what a kernel author edits.

Lookups switch with an exhaustive `match` ending in `assert_never`: adding a `Rule` or a
`Cause` without an entry here fails at import (the catalogue is built eagerly), not at
report time. Numbers that are not a known `Rule`/`Cause` (a newer runtime, a corrupt
record) never raise: `info()` and `cause_text()` return a placeholder instead.
"""

from __future__ import annotations

from dataclasses import dataclass

try:  # Python >= 3.11
    from typing import assert_never
except ImportError:  # pragma: no cover - Python 3.10
    from typing_extensions import assert_never

from ldssan.causes import CAUSE_LINES, cause_name
from ldssan.runtime.records import Cause, Rule

__all__ = [
    "RuleInfo",
    "CATALOGUE",
    "info",
    "lookup",
    "rule_name",
    "cause_name",
    "cause_text",
    "fix_hint",
    "other_access_label",
]


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """One catalogue entry. `rule` is the raw number when it is not a known `Rule`."""

    rule: Rule | int
    code: str  # "LDS001"; stable, what suppressions and SARIF ruleIds use
    name: str  # "raw-unpublished"; stable short name
    title: str  # one line, printed after "WARNING: ldssan:"
    explanation: str  # one paragraph: why this is a bug on gfx1250
    fix: str  # concrete hint in FlyDSL terms
    default_cause: str  # cause line when the record carries Cause.NONE

    @property
    def known(self) -> bool:
        return isinstance(self.rule, Rule)


# FlyDSL spellings used in the hints, kept in one place.
_BARRIER = "fx.gpu.barrier()"
_WAIT_DS = "fx.rocdl.s_wait_dscnt(0)"
_RELEASE = 'fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Release)'
_SIGNAL = "fx.rocdl.s_barrier_signal(-1)"
_WAIT_BAR = "fx.rocdl.s_barrier_wait(-1)"
_TENSOR_WAIT = "tdm_ops.tensor_wait(n)"
_ASYNC_WAIT = "fx.rocdl.s_wait_asynccnt(n)"


def rule_name(rule: Rule) -> str:
    """The stable short name of a rule (exhaustive: a new Rule without a name fails here)."""
    match rule:
        case Rule.RAW_UNPUBLISHED:
            return "raw-unpublished"
        case Rule.WAR_REUSE:
            return "war-reuse"
        case Rule.WAW:
            return "waw"
        case Rule.WAW_SAME_VALUE:
            return "waw-same-value"
        case Rule.DMA_READ_BEFORE_WAIT:
            return "dma-read-before-wait"
        case Rule.WAIT_TOO_WEAK:
            return "wait-too-weak"
        case Rule.DMA_OVERLAP:
            return "dma-overlap"
        case Rule.DMA_NEVER_WAITED:
            return "dma-never-waited"
        case Rule.CLUSTER_COPY_UNORDERED:
            return "cluster-copy-unordered"
        case Rule.BARRIER_DIVERGENCE:
            return "barrier-divergence"
        case Rule.UNINIT_READ:
            return "uninit-read"
        case Rule.OOB:
            return "oob"
        case Rule.MISSING_RELEASE:
            return "missing-release"
        case Rule.MISSING_ACQUIRE:
            return "missing-acquire"
        case Rule.ISA_STORE_UNWAITED_AT_SIGNAL:
            return "isa-store-unwaited-at-signal"
        case Rule.ISA_WAIT_BELOW_INTENT:
            return "isa-wait-below-intent"
        case Rule.ISA_USE_BEFORE_WAIT:
            return "isa-use-before-wait"
        case _:
            assert_never(rule)


def _entry(rule: Rule) -> RuleInfo:
    """Title, explanation, fix and default cause line of one rule."""
    code, name = rule.code, rule_name(rule)
    match rule:
        case Rule.RAW_UNPUBLISHED:
            return RuleInfo(
                rule, code, name,
                title="read of LDS bytes another wave wrote, with no publishing barrier between",
                explanation=(
                    "On gfx1250 a barrier only synchronizes execution: a bare s_barrier_signal/"
                    "s_barrier_wait (rocdl.s.barrier, fx.rocdl.s_barrier_signal/wait) does not "
                    "wait for the wave's own ds stores, which can still sit in the LDS queue "
                    "(dscnt) when the other waves leave the barrier. A write is published only "
                    "if it is complete before the writer's s_barrier_signal -- by an explicit "
                    "s_wait_dscnt or a workgroup release fence, which compiles to s_wait_dscnt 0 "
                    "-- and the reader acquires it only by executing the matching s_barrier_wait "
                    "before its read. Accesses between a wave's signal and its wait are neither "
                    "published nor protected by that barrier phase."
                ),
                fix=(
                    f"Separate the write and the read with {_BARRIER} (release fence, signal, "
                    f"wait, acquire fence). With a split barrier, complete the stores first -- "
                    f"{_WAIT_DS} or {_RELEASE} -- before {_SIGNAL}, and read only after "
                    f"{_WAIT_BAR}."
                ),
                default_cause="no barrier phase published the write to the reading wave",
            )
        case Rule.WAR_REUSE:
            return RuleInfo(
                rule, code, name,
                title="LDS bytes overwritten while another wave's read of them is unpublished",
                explanation=(
                    "A write -- ds store, async copy or TDM load into LDS -- was issued to bytes "
                    "another wave reads, before that read was complete and published to the "
                    "writer. A ds_load is finished only when the reader's dscnt covers it; the "
                    "reader must complete its loads (s_wait_dscnt or a release fence) before its "
                    "s_barrier_signal, and the writer may overwrite only after the matching "
                    "s_barrier_wait. Barriers do not complete loads on gfx1250, and async/TDM "
                    "copies are not ordered with the LDS queue. This is the buffer-refill-too-"
                    "early bug: the next stage is issued into a buffer before every consumer "
                    "passed the reuse barrier."
                ),
                fix=(
                    f"Put a {_BARRIER} after the last read of the buffer (the reuse barrier) and "
                    f"issue the refill -- ds store, async copy or TDM load -- after it; in an "
                    f"nb-stage pipeline check that the refilled stage is the one every wave "
                    f"finished before that barrier."
                ),
                default_cause=(
                    "the other wave's read was not published to the writer before the overwrite"
                ),
            )
        case Rule.WAW:
            return RuleInfo(
                rule, code, name,
                title="two waves write the same LDS bytes with no ordering",
                explanation=(
                    "Two waves wrote the same bytes and no published barrier phase orders the "
                    "first write before the second, so the final value depends on the order the "
                    "stores drain from the LDS queues (and, for copies, on when the copy engine "
                    "lands its data). On gfx1250 a barrier orders the writes only if the first "
                    "writer's store is dscnt-complete before its s_barrier_signal. Atomics to "
                    "the same word are not a race with each other."
                ),
                fix=(
                    f"Give each wave disjoint bytes (check the index math), or order the writes "
                    f"with {_BARRIER} between them; use an LDS atomic if the waves are meant to "
                    f"combine values."
                ),
                default_cause="no barrier phase orders the two writes",
            )
        case Rule.WAW_SAME_VALUE:
            return RuleInfo(
                rule, code, name, title="two waves store identical bytes to one LDS location, unordered (warning)",
                explanation=(
                    "As LDS003, but both stores wrote identical bytes wherever both wrote (masked-off lanes "
                    "parking one sentinel in one slot, say): every order leaves the same value, so the pair is "
                    "benign by the memory model and never fails a launch. A read racing either store is still "
                    "reported (LDS001/LDS002). Only the virtual gfx1250 sees stored values; the device runtime "
                    "reports such a pair as LDS003."),
                fix=f"Nothing is required; to silence it, let one wave store the value or order the stores with "
                    f"{_BARRIER}.",
                default_cause="no barrier phase orders the two writes (both stored the same bytes)",
            )
        case Rule.DMA_READ_BEFORE_WAIT:
            return RuleInfo(
                rule, code, name,
                title="read of LDS bytes an async/TDM copy is still writing",
                explanation=(
                    "Async global-to-LDS copies (global_load_async_to_lds, counted on ASYNCcnt) "
                    "and TDM loads (tensor_load_to_lds, TENSORcnt) are outside LLVM's automatic "
                    "wait insertion: no s_wait_asynccnt/s_wait_tensorcnt is inserted for you, and "
                    "neither fences nor barriers complete them. The data is in LDS only after "
                    "the issuing wave's s_wait_tensorcnt/s_wait_asynccnt covers the copy; other "
                    "waves may read it only if that wait precedes the issuer's s_barrier_signal "
                    "and they read after the matching s_barrier_wait."
                ),
                fix=(
                    f"In the issuing wave call {_TENSOR_WAIT} (TDM) or {_ASYNC_WAIT} (async "
                    f"copies), with n at most the number of copies issued after the one being "
                    f"consumed, before the read; if other waves read the data, place the wait "
                    f"before {_BARRIER}."
                ),
                default_cause="the copy had no covering wait before this read",
            )
        case Rule.WAIT_TOO_WEAK:
            return RuleInfo(
                rule, code, name,
                title="a wait's count leaves the needed async/TDM copy outstanding",
                explanation=(
                    "s_wait_tensorcnt N / s_wait_asynccnt N stalls until at most N ops of that "
                    "counter are outstanding; since copies complete in issue order within a "
                    "type, it guarantees every copy except the N most recently issued. Here a "
                    "wait exists, but N is larger than the number of copies issued after the one "
                    "being consumed, so that copy may still be in flight -- typically an "
                    "off-by-one in a multi-stage pipeline's outstanding-copy count."
                ),
                fix=(
                    f"Lower the count of {_TENSOR_WAIT} / {_ASYNC_WAIT} to the value in the "
                    f"report, or recount the copies issued between the consumed stage and the "
                    f"wait (every TDM/async op of the wave counts, including other tiles)."
                ),
                default_cause="the wait's count leaves the copy outstanding",
            )
        case Rule.DMA_OVERLAP:
            return RuleInfo(
                rule, code, name,
                title="write into LDS bytes an in-flight async/TDM copy writes or reads",
                explanation=(
                    "A ds store or a copy targeted bytes that an async/TDM copy still in flight "
                    "writes (global-to-LDS) or reads (LDS-to-global store). The LDS queue and "
                    "the copy engines are not ordered with each other, even within one wave, "
                    "and the arrival order of copy data is undocumented: the bytes end up with "
                    "either value, or the store ships a torn tile. The same holds for a copy "
                    "issued while the wave's own ds store to those bytes is not yet "
                    "dscnt-complete."
                ),
                fix=(
                    f"Complete the in-flight copy first -- {_TENSOR_WAIT} / {_ASYNC_WAIT}, plus "
                    f"{_BARRIER} if another wave issued it; before issuing a copy that reads or "
                    f"overwrites ds-stored bytes, complete the stores with {_WAIT_DS}."
                ),
                default_cause="an async/TDM copy of these bytes was still in flight",
            )
        case Rule.DMA_NEVER_WAITED:
            return RuleInfo(
                rule, code, name,
                title="async/TDM copies never completed",
                explanation=(
                    "A wave ended, or relied on wait.asyncmark, while async/TDM copies were "
                    "outstanding. Nothing but s_wait_asynccnt/s_wait_tensorcnt completes them: "
                    "not s_endpgm, not barriers, not fences; and wait.asyncmark(N) completes "
                    "only copies issued before an asyncmark, never those after the last mark. "
                    "The copy may still be writing LDS (or reading it, for a store to global) "
                    "when the data is consumed or the workgroup's LDS is reused."
                ),
                fix=(
                    f"Complete every copy before it is relied on or the kernel ends: "
                    f"tdm_ops.tensor_wait(0) / fx.rocdl.s_wait_asynccnt(0) in the epilogue; with "
                    f"asyncmark groups call fx.rocdl.asyncmark() after the last copy of each "
                    f"group, before fx.rocdl.wait_asyncmark(n)."
                ),
                default_cause="async/TDM copies were still outstanding",
            )
        case Rule.CLUSTER_COPY_UNORDERED:
            return RuleInfo(
                rule, code, name,
                title="LDS bytes a cluster peer's TDM multicast writes, accessed unordered with it",
                explanation=(
                    "A TDM load whose workgroup mask names other workgroups of the cluster "
                    "writes the tile into each named workgroup's LDS. Its completion is counted "
                    "only by the issuing wave's TENSORcnt, in the issuing workgroup. ldssan takes "
                    "the copy as published to a peer only when the issuing wave's "
                    "s_wait_tensorcnt covered it before its workgroup signalled the cluster "
                    "barrier (-3), and the accessing wave returned from its own s_barrier_wait "
                    "-3 of that phase before the access (public documentation states no weaker "
                    "rule). An access of the peer's bytes that no such phase orders after the "
                    "copy -- or, for an access made before the copy was issued, that no cluster "
                    "phase orders before it -- races the copy's writes."
                ),
                fix=(
                    f"In the issuing workgroup call {_TENSOR_WAIT} covering the multicast load, "
                    f"then cluster.cluster_barrier() (workgroup barrier, one wave signals -3, "
                    f"every wave waits -3) before any workgroup of the cluster reads the tile; "
                    f"before a multicast refill of a buffer, a cluster barrier after every "
                    f"workgroup's last read of it."
                ),
                default_cause="no cluster barrier phase ordered the peer's copy and this access",
            )
        case Rule.BARRIER_DIVERGENCE:
            return RuleInfo(
                rule, code, name,
                title="the waves of a workgroup ran different barrier sequences",
                explanation=(
                    "The workgroup barrier (-1) completes a phase when every live wave has "
                    "signalled it. Waves that exit drop out, so an early exit is legal, but a "
                    "wave that skips or adds an s_barrier_signal (or a gpu.barrier) under "
                    "wave-dependent control flow either deadlocks the workgroup or skews the "
                    "phases so that waves pair different barriers -- and every visibility "
                    "guarantee built on those barriers is void. A barrier reached with a "
                    "partial exec mask is divergent control flow inside the wave."
                ),
                fix=(
                    f"Hoist {_BARRIER} (and split {_SIGNAL}/{_WAIT_BAR} pairs) out of "
                    f"wave-dependent branches and out of loops with wave-dependent trip counts, "
                    f"so that every wave executes the same barriers; predicate the work, not the "
                    f"barrier."
                ),
                default_cause="the waves did not execute the same barrier sequence",
            )
        case Rule.UNINIT_READ:
            return RuleInfo(
                rule, code, name,
                title="read of LDS bytes never written in this workgroup",
                explanation=(
                    "LDS contents are undefined when a workgroup starts, and LDS variables "
                    "cannot have initializers: this read returns whatever an earlier workgroup "
                    "left behind. Bytes that a TDM copy only pads or skips (descriptor "
                    "out-of-bounds handling) count as never written."
                ),
                fix=(
                    f"Write the bytes (ds store or copy) before reading them and publish them "
                    f"with {_BARRIER}; check the read's index math against the region the "
                    f"producer fills."
                ),
                default_cause="no wave or copy of this workgroup wrote these bytes before the read",
            )
        case Rule.OOB:
            return RuleInfo(
                rule, code, name,
                title="LDS access outside the workgroup's allocation",
                explanation=(
                    "An access, or part of an async/TDM copy footprint, falls outside "
                    "[0, allocated LDS size) of the workgroup (the static SharedAllocator arena "
                    "plus dynamic LDS). gfx1250 gives no documented guarantee for out-of-range "
                    "LDS addresses: writes may be dropped, reads may return zeros, or the "
                    "address may alias another buffer."
                ),
                fix=(
                    "Check the offset math and the copy's tile box / descriptor against the "
                    "SharedAllocator sizes; grow the allocation or clamp the index."
                ),
                default_cause="the access lies outside the workgroup's LDS allocation",
            )
        case Rule.MISSING_RELEASE:
            return RuleInfo(
                rule, code, name,
                title="LDS store reaches a split barrier signal with no release fence between",
                explanation=(
                    "A raw s_barrier_signal carries no memory semantics. The gfx1250 memory "
                    "model publishes a wave's LDS stores at a barrier only through a release "
                    "fence program-ordered before the signal (workgroup scope or wider, not "
                    "one-as: it compiles to s_wait_dscnt 0) or an explicit s_wait_dscnt 0. On "
                    "some path from this store to this signal there is neither, so another "
                    "wave may leave the barrier before the store lands. A static check of the "
                    "kernel's code (severity warning): it fires even when no launch raced."
                ),
                fix=(
                    f"Put {_RELEASE} (or {_WAIT_DS}) between the store and {_SIGNAL}, or use "
                    f"{_BARRIER}, which fences both sides."
                ),
                default_cause="no workgroup release fence or s_wait_dscnt 0 between the store and the signal",
            )
        case Rule.MISSING_ACQUIRE:
            return RuleInfo(
                rule, code, name,
                title="LDS access after a split barrier wait with no acquire fence between",
                explanation=(
                    "A raw s_barrier_wait carries no memory semantics: the gfx1250 memory model "
                    "makes other waves' published stores visible to this wave only through an "
                    "acquire fence program-ordered after the wait (workgroup scope or wider, "
                    "not one-as). Without it the compiler may move this load above the wait; "
                    "today's code may happen to keep it below. A static check of the kernel's "
                    "code (severity warning): it fires even when no launch raced."
                ),
                fix=(
                    "Put fx.memory_fence(syncscope=\"workgroup\", "
                    f"ordering=fx.AtomicOrdering.Acquire) between {_WAIT_BAR} and the load, or "
                    f"use {_BARRIER}, which fences both sides."
                ),
                default_cause="no workgroup acquire fence between the wait and the load",
            )
        case Rule.ISA_STORE_UNWAITED_AT_SIGNAL:
            return RuleInfo(
                rule, code, name,
                title="LDS store still in flight at s_barrier_signal in the compiled code",
                explanation=(
                    "Found in the linked gfx1250 code object, after the LLVM backend placed its "
                    "own waits: on some path a ds_store reaches s_barrier_signal with no "
                    "s_wait_dscnt that retires it (dscnt is in order: s_wait_dscnt N leaves the "
                    "N most recent LDS ops in flight). The barrier then does not publish the "
                    "store, and another wave may leave the barrier and read the old bytes. A "
                    "static check of the instructions the hardware will run (severity warning)."
                ),
                fix=(
                    f"Put {_RELEASE} (or {_WAIT_DS}) between the store and {_SIGNAL}, or use "
                    f"{_BARRIER}, which fences both sides."
                ),
                default_cause="no s_wait_dscnt retiring the store between it and the signal",
            )
        case Rule.ISA_WAIT_BELOW_INTENT:
            return RuleInfo(
                rule, code, name,
                title="hand-written wait leaves outstanding, in the compiled code, an op it retires in the IR",
                explanation=(
                    "Found by comparing the linked gfx1250 code object with the kernel's IR: on "
                    "every IR path at least N ops of this counter follow the op, so the "
                    "hand-written s_wait_<cnt> N retires it (the counter is in order: the wait "
                    "leaves only the N most recent ops in flight). On some compiled path fewer "
                    "follow, because the backend merged, split or interleaved the ops (aiter "
                    "#6170 class), so the op is still in flight after the wait and whatever "
                    "relies on it races. A static check (severity warning)."
                ),
                fix=(
                    "Pick a count that holds for the compiled code ("
                    "fx.rocdl.s_wait_dscnt(0) / s_wait_<cnt>(0) is always safe), or do not rely "
                    "on op counts the backend may change (wait right after the op you need)."
                ),
                default_cause="the compiled code has fewer younger ops after this op than the IR",
            )
        case Rule.ISA_USE_BEFORE_WAIT:
            return RuleInfo(
                rule, code, name,
                title="register used before the wait for the load writing it, in the compiled code",
                explanation=(
                    "Found in the linked gfx1250 code object: on some path an instruction uses a "
                    "VGPR that a DS or VMEM load may still be writing (the load's counter was not "
                    "waited down past it). gfx1250 does not interlock these results: the wait "
                    "before the first use is the only thing that orders them, so the instruction "
                    "may read the register's old value. Source waits cannot cause this; the "
                    "wait the compiler placed came too late (aiter #5418 class)."
                ),
                fix=(
                    "Report it against the compiler; meanwhile force the wait at the source: "
                    "fx.rocdl.s_wait_dscnt(0) (LDS loads) or fx.rocdl.s_wait_loadcnt(0) "
                    "(global/buffer loads) between the load and the use."
                ),
                default_cause="no wait retires the load before the register is used",
            )
        case _:
            assert_never(rule)


# Built eagerly so a Rule without an entry fails at import.
CATALOGUE: dict[Rule, RuleInfo] = {rule: _entry(rule) for rule in Rule}


def info(rule: Rule | int) -> RuleInfo:
    """The catalogue entry of `rule`; a placeholder entry for a number no Rule has."""
    try:
        return CATALOGUE[Rule(rule)]
    except ValueError:
        n = int(rule)
        return RuleInfo(
            n, f"LDS{n:03d}", "unknown-rule",
            title=f"unknown rule {n} (record from a newer or mismatched ldssan runtime?)",
            explanation=(
                "The violation record carries a rule number this version of ldssan does not "
                "know. The runtime that wrote it and this decoder disagree on the record "
                "format or the rule list."
            ),
            fix="Use the same ldssan version for the instrumented kernel and the report.",
            default_cause=f"rule {n} has no catalogue entry",
        )


def lookup(code_or_name: str) -> Rule:
    """`Rule` for "LDS001", "lds001", "1" or "raw-unpublished"; KeyError lists the choices."""
    key = code_or_name.strip().lower()
    for entry in CATALOGUE.values():
        if key in (entry.code.lower(), entry.name, str(int(entry.rule))):
            return Rule(entry.rule)
    known = ", ".join(f"{e.code} ({e.name})" for e in CATALOGUE.values())
    raise KeyError(f"unknown ldssan rule {code_or_name!r}. Known rules: {known}")


def cause_text(cause: Cause | int, rule: Rule | int | None = None) -> str:
    """One line saying why the access was unordered.

    Cause.NONE falls back to the rule's `default_cause` when `rule` is given; an unknown
    cause number gives a placeholder, never an exception.
    """
    try:
        line = CAUSE_LINES[Cause(cause)]
    except ValueError:
        return f"unknown cause {int(cause)}"
    if not line and rule is not None:
        return info(rule).default_cause
    return line


def fix_hint(rule: Rule | int, cause: Cause | int = Cause.NONE) -> str:
    """The rule's fix hint, sharpened for causes whose remedy differs from the rule's."""
    base = info(rule).fix
    try:
        cause = Cause(cause)
    except ValueError:
        return base
    match cause:
        case Cause.SIGNAL_WAIT_WINDOW:
            return (
                f"Move the access out of the window between {_SIGNAL} and {_WAIT_BAR}: "
                f"writes to publish go before the signal (after {_WAIT_DS}), reads of "
                f"published data after the wait -- or use {_BARRIER}, which has no window."
            )
        case Cause.UNPUBLISHED_DS_STORE | Cause.BARE_BARRIER:
            return (
                f"Complete the writer's ds stores before it signals: {_WAIT_DS} or {_RELEASE} "
                f"right before {_SIGNAL}, or use {_BARRIER}, which does both."
            )
        case Cause.UNPUBLISHED_READ:
            return (
                f"Complete the reader's ds_loads before it signals ({_WAIT_DS} or {_RELEASE} "
                f"before {_SIGNAL}, or use {_BARRIER}), and issue the overwrite only after the "
                f"matching barrier wait."
            )
        case Cause.COPY_WAITED_NOT_PUBLISHED:
            return (
                f"Move {_TENSOR_WAIT} / {_ASYNC_WAIT} before the issuing wave's barrier "
                f"signal (wait, then {_BARRIER}) so that the barrier publishes the copy."
            )
        case Cause.COPY_WAITED_UNPUBLISHED:
            return (
                f"The issuing wave's {_TENSOR_WAIT} / {_ASYNC_WAIT} completes the copy for that "
                f"wave only: put {_BARRIER} between that wait and the other waves' reads, so "
                f"that the barrier publishes the data to them."
            )
        case Cause.PEER_COPY_AFTER_ACCESS:
            return (
                "Put cluster.cluster_barrier() after this workgroup's last access of the bytes "
                "and issue the peer's multicast refill after it."
            )
        case Cause.ASYNCMARK_UNMARKED:
            return (
                "Call fx.rocdl.asyncmark() after the last copy of each group before relying "
                "on fx.rocdl.wait_asyncmark(n), or wait explicitly with "
                f"{_TENSOR_WAIT} / {_ASYNC_WAIT}."
            )
        case (
            Cause.NONE | Cause.NO_BARRIER | Cause.COPY_NOT_WAITED | Cause.WAVE_END
            | Cause.BARRIER_MISMATCH | Cause.BARRIER_DIVERGENT_LANES
        ):
            return base
        case _:
            assert_never(cause)


def other_access_label(rule: Rule | int) -> str:
    """How the report names the other access: "Previous", "In-flight" or "Other"."""
    try:
        rule = Rule(rule)
    except ValueError:
        return "Other"
    match rule:
        case Rule.RAW_UNPUBLISHED | Rule.WAR_REUSE | Rule.WAW | Rule.WAW_SAME_VALUE:
            return "Previous"
        case Rule.DMA_READ_BEFORE_WAIT | Rule.WAIT_TOO_WEAK | Rule.DMA_OVERLAP | Rule.CLUSTER_COPY_UNORDERED:
            return "In-flight"
        case (
            Rule.DMA_NEVER_WAITED | Rule.BARRIER_DIVERGENCE | Rule.UNINIT_READ | Rule.OOB
            | Rule.MISSING_RELEASE | Rule.MISSING_ACQUIRE | Rule.ISA_STORE_UNWAITED_AT_SIGNAL
            | Rule.ISA_WAIT_BELOW_INTENT | Rule.ISA_USE_BEFORE_WAIT
        ):
            return "Other"
        case _:
            assert_never(rule)
