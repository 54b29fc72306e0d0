"""The user-facing end of one sanitized host call: the runtime's records and site table
decoded into a `Report`, handed to the active collector; or, for a call that raised, the
`LaunchFault` the collector keeps (so a caught fault still reaches the report) and the error
to raise: a fault of ldssan's own code is an `LdssanInternalError` naming the launch."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from typing import Any

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.errors import LdssanError
from ldssan.runtime.records import Cause
from ldssan.runtime.session import SessionOutcome

from . import config, rules
from .decode import LINT_RULES, Report, SiteTable, SiteTableError, Violation, decode_ring


# Where ldssan's own checking code runs during a launch (the engine, the hook adapters and
# the emitter of the hook calls, the batch split, the session, the device runtime's host side,
# the decoder): a Python built-in exception raised there is a bug in ldssan, not a fault of
# the kernel. (NotImplementedError stays the emulator's named UnsupportedOp.)
ENGINE_MODULES = ("ldssan.runtime.shadow", "ldssan.runtime.emu.hooks", "ldssan.runtime.emu.ops.sanitizer",
                  "ldssan.runtime.emu.split", "ldssan.runtime.session", "ldssan.runtime.records",
                  "ldssan.runtime.device", "ldssan.session", "ldssan.decode", "ldssan.sitetable")


class LdssanInternalError(LdssanError, RuntimeError):
    """A fault inside ldssan itself during a launch (its engine, hooks or decoder), not in the
    kernel: the launch was not checked. Its `__cause__` is the original exception."""


@dataclass(frozen=True)
class LaunchFault:
    """A sanitized launch that raised instead of finishing: a kernel fault the emulator
    names (out-of-bounds access, deadlock, timeout, ...) or an ldssan internal error."""

    kernel: str
    launch: int | None
    error: str  # "ErrorType: message", its first line
    internal: bool

    @property
    def text(self) -> str:
        if self.internal:
            return f"ldssan internal error in launch {self.launch} of kernel {self.kernel}: {self.error}"
        return f"launch {self.launch} of kernel {self.kernel} faulted (not checked to its end): {self.error}"


def _raised_in_engine(exc: BaseException) -> BaseException | None:
    """The Python built-in exception behind `exc` (its cause chain) that was raised inside
    ldssan's checking code (`ENGINE_MODULES`), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if not type(exc).__module__.startswith("ldssan.") and not isinstance(exc, NotImplementedError):
            tb = exc.__traceback__
            while tb is not None:
                if tb.tb_frame.f_globals.get("__name__", "").startswith(ENGINE_MODULES):
                    return exc
                tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return None


def launch_fault(exc: Exception, entry: str, sanitizer) -> tuple[LaunchFault, Exception]:
    """The record of a sanitized host call `entry` that raised `exc`, and the error to raise:
    `exc` itself, or an `LdssanInternalError` (cause: the original) for a fault of ldssan."""
    kernel = ", ".join(getattr(sanitizer, "kernels", ()) or ()) or entry
    launch = getattr(sanitizer, "launch", None)
    inner = _raised_in_engine(exc)
    if inner is None:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return LaunchFault(kernel, launch, f"{type(exc).__name__}: {first}", internal=False), exc
    err = LdssanInternalError(
        f"ldssan internal error in launch {launch} of kernel {kernel}: {type(inner).__name__}: {inner} "
        "(a fault in ldssan itself, not in the kernel: the launch was not checked; please report it "
        "with this traceback)")
    err.__cause__ = inner
    for note in getattr(exc, "__notes__", ()):  # where in the kernel it happened
        err.add_note(note)
    return LaunchFault(kernel, launch, f"{type(inner).__name__}: {inner}", internal=True), err


@dataclass
class LaunchResult:
    kernel: str
    report: Report
    launch: int
    sites: SiteTable
    memo: str = ""  # replayed, recorded, not memoizable: <reason> (runtime/emu/memo.py); "": memo off


