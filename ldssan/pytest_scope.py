"""The pytest plugin's kernel scope and suppressions (docs/scope-and-suppressions.md): each
test's scope (the session's, narrowed or turned off by its `ldssan` marker), the launches
it left unchecked, the reports suppressions cover, and their lines in the summary and the
report file. Per-test counts live in the report's `tests` entries, so pytest-xdist workers
merge them like the others."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from . import scope  # light: suppress and decode load numpy, so they are imported when used

MARKER = "@pytest.mark.ldssan"
# per-test counts (the report's `tests` entries): launches a scope left unchecked, by whose scope
KERNELS_KEY, MARKER_KEY, SUPPRESSED_KEY = "outside_kernels", "outside_marker", "suppressed"


def marker_scope(item, session: scope.Scope | None) -> scope.Scope | None:
    """The scope of the test `item`: `ldssan(False)` / `ldssan(check=False)` checks nothing;
    `ldssan(kernels=...)` narrows the session's scope; otherwise the session's. A marker
    argument of the wrong kind fails the test naming it."""
    marker = item.get_closest_marker("ldssan")
    if marker is None:
        return session
    check = marker.args[0] if marker.args else marker.kwargs.get("check", True)
    if not isinstance(check, bool) or len(marker.args) > 1:
        pytest.fail(f"ldssan: {MARKER}{_args(marker)}: the positional argument is check, True or False",
                    pytrace=False)
    if not check:
        return scope.nothing(f"{MARKER}(check=False)")
    kernels = marker.kwargs.get("kernels")
    if kernels is None:
        return session
    try:
        inner = scope.argument("ldssan marker", kernels, f"{MARKER}(kernels=...)")
    except ValueError as exc:  # ArgumentValueError / ArgumentTypeError name the value
        pytest.fail(str(exc), pytrace=False)
    if inner is None:
        return session
    return inner if session is None else session.narrowed(inner)


def _args(marker) -> str:
    parts = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
    return f"({', '.join(parts)})"


def enter(item, session: scope.Scope | None):
    """Put the test's scope on the process-wide config for its call phase; returns the
    function that puts the old one back. A marker it cannot honour fails the test."""
    from . import hook
    from .runtime.emu import frontend

    cfg = frontend.current()
    mine = marker_scope(item, session)
    if mine is not session:
        try:
            scope.refuse_hardware(mine, hook.engine() or "python")
        except ValueError as exc:
            pytest.fail(str(exc), pytrace=False)
    scope.SKIPPED.take()
    if cfg is None:
        return lambda: None
    old, cfg.scope = cfg.scope, mine

    def restore() -> None:
        cfg.scope = old

    return restore


def count_skipped(entry: dict, session: scope.Scope | None) -> None:
    """The launches a scope left out since `test_scope` opened, into the test's entry."""
    by = Counter(KERNELS_KEY if session is not None and src == session.source else MARKER_KEY
                 for src, _kernels in scope.SKIPPED.take())
    entry[KERNELS_KEY], entry[MARKER_KEY] = by[KERNELS_KEY], by[MARKER_KEY]


def mark(results, entries, hits: Counter) -> None:
    """Each launch's report with the suppressed violations marked (in place: the session
    keeps these results); a malformed inline comment fails the test naming its line."""
    from . import suppress

    try:
        for r in results:
            r.report = suppress.mark(r.report, entries, hits)
    except suppress.SuppressionError as exc:
        pytest.fail(str(exc), pytrace=False)


def unsuppressed(report):
    """`report` without its suppressed violations: what fails a test and what it prints."""
    return replace(report, violations=tuple(v for v in report.violations if v.suppression is None))


# -- the session's summary and report file ---------------------------------------------


def totals(per_test: dict) -> Counter:
    out = Counter()
    for entry in per_test.values():
        for key in (KERNELS_KEY, MARKER_KEY, SUPPRESSED_KEY):
            out[key] += entry.get(key, 0)
    return out


def left_out(per_test: dict) -> int:
    """Launches a scope (the session's or a marker's) left unchecked."""
    n = totals(per_test)
    return n[KERNELS_KEY] + n[MARKER_KEY]


def stale_entries(settings: dict, hits: Counter) -> list:
    from . import suppress

    return suppress.stale(settings.get("suppression_entries", ()), hits)


def summary_lines(settings: dict, per_test: dict, hits: Counter, kernels_flag: str) -> list[tuple[str, bool]]:
    """(text, is a warning) lines for the terminal summary."""
    n = totals(per_test)
    lines = []
    if n[KERNELS_KEY]:
        lines.append((f"ldssan: {n[KERNELS_KEY]} launches not checked: outside {kernels_flag}", False))
    if n[MARKER_KEY]:
        lines.append((f"ldssan: {n[MARKER_KEY]} launches not checked: a test's {MARKER} marker", False))
    if n[SUPPRESSED_KEY]:
        lines.append((f"ldssan: {n[SUPPRESSED_KEY]} suppressed (they fail no test; marked in the report)", False))
    for e in stale_entries(settings, hits):
        lines.append((f"ldssan: suppression {e.where}: {e.text}: matched nothing in this run (stale)", True))
    return lines


def report_extra(settings: dict, per_test: dict, hits: Counter, kernels_flag: str) -> dict:
    """The report file's `scope` and `suppressions` objects."""
    n = totals(per_test)
    entries = settings.get("suppression_entries", ())
    session = settings.get("kernels")
    return {
        "scope": {"kernels": None if session is None else session.text,
                  "not_checked": left_out(per_test),
                  "by_source": {kernels_flag: n[KERNELS_KEY], MARKER: n[MARKER_KEY]}},
        "suppressions": {"file": settings.get("suppressions") or None, "suppressed": n[SUPPRESSED_KEY],
                         "entries": [{"where": e.where, "text": e.text, "matched": hits[e.where]} for e in entries],
                         "stale": [f"{e.where}: {e.text}" for e in stale_entries(settings, hits)]},
    }


def stale_notes(settings: dict, hits: Counter) -> list[tuple[str, str]]:
    """Stale entries as warning notifications of the report (stale suppressions rot)."""
    return [("warning", f"ldssan: suppression {e.where}: {e.text}: matched nothing in this run (stale)")
            for e in stale_entries(settings, hits)]
