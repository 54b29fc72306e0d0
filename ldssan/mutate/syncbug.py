""""Not a sync bug": output-check kills that no synchronization rule could have caught.

A mutant the output check kills and the sanitizer misses is either a sync bug the sanitizer
should see (a gap in the engine) or a value bug that no happens-before rule is about. It is
classified **not a sync bug** when all three hold:

1. **no racing pair**: its sanitized launch has no runtime finding and no lint finding the
   clean kernel lacks. The sanitizer's verdict is policy-independent (the engine applies
   events in a canonical order), so every conflicting pair of LDS accesses of this execution
   is ordered by happens-before;
2. **the same synchronization skeleton, or a stronger one**: the instrumented sync sites of
   its IR — every barrier, counter wait, asyncmark and fence, and every async/TDM copy into
   or out of LDS (kind, op, original file and line, with multiplicity: an unrolled loop
   counts each copy) — are the clean kernel's, plus at most added waits and barriers; and
   the edited line itself is no barrier, wait or fence statement (a changed count keeps
   the site but not its meaning). No ordering the clean kernel relies on is gone and no
   copy (an asynchronous write) is added;
3. **a schedule-independent wrong output**: the output check failed on every one of its K
   launches, across wave orders and copy-completion timings.

Then the happens-before order of the LDS accesses is the clean kernel's or stronger, no pair
races, and the wrong output does not depend on the schedule: the mutant computes a different
function (a lane guard dropped, the wrong initialized buffer read, one extra pass over a
published slot). It stays a kill of the output check, reported in its own column; the
sanitizer's target (every live mutant that changes synchronization) excludes it.

Anything else the output check kills and the sanitizer misses is a **missed sync bug**:
`sync_bug_reason` says which condition failed.
"""

from __future__ import annotations

import os
from collections import Counter

# Site kinds that order or asynchronously perform LDS accesses (ldssan.sitetable kinds).
ORDERING_KINDS = frozenset({"wait", "mark", "barrier", "fence"})
COPY_KINDS = frozenset({"dma_to_lds", "dma_from_lds", "tdm_load", "tdm_store"})
_ADDABLE = frozenset({"wait", "barrier"})  # an added one only blocks longer / adds edges


def sync_sites(results) -> dict[str, int]:
    """The sync skeleton of sanitized launches (`ldssan.hook.Collector.results`): a count
    per `kind|op|file|line` of every ordering and copy site of the instrumented IR. Files are
    the originals (a variant's file is named by the file it edits), lines the original's."""
    from ldssan.variants import original_path

    seen, out = set(), Counter()
    for result in results:
        if id(result.sites) in seen:  # one table per build; a second launch of it adds nothing
            continue
        seen.add(id(result.sites))
        for site in result.sites.values():
            if site.kind in ORDERING_KINDS or site.kind in COPY_KINDS:
                name = os.path.basename(original_path(site.file or ""))
                out[f"{site.kind}|{site.op}|{name}|{site.line}"] += 1
    return dict(out)


def skeleton_change(clean: dict[str, int], mutant: dict[str, int]) -> str | None:
    """Why the mutant's sync skeleton is weaker than or different from the clean one, or
    None when it is the same or only adds waits and barriers."""
    for key, n in sorted(clean.items()):
        if mutant.get(key, 0) < n:
            kind, op, name, line = key.split("|")
            return f"a {kind} site ({op}, {name}:{line}) is gone ({n} -> {mutant.get(key, 0)})"
    for key, n in sorted(mutant.items()):
        kind, op, name, line = key.split("|")
        if n > clean.get(key, 0) and kind not in _ADDABLE:
            return f"a {kind} site is added ({op}, {name}:{line}, {clean.get(key, 0)} -> {n})"
    return None


def _edits_sync_statement(edits: list[dict]) -> str | None:
    from .equivalence import _statements, _sync_call

    for e in edits:
        for stmt in _statements(e["before"]) or []:
            sync = _sync_call(stmt)
            if sync is not None:
                return f"the edit changes the {sync[1].value} statement on line {e['line']}"
    return None


def sync_bug_reason(rec, clean_sync: dict[str, int] | None, mutant_sync: dict[str, int] | None) -> str | None:
    """None when `rec` (a mutant record the output check killed) is not a sync bug by the
    module's criterion; else the first condition that fails."""
    if rec.sanitizer or rec.lint:
        return "a runtime or lint rule fired"
    if clean_sync is None or mutant_sync is None:
        return "no sync skeleton recorded (a store written before it was kept)"
    why = _edits_sync_statement(rec.edits) or skeleton_change(clean_sync, mutant_sync)
    if why:
        return why
    if rec.output_fails < rec.output_launches or rec.output_errors:
        return (f"the output failed on {rec.output_fails}/{rec.output_launches} launches only: "
                f"the wrong result depends on the schedule")
    return None


NOT_A_SYNC_BUG = ("not a sync bug: no racing pair, the synchronization skeleton of the clean kernel "
                  "(or a stronger one), and the same wrong output under all {k} schedules: a value change")
