"""The ISA verdict next to the IR-level sanitizer's, for one kernel call: agree / ISA-only /
IR-only, with the reason.

LDS050 (a store in flight at a signal in the compiled code) is the ISA image of the IR
findings about unpublished stores at a split barrier: LDS040 missing-release, and any race
(LDS001/2/3) whose cause is the store not being dscnt-complete at the signal or a bare
barrier (which rule the race gets depends on what the other wave did next).
Every other IR rule (a deleted barrier, TDM/async waits, reuse, uninitialised reads) is
outside what the ISA check models today, so such a bug is "IR-only" with that reason.
LDS052 (a register used before the compiler's wait for its load) has no IR counterpart: the
IR has no such waits, so it is "ISA-only" whenever it fires. LDS051 (a hand-written wait
that retires an op in the IR but not in the compiled code) is invisible to the IR-level
check by construction (in the IR the wait does retire it): "ISA-only", unless the row
already agrees on LDS050, whose reason then names it.
"""

from __future__ import annotations

from ldssan.runtime.records import Cause, Rule

from .findings import KernelResult

_RELEASE_CAUSES = (Cause.UNPUBLISHED_DS_STORE, Cause.BARE_BARRIER)


def _release_class(v) -> bool:
    return v.rule == Rule.MISSING_RELEASE or v.cause in _RELEASE_CAUSES


def _store_line(v) -> int | None:
    """The IR store a release-class finding names: LDS040's own site (its other site is
    the barrier), a race's other (previous) access."""
    site = v.site if v.rule == Rule.MISSING_RELEASE else v.other_site
    return None if site is None else site.line


def _below_reason(below) -> str:
    f = below[0]
    return (f"LDS051: the hand-written wait on line {f.this.line} retires the op of line {f.other.line} on "
            "every IR path, so the IR-level check sees it retired, but the compiled code leaves it in flight")


def compare(isa: list[KernelResult], violations) -> dict:
    """One row: the ISA findings, the IR rules, the class and why."""
    late = [f for r in isa for f in r.findings if f.rule == Rule.ISA_USE_BEFORE_WAIT]
    below = [f for r in isa for f in r.findings if f.rule == Rule.ISA_WAIT_BELOW_INTENT]
    findings = [f for r in isa for f in r.findings if f.rule == Rule.ISA_STORE_UNWAITED_AT_SIGNAL]
    isa_stores = sorted({f.other.line for f in findings if f.other.line})
    ir_release = [v for v in violations if _release_class(v)]
    ir_stores = sorted({line for v in ir_release if (line := _store_line(v)) is not None})
    ir_codes = sorted({v.code for v in violations})
    row = {"isa": sorted({f.rule.code for f in findings + late + below}), "isa_store_lines": isa_stores,
           "ir": ir_codes, "ir_release_other_lines": ir_stores}
    if late:
        row.update(verdict="ISA-only", reason=(
            f"LDS052 at {late[0].this.where()}: a compiler-placed wait comes after the use of a "
            "loaded register, which the IR (which has no such waits) cannot show"))
    elif below and not (findings and ir_release):
        row.update(verdict="ISA-only", reason=_below_reason(below))
    elif not findings and not violations:
        row.update(verdict="agree", reason="both clean")
    elif findings and ir_release:
        same = bool(set(isa_stores) & set(ir_stores))
        row.update(verdict="agree", reason=(
            "both report the store left unpublished at the barrier"
            + ("" if same else f" (store lines differ: ISA {isa_stores}, IR {ir_stores})")
            + (f"; ISA only: {_below_reason(below)}" if below else "")))
    elif findings:
        row.update(verdict="ISA-only", reason=(
            "the compiled code runs s_barrier_signal with the store in flight; the IR-level check "
            + ("saw a fenced or waited barrier there" if not violations
               else f"reported only {', '.join(ir_codes)}")))
    elif ir_release:
        row.update(verdict="IR-only", reason=(
            "the IR-level store is unpublished at the barrier, but the backend's code retires it "
            "(an s_wait_dscnt it placed covers the store)"))
    else:
        row.update(verdict="IR-only", reason=(
            f"{', '.join(ir_codes)}: not a store in flight at a barrier signal, which is what the "
            "ISA check (LDS050) models"))
    return row
