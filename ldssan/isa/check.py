"""ISA-level findings on a kernel's compiled code (rules LDS050..; LDS052 in registers.py).

LDS050 isa-store-unwaited-at-signal: an `s_barrier_signal` (or the unsplit `s_barrier`)
reached, on some path, while an LDS write may still be in flight on dscnt. What the
barrier publishes is what the wave has completed, so such a store is not published
(aiter #6344: each `ds_store_b32` followed by `s_barrier_signal` with no `s_wait_dscnt`).

LDS051 isa-wait-below-intent: a hand-written `s_wait_<cnt> N` that retires an op on every
IR path but, on some compiled path, has fewer than N younger ops after it (aiter #6170);
the analysis is intent.py, run when the build carries its IR.
"""

from __future__ import annotations

from dataclasses import replace

from ldssan.runtime.records import Rule

from .asm import Instr, Kernel, parse_kernel, with_offsets
from .capture import Build
from .counters import walk, writes_lds
from .findings import Finding, KernelResult
from .intent import IntentUnavailable, gaps, kernel_intent
from .registers import REMAPS_VGPRS, use_before_wait


def _is_signal(ins: Instr) -> bool:
    return ins.mnemonic == "s_barrier" or ins.mnemonic.startswith("s_barrier_signal")


def store_unwaited_at_signal(kernel: Kernel) -> list[Finding]:
    found: dict[tuple[int, int], Finding] = {}
    for ins, state in walk(kernel):
        if not _is_signal(ins):
            continue
        for op, younger in sorted(state.get("dscnt", {}).items()):
            store = kernel.instrs[op]
            if writes_lds(store) and (op, ins.index) not in found:
                cause = (f"on some path no s_wait_dscnt retires the store before the signal "
                         f"(s_wait_dscnt {younger} right before the signal would)")
                found[(op, ins.index)] = Finding(Rule.ISA_STORE_UNWAITED_AT_SIGNAL, kernel.name, ins, store, cause)
    return list(found.values())


def check_kernel(kernel: Kernel) -> tuple[list[Finding], list[str]]:
    """Every finding, and a note for each class that could not be checked (never silent)."""
    findings, notes = store_unwaited_at_signal(kernel), []
    if any(i.mnemonic == REMAPS_VGPRS for i in kernel.instrs):
        notes.append(f"LDS052 not checked: {REMAPS_VGPRS} remaps VGPR numbers")
    else:
        findings += use_before_wait(kernel)
    return findings, notes


def wait_below_intent(kernel: Kernel, ir: str) -> tuple[list[Finding], list[str]]:
    """LDS051 findings against the build's IR, or a note saying why it was not checked."""
    if not ir:
        return [], ["LDS051 not checked: the build has no IR dump to take the waits' intent from"]
    try:
        table = kernel_intent(ir, kernel.name)
    except IntentUnavailable as exc:
        return [], [f"LDS051 not checked: {exc}"]
    found = []
    for g in gaps(kernel, table):
        wait = f"s_wait_{g.counter} {g.count}"
        if g.younger < g.count:
            follow = "follows" if g.younger == 1 else "follow"
            compiled = f"on some compiled path only {g.younger} {follow}"
        else:  # enough follow, but the compiled op is FLAT: out of order, only a wait for 0 retires it
            compiled = f"the compiled op is {g.op.mnemonic}, which completes out of order"
            g = replace(g, younger=0)
        cause = (f"on every IR path at least {g.count} {g.counter} ops follow the op, so {wait} retires it; "
                 f"{compiled}, so it is still in flight after the wait "
                 f"(s_wait_{g.counter} {g.younger} would retire it)")
        found.append(Finding(Rule.ISA_WAIT_BELOW_INTENT, kernel.name, g.wait, g.op, cause))
    return found, []


def check_build(build: Build, *, offsets: bool = True) -> KernelResult:
    kernel = parse_kernel(build.isa, build.kernel)
    note = "byte offsets not measured"
    if offsets:
        kernel, note = with_offsets(kernel, build.elf)
    findings, notes = check_kernel(kernel)
    intent_findings, intent_notes = wait_below_intent(kernel, build.ir)
    return KernelResult(build.kernel, len(kernel.instrs), note, tuple(findings + intent_findings),
                        tuple(notes + intent_notes))
