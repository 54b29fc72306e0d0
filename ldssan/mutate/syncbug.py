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
   copy (an asynchronous write) is added. A sync site may be missing only with all the
   code around it: when no site at all (access or sync) of the function it belongs to is
   in the mutant's IR, a trace-time branch (`if bits == 1:` on a Python int) now builds
   another algorithm, whose own synchronization condition 1 checks. Or, whatever its
   skeleton, the independent pair check of its own launches (reliance.py: every conflicting
   cross-wave ds byte pair, by barrier phase; kernels without copies) finds none unordered:
   a second race check, independent of the engine, agrees that its execution is race-free;
3. **a schedule-independent wrong output**: for each case, the output check gave the same
   verdict on all of its K launches (across wave orders and copy-completion timings), and
   some case failed. Cases differ in their inputs, so one may fail while another passes.

Then the happens-before order of the LDS accesses is the clean kernel's or stronger, no pair
races, and the wrong output does not depend on the schedule: the mutant computes a different
function (a lane guard dropped, the wrong initialized buffer read, one extra pass over a
published slot). It stays a kill of the output check, reported in its own column; the
sanitizer's target (every live mutant that changes synchronization) excludes it.

Anything else the output check kills and the sanitizer misses is a **missed sync bug**:
`sync_bug_reason` says which condition failed.

Survivors (nothing killed them, and their diff does not only strengthen synchronization)
are explained the same way (`survivor_class`):

* **no sync change**: conditions 1 and 2 hold and the output is right on all K launches:
  the mutant keeps every ordering and computes the same result on these cases;
* **sync redundant on the cases run**: it deletes, moves or unfences a barrier, and the
  clean kernel's reliance table (reliance.py, computed from the clean kernel's accesses,
  not by the engine) shows that no conflicting cross-wave pair this mutation unorders
  exists on the cases run;