def decode_outcome(out: SessionOutcome, *, coverage: bool) -> LaunchResult:
    if coverage:
        _print_coverage(out.coverage_json)
    table = site_table(out)
    kernel = ", ".join(out.kernels) or out.entry
    report = decode_ring(out.ring, table, launches=1, kernel=kernel)
    lint = config.get("lint")
    if lint != "off":
        found = lint_violations(json.loads(out.sites_json).get("lint"), table, kernel=kernel,
                                launch=out.launch, severity="error" if lint == "error" else "warning")
        report = replace(report, violations=tuple(sorted(report.violations + found,
                                                         key=lambda v: v.sort_key)))
    return LaunchResult(kernel, report, out.launch, table, memo=out.memo)


def lint_violations(findings: Any, table: SiteTable, *, kernel: str, launch: int,
                    severity: str = "warning") -> tuple[Violation, ...]:
    """The fence-pairing findings the pass put in the site table (`{"code", "access",
    "barrier"}` each, passes/lint.py) as violations: the access and its barrier, no wave."""
    if not isinstance(findings, (list, type(None))):
        raise SiteTableError(f"ldssan: site table 'lint' is a {type(findings).__name__}, not a list")
    out = []
    for i, f in enumerate(findings or ()):
        try:
            rule = rules.lookup(str(f["code"]))
            access, barrier = int(f["access"]), int(f["barrier"])
        except (KeyError, TypeError, ValueError) as e:
            raise SiteTableError(f"ldssan: site table lint[{i}]: bad or missing field: {e}") from None
        if rule not in LINT_RULES:
            raise SiteTableError(f"ldssan: site table lint[{i}]: {rule.code} is not a lint rule")
        out.append(Violation(
            rule=rule, cause=Cause.NONE, site=table.resolve(access), other_site=table.resolve(barrier),
            count=1, message=rules.cause_text(Cause.NONE, rule), lds_offset=0, lds_range=(0, 0),
            buffer=None, wave=None, lane=None, other_wave=None, other_lane=None, workgroup=0,
            launch=launch, extra=0, launches=frozenset({launch}), kernel=kernel, severity=severity,
            build=table.build,
        ))
    return tuple(out)


_COVERAGE_SHOWN: set[str] = register_cache(set())  # reset: a new build's coverage shows again


def _print_coverage(coverage_json: str) -> None:
    """`FLYDSL_LDSSAN_COVERAGE=1`: each kernel build's instrumented sites by kind, once."""
    from ldssan.passes.instrument import coverage_line

    for line in coverage_line(coverage_json):
        if line not in _COVERAGE_SHOWN:
            _COVERAGE_SHOWN.add(line)
            print(line, file=sys.stderr)


def site_table(out: SessionOutcome) -> SiteTable:
    data = json.loads(out.sites_json)
    data["buffers"] = [{"name": b.name, "offset": b.offset, "size": b.size, "file": b.file, "line": b.line}
                       for b in out.buffers]
    return SiteTable.from_json(data)


def memo_counts(results) -> dict:
    """How the launch memo (runtime/emu/memo.py) took these host calls: replayed, recorded
    (run, kept for replay), and not memoizable by reason (run, never kept)."""
    from ldssan.runtime.emu import memo

    out: dict = {"replayed": 0, "recorded": 0, "not_memoizable": {}}
    for r in results:
        reason = memo.refused(r.memo)
        if reason is not None:
            out["not_memoizable"][reason] = out["not_memoizable"].get(reason, 0) + 1
        elif r.memo in (memo.REPLAYED, memo.RECORDED):
            out[r.memo] += 1
    return out


def add_memo_counts(total: dict, more: dict) -> dict:
    """`memo_counts` of two sets of calls together (a pytest-xdist worker's and the rest)."""
    refused = dict(total["not_memoizable"])
    for reason, n in more["not_memoizable"].items():
        refused[reason] = refused.get(reason, 0) + n
    return {"replayed": total["replayed"] + more["replayed"], "recorded": total["recorded"] + more["recorded"],
            "not_memoizable": refused}


def memo_line(counts: dict) -> str | None:
    """The summary line of `memo_counts`, or None when the memo was off for every call."""
    refused = counts["not_memoizable"]
    if not (counts["replayed"] or counts["recorded"] or refused):
        return None
    line = f"ldssan: {counts['replayed']} launches replayed (identical to an earlier one), {counts['recorded']} recorded"
    if refused:
        why = "; ".join(f"{n}: {reason}" for reason, n in sorted(refused.items(), key=lambda kv: -kv[1]))
        line += f", {sum(refused.values())} not memoizable ({why})"
    return line
