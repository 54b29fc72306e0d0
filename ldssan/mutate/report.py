"""Formatters over campaign records: JSON, Markdown and the rich live view. No logic here
beyond layout; the numbers come from `records.summarize`."""

from __future__ import annotations

import json

from .campaign import Listener
from .records import CampaignRecord, KernelRecord, MutantRecord


def to_json(record: CampaignRecord, indent: int | None = 2) -> str:
    return json.dumps(portable(record.to_dict()), indent=indent)


def portable(data):
    """`data` with every absolute path inside the working directory or an import root written
    relative to it (results are committed and compared across machines)."""
    import os
    import sys

    roots = sorted({os.getcwd(), *(p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p))},
                   key=len, reverse=True)

    def text(s: str) -> str:
        for root in roots:
            s = s.replace(root.rstrip(os.sep) + os.sep, "")
        return s

    if isinstance(data, str):
        return text(data)
    if isinstance(data, dict):
        return {k: portable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [portable(v) for v in data]
    return data


# ----------------------------------------------------------------------------- text pieces

def rate_text(rate: dict, interval: bool = True) -> str:
    if not rate["n"]:
        return "–"
    text = f"{rate['k']}/{rate['n']} = {100 * rate['rate']:.0f}%"
    if interval:
        lo, hi = rate["wilson95"]
        text += f" [{100 * lo:.0f}–{100 * hi:.0f}%]"
    return text


def _code(text: str) -> str:
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


_DELETED = "pass  # ldssan variant: deleted"


def change_text(m: MutantRecord) -> str:
    """The one-line diff: `old` → `new` (L), or the two lines a move swaps."""
    if len(m.edits) == 1:
        e = m.edits[0]
        if e["after"].startswith(_DELETED):
            return f"L{e['line']}: {_code(e['before'])} deleted"
        return f"L{e['line']}: {_code(e['before'])} → {_code(e['after'])}"
    a, b = m.edits[0], m.edits[1]
    return f"L{a['line']}–{b['line']}: {_code(a['before'])} moved below {_code(b['before'])}"


def rules_text(m: MutantRecord, limit: int = 2) -> str:
    if m.sanitizer is None:
        return "–"
    if not m.rules:
        return "missed"
    parts = []
    for r in m.rules[:limit]:
        other = f" vs L{r['other_line']}" if r.get("other_line") else ""
        parts.append(f"{r['code']} {r['name']} @L{r['line']}{other}")
    more = f" (+{len(m.rules) - limit})" if len(m.rules) > limit else ""
    return "; ".join(parts) + more


def lint_text(m: MutantRecord) -> str:
    if m.lint is None:
        return "–"
    if not m.lint_rules:
        return "none new"
    return "; ".join(f"{r['code']} {r['name']} @L{r['line']}" + (f" vs L{r['other_line']}" if r.get("other_line") else "")
                     for r in m.lint_rules)


def why_text(m: MutantRecord) -> str:
    """Why an equivalent mutant is one, why no rule saw a survivor, or what an output-only
    kill is (not a sync bug, or a missed one and the condition that failed)."""
    return m.equivalence or m.reason or m.not_sync_bug or m.missed_sync


def output_first_text(m: MutantRecord) -> str:
    if m.output_first is None:
        return "–"
    return "caught" if m.output_first else "missed"


def output_k_text(m: MutantRecord) -> str:
    if m.status not in ("killed", "survived"):
        return "–"
    text = f"{m.output_fails}/{m.output_launches} failed"
    if m.output_errors:
        text += f", {m.output_errors} raised"
    return text


def status_text(m: MutantRecord) -> str:
    if m.status == "survived" and m.survivor_class:
        return f"survived ({m.survivor_class.replace('-', ' ')})"
    if m.status in ("killed", "survived"):
        return m.status
    detail = f": {m.error.split(':', 1)[0]}" if m.error and m.status in ("crashed", "hang", "not-compiled") else ""
    return m.status + detail


def summary_text(record: CampaignRecord) -> str:
    """A few plain lines per kernel, for the terminal."""
    k_launches = record.config["launches"]
    out = []
    rows = [(k.name, k) for k in record.kernels] + [("all", None)]
    for name, k in rows:
        if k is not None and k.status not in ("ran", "no-mutants"):
            out.append(f"{name}: {k.status}: {k.message}")
            continue
        s = k.summary() if k is not None else record.summary()
        out.append(f"{name}: {s['mutants']} mutants, {s['counted']} ran ({s['equivalent']} equivalent by construction"
                   f" [{s['equivalent_ir']} identical IR, {s['equivalent_strengthening']} only strengthen sync], "
                   f"{s['not_compiled']} not compiled, {s['hang']} hung, {s['crashed']} crashed, "
                   f"{s['timeout']} timed out), {s['seconds']:.1f} s")
        out.append(f"  killed by the sanitizer (1 launch)     {rate_text(s['killed_by_sanitizer'])}")
        out.append(f"  killed by output check, 1 launch       {rate_text(s['killed_by_output_1'])}")
        out.append(f"  killed by output check, K={k_launches:<3} launches {rate_text(s['killed_by_output_k'])}")
        out.append(f"  killed by the lint (LDS040/LDS041)     {rate_text(s['killed_by_lint'])}")
        out.append(f"  sanitizer + lint over sync mutants     {rate_text(s['killed_by_sanitizer_or_lint_sync'])}"
                   f" ({s['not_sync_bug']} not a sync bug, {s['missed_sync_bug']} missed sync bug, "
                   f"{s['no_sync_change']} survivors with no sync change)")
        out.append(f"  killed or sync redundant, sync mutants {rate_text(s['explained_sync'])}"
                   f" ({s['sync_redundant']} sync redundant on the cases run, {s['unexplained']} unexplained)")
        out.append(f"  sanitizer only {s['sanitizer_only']}, output check only {s['output_only']}, "
                   f"lint only {s['lint_only']}, survived all {s['survived']}")
    return "\n".join(out)


# ----------------------------------------------------------------------------- Markdown

_SUMMARY_HEAD = ("| kernel | mutants | ran | killed by sanitizer (1 launch) | killed by output check, 1 launch "
                 "| killed by output check, K launches | killed by lint | sanitizer only "
                 "| sanitizer + lint, sync mutants | killed or sync redundant, sync mutants | not a sync bug "
                 "| no sync change | sync redundant | missed sync bug | unexplained | equivalent (IR / strengthens) "
                 "| not compiled | hang / crash / timeout | time |")
_SUMMARY_COLUMNS = _SUMMARY_HEAD.count("|") - 1


def _summary_row(name: str, s: dict) -> str:
    return (f"| {name} | {s['mutants']} | {s['counted']} | {rate_text(s['killed_by_sanitizer'])} "
            f"| {rate_text(s['killed_by_output_1'])} | {rate_text(s['killed_by_output_k'])} "
            f"| {rate_text(s['killed_by_lint'], interval=False)} | {s['sanitizer_only']} "
            f"| {rate_text(s['killed_by_sanitizer_or_lint_sync'])} | {rate_text(s['explained_sync'])} "
            f"| {s['not_sync_bug']} | {s['no_sync_change']} | {s['sync_redundant']} | {s['missed_sync_bug']} "
            f"| {s['unexplained']} | {s['equivalent']} ({s['equivalent_ir']} / {s['equivalent_strengthening']}) | {s['not_compiled']} "
            f"| {s['hang']} / {s['crashed']} / {s['timeout']} | {s['seconds']:.1f} s |")


def summary_markdown(record: CampaignRecord) -> str:
    cfg = record.config
    ran = [k for k in record.kernels if k.status in ("ran", "no-mutants")]
    schedule = ran[0].schedule if ran else []
    lines = [
        f"Sanitizer: one launch per case under `{cfg['policy']}`. Output check: K = {cfg['launches']} launches "
        f"per case ({', '.join(f'`{p}`' for p in schedule)}); \"1 launch\" is the first of them. Rates are over the "
        "mutants that ran, with Wilson 95% intervals; equivalent-by-construction (instrumented IR identical to "
        "the clean kernel's, or a survivor whose diff only strengthens synchronization), not-compiled, hung, "
        "crashed and timed-out mutants are classified, not counted. \"Killed by lint\" counts new static "
        "fence-pairing findings (LDS040/LDS041), apart from the sanitizer's runtime kills. \"Not a sync bug\": "
        "killed by the output check only, with no racing pair, the clean kernel's synchronization skeleton or a "
        "stronger one, and one verdict under every schedule of each case (ldssan/mutate/syncbug.py) — a value "
        "change, left to the output check and out of the sanitizer's target (\"sanitizer + lint, sync mutants\"); "
        "\"missed sync bug\": every other output-only kill. Survivors: \"no sync change\" when they pass the same "
        "criterion with the right output (also out of the target); \"sync redundant\" when they delete, move or "
        "unfence a barrier that, by the clean kernel's reliance table (ldssan/mutate/reliance.py), orders no "
        "conflicting cross-wave LDS pair this change unorders on the cases run; \"unexplained\": the other "
        "survivors and the missed sync bugs. "
        "Times are worker seconds per kernel and wall-clock seconds overall "
        f"(engine {record.engine['name']}, {record.engine['workers']} workers, {record.machine.get('cores')} cores)"
        + (f"; {record.resumed} mutant results resumed from the store." if record.resumed else "."),
        "",
        _SUMMARY_HEAD,
        "|" + "---|" * _SUMMARY_COLUMNS,
    ]
    for k in record.kernels:
        if k.status in ("ran", "no-mutants"):
            lines.append(_summary_row(k.name, k.summary()))
        else:
            lines.append(f"| {k.name} | {k.status}: {k.message.replace('|', '/')} |" + " |" * (_SUMMARY_COLUMNS - 2))
    overall = record.summary()
    lines.append(_summary_row("**all**", overall))
    return "\n".join(lines)


def _shown_path(path: str) -> str:
    """Relative to the working directory when inside it, else to its import root (an
    installed package's file as `flydsl/...`): tables go into READMEs, not machine paths."""
    import os
    import sys

    if not path:
        return path
    rel = os.path.relpath(path)
    if not rel.startswith(".."):
        return rel
    roots = [p for p in sys.path if p and os.path.isabs(p) and path.startswith(p.rstrip(os.sep) + os.sep)]
    return os.path.relpath(path, max(roots, key=len)) if roots else path


def kernel_markdown(k: KernelRecord) -> str:
    lines = [f"### {k.name}", ""]
    if k.status not in ("ran", "no-mutants"):
        lines.append(f"**{k.status}**: {k.message}")
        return "\n".join(lines)
    lines += [f"`{_shown_path(k.path)}`; cases: {', '.join(k.cases)}.", "",
              "| mutant | change | sanitizer (rule @ line) | lint (new) | output, 1 launch | output, K launches "
              "| status | why (equivalent / survivor / output only) |",
              "|---|---|---|---|---|---|---|---|"]
    for m in k.mutants:
        lines.append(f"| {m.id} | {change_text(m)} | {rules_text(m)} | {lint_text(m)} | {output_first_text(m)} "
                     f"| {output_k_text(m)} | {status_text(m)} | {why_text(m).replace('|', '/')} |")
    return "\n".join(lines)


def to_markdown(record: CampaignRecord) -> str:
    verdict = "" if record.ok else ("\n**The campaign stopped at a clean baseline:** "
                                    + "; ".join(f"{k.name}: {k.message}" for k in record.kernels
                                                if k.status == "baseline-failed") + "\n")
    if record.interrupted:
        done, total = record.finished()
        verdict += (f"\n**Partial: interrupted by {record.interrupted}** after {done} of {total} mutants; "
                    f"the others are listed as pending.\n")
    parts = ["## ldssan mutation campaign", verdict, summary_markdown(record), ""]
    parts += [kernel_markdown(k) + "\n" for k in record.kernels]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- rich

class LiveView(Listener):
    """A progress bar and a table of finished mutants, on stderr, while the campaign runs."""

    def __init__(self, console=None) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.live = None

    def __enter__(self):
        from rich.console import Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Table

        self.progress = Progress(TextColumn("[bold]ldssan mutate"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.description}"), console=self.console)
        self.task = self.progress.add_task("planning", total=None)
        self.table = Table(show_edge=False, pad_edge=False)
        for col in ("kernel", "mutant", "sanitizer", "out 1", "out K", "status", "s"):
            self.table.add_column(col, overflow="fold", no_wrap=col in ("mutant", "status"))
        self.live = Live(Group(self.progress, self.table), console=self.console, refresh_per_second=4,
                         transient=False)
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.live.__exit__(*exc)
        if not self.console.is_terminal:
            self.console.line()
        return False

    def planned(self, kernels):
        total = sum(1 + len(k.mutants) for k in kernels if k.status != "skipped")
        self.progress.update(self.task, total=total, description="clean baselines")

    def message(self, text):
        self.console.print(f"[yellow]{text}")

    def baseline(self, kernel):
        self.progress.advance(self.task)
        if kernel.status == "baseline-failed":
            self.progress.advance(self.task, len(kernel.mutants))
            self.console.print(f"[red]{kernel.name}: clean baseline failed: {kernel.message}")
        self.progress.update(self.task, description=f"{kernel.name}: baseline {kernel.status}")

    def mutant(self, kernel, m):
        self.progress.advance(self.task)
        style = {"killed": "green", "survived": "red"}.get(m.status, "yellow")
        found = m.rules or m.lint_rules
        rule = found[0]["code"] + " " + found[0]["name"] if found else ("missed" if m.sanitizer is False else "–")
        self.table.add_row(kernel.name, m.id, rule, output_first_text(m), output_k_text(m).replace(" failed", ""),
                           f"[{style}]{m.status}", f"{m.seconds:.1f}")
        self.progress.update(self.task, description=m.id)


def dry_run_text(plans) -> str:
    """Every candidate site: per kernel, each mutant's id, operator, note and diff."""
    out = []
    for spec, target, mutants, note in plans:
        if target is None:
            out.append(f"{spec}: {note}")
            continue
        ops = sorted({m.operator for m in mutants})
        out.append(f"{spec} ({target.path}): {len(mutants)} mutants, operators: {', '.join(ops) or '-'}")
        for m in mutants:
            out.append(f"  {m.id:28} {m.operator:20} line {m.line:<5} {m.note}")
            out.extend("      " + d for d in m.diff().splitlines())
    return "\n".join(out)