* otherwise it stays an unexplained survivor.
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
    the originals (a variant's file is named by the file it edits), lines the original's.

    Beside it, which code was built: `fn|file|function` counts the sites (of any kind) whose
    call chain passes through that function, and `owner|file|line|function` names the
    function of each ordering site (`skeleton_change` uses them for a removed code path)."""
    from ldssan.variants import original_path

    seen, out = set(), Counter()
    for result in results:
        if id(result.sites) in seen:  # one table per build; a second launch of it adds nothing
            continue
        seen.add(id(result.sites))
        for site in result.sites.values():
            name = os.path.basename(original_path(site.file or ""))
            if site.kind in ORDERING_KINDS or site.kind in COPY_KINDS:
                out[f"{site.kind}|{site.op}|{name}|{site.line}"] += 1
                out[f"owner|{name}|{site.line}|{site.function}"] = 1
            frames = {(name, site.function), *((os.path.basename(original_path(f.file or "")), f.function)
                                               for f in site.chain)}
            for file, fn in frames:
                if fn:
                    out[f"fn|{file}|{fn}"] += 1
    return dict(out)


def _skeleton(sites: dict[str, int]) -> dict[str, int]:
    return {k: n for k, n in sites.items() if k.split("|", 1)[0] in ORDERING_KINDS | COPY_KINDS}


def _not_built(clean: dict[str, int], mutant: dict[str, int], name: str, line: str) -> bool:
    """Every function an ordering site of `name:line` belongs to has no site at all in the
    mutant: the code path was removed when the kernel was built, not left unsynchronized."""
    owners = [k.split("|", 3)[3] for k in clean if k.startswith(f"owner|{name}|{line}|")]
    return bool(owners) and all(fn and not mutant.get(f"fn|{name}|{fn}", 0) for fn in owners)


def skeleton_change(clean: dict[str, int], mutant: dict[str, int]) -> str | None:
    """Why the mutant's sync skeleton is weaker than or different from the clean one, or
    None when it is the same, only adds waits and barriers, or lost only sync sites of code
    it no longer builds (a trace-time branch taken the other way: `_not_built`)."""
    for key, n in sorted(_skeleton(clean).items()):
        if mutant.get(key, 0) < n:
            kind, op, name, line = key.split("|")
            if not _not_built(clean, mutant, name, line):
                return f"a {kind} site ({op}, {name}:{line}) is gone ({n} -> {mutant.get(key, 0)})"
    for key, n in sorted(_skeleton(mutant).items()):
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


def sync_change(rec, clean_sync: dict[str, int] | None, mutant_sync: dict[str, int] | None) -> str | None:
    """How the mutant changes synchronization (an edited sync statement, a weaker or other
    skeleton), or None when it keeps the clean kernel's skeleton or a stronger one."""
    if clean_sync is None or mutant_sync is None:
        return "no sync skeleton recorded (a store written before it was kept)"
    return _edits_sync_statement(rec.edits) or skeleton_change(clean_sync, mutant_sync)


def schedule_dependence(launches: list[dict]) -> str | None:
    """None when every case's output check gave one verdict on all its launches (some cases
    may fail, others pass: the inputs differ, not the schedule); else which case varied."""
    by_case: dict[str, set] = {}
    for launch in launches:
        by_case.setdefault(launch["case"], set()).add("raised" if launch["error"] else launch["ok"])
    for case, verdicts in by_case.items():
        if len(verdicts) > 1 or "raised" in verdicts:
            bad = sum(1 for x in launches if x["case"] == case and x["ok"] is not True)
            total = sum(1 for x in launches if x["case"] == case)
            return f"case {case} failed on {bad}/{total} launches only: the wrong result depends on the schedule"
    return None


def sync_bug_reason(rec, clean_sync: dict[str, int] | None, mutant_sync: dict[str, int] | None,
                    launches: list[dict] | None = None, mutant_table: dict | None = None) -> str | None:
    """None when `rec` (a mutant record the output check killed) is not a sync bug by the
    module's criterion; else the first condition that fails. `launches`: the output-check
    launches ({case, ok, error}); without them all K launches must fail. `mutant_table`: the
    mutant's own reliance table; when it shows no unordered pair (and the kernel has no
    copies), a changed skeleton does not fail condition 2: two independent checks (the
    engine's and the pair check's) found its execution race-free."""
    if rec.sanitizer or rec.lint:
        return "a runtime or lint rule fired"
    why = sync_change(rec, clean_sync, mutant_sync)
    if why and _race_free(mutant_table) is None:
        return why
    if launches is not None:
        return schedule_dependence(launches)
    if rec.output_fails < rec.output_launches or rec.output_errors:
        return (f"the output failed on {rec.output_fails}/{rec.output_launches} launches only: "
                f"the wrong result depends on the schedule")
    return None


NOT_A_SYNC_BUG = ("not a sync bug: no racing pair, the synchronization skeleton of the clean kernel "
                  "(or a stronger one, or none for code it no longer builds){pairs}, and the same verdict under all "
                  "{k} schedules of each case: a value change")
RACE_FREE_PAIRS = (" or, with another skeleton, no unordered conflicting cross-wave pair in the independent "
                   "pair check of its own launches")


NO_SYNC_CHANGE = ("no sync change: no racing pair, no sync statement edited, the clean kernel's synchronization "
                  "skeleton (or a stronger one), and the right output on all {k} launches: equivalent on the "
                  "cases run")


def _race_free(table: dict | None) -> tuple[str, str] | None:
    """The mutant's own reliance table shows no unordered conflicting cross-wave pair (ds
    accesses and barriers only: a kernel with copies is not judged)."""
    if not table or table.get("skipped") or table.get("copies") or table.get("unordered", 1):
        return None
    return "sync-redundant", ("sync redundant on the cases run: its synchronization differs from the clean kernel's, "
                              "but the independent pair check of its own launches (reliance table: every conflicting "
                              "cross-wave LDS byte pair, by barrier phase) finds none unordered, and the output is "
                              "right on every launch")


def survivor_class(rec, clean_sync, mutant_sync, table: dict | None, kernel_file: str,
                   mutant_table: dict | None = None) -> tuple[str, str] | None:
    """("no-sync-change" | "sync-redundant", why) for a survivor the criteria explain, else None.
    `table`: the clean kernel's reliance table; `mutant_table`: the survivor's own."""
    from .reliance import affected

    if rec.sanitizer or rec.lint or rec.output_fails or rec.output_errors:
        return None
    if sync_change(rec, clean_sync, mutant_sync) is None:
        return "no-sync-change", NO_SYNC_CHANGE.format(k=rec.output_launches)
    verdict = affected(table or {}, kernel_file, rec.operator, rec.edits)
    if verdict is None:
        return _race_free(mutant_table)
    hit, instances = verdict
    if hit and rec.operator == "raw-split-barrier":
        # the execution barrier stays, so the pair check of its own launches cannot see what
        # the lost fences ordered: unexplained, with the pairs that needed them
        rec.reason += "; " + _unfenced(hit)
        return None
    if hit:
        return _race_free(mutant_table)
    bar = rec.edits[1]["line"] if rec.operator == "store-below-barrier" else rec.edits[0]["line"]
    base = os.path.basename(kernel_file)
    relying = [p for p in table["pairs"] if f"{base}:{bar}" in p["barrier"]]
    if instances == 0:
        hint = "it never ran on these cases: needs a case that reaches it"
    elif not relying:
        hint = ("every conflicting pair it separates is of one wave, or ordered by another barrier too "
                "(a kill needs a case where two waves share data only this barrier orders)")
    else:
        hint = (f"it orders {sum(p['bytes'] for p in relying)} conflicting byte pair(s), none through the "
                f"moved statement")
    return "sync-redundant", (f"sync redundant on the cases run: the barrier at line {bar} ran {instances} time(s) "
                              f"on the clean kernel's cases and no conflicting cross-wave LDS pair ordered only by "
                              f"it is left unordered by this change (reliance table); {hint}")


def _unfenced(hit: list[dict]) -> str:
    """What a raw split barrier leaves to the fences it lost: the pairs by kind (LDS040 covers a
    store before the signal; LDS041 a load or store after the wait)."""
    kinds = Counter()
    for p in hit:
        kinds[p["kind"]] += p["bytes"]
    text = ", ".join(f"{n} {k.upper()} byte pair(s)" for k, n in sorted(kinds.items()))
    first = hit[0]
    return (f"the barrier orders {text} on the clean kernel's cases (e.g. {first['before'][0]} -> "
            f"{first['after'][0]}) that BAR-MM orders only through both fences")
