"""`ldssan mutate`: the command line of a mutation campaign (registered by `ldssan.cli`)."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from .operators import OPERATORS

DESCRIPTION = """\
Inject one-line LDS synchronization bugs into a FlyDSL kernel, one mutant at a time, and
score the sanitizer (one launch) against an output check (K launches across scheduler
policies and seeds). KERNEL is a module name (ldssan.kernels.rmsnorm) or a .py file; the
module provides `ldssan_cases()` (see ldssan.mutate.target) or is registered in
ldssan.kernels.campaigns, or --pytest FILE::TEST names a test whose launches are the case
and whose assertions are the output check. Kernels whose module does not exist are skipped with a message.

Engines: local worker processes (-j, the default), or dask.distributed with --cluster
local:N (a loopback LocalCluster of N one-thread worker processes) or --cluster
tcp://HOST:PORT (a running scheduler whose workers have the same ldssan and kernel files).
--store PATH appends one JSON line per finished mutant; --resume skips the ones it holds
(same kernel file, mutant id, -k and --policy) and the report is rebuilt from the store.

Exit status: 0 the campaign ran; 1 nothing to run (no kernel found, or no mutant, e.g. an
--only id that --dry-run does not list); 2 a clean baseline failed its gate (no violations
and a passing output check are required before any mutant runs), or a usage error (a bad
option value, an output path that cannot be written, a cluster that cannot be reached, a
store that is not one), printed as one line; 130 / 143 interrupted by SIGINT (Ctrl-C) /
SIGTERM: the workers are stopped, the partial --json/--markdown written (marked partial),
and one line says how many mutants finished and the command that resumes from --store.

A --pytest test runs as under `FLYDSL_LDSSAN=1 pytest`: torch's GPU device is the virtual
gfx1250 (GPU-gated test files run), its package root first on sys.path; a test that is
skipped, raises before launching or launches nothing fails the clean baseline's gate, named.
"""


def _operator_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown operator(s) {', '.join(unknown)}; "
                                         f"registered: {', '.join(OPERATORS)}")
    return names


def _number(kind, low: str):
    """argparse type: a `kind` number > 0 (`low` names the bound in the message)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not 0 < value < float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"{text!r}: expected {low}")
        return value

    return parse


def policy_arg(text: str) -> str:
    """argparse type of a --policy option (here and `ldssan demo`): the canonical policy
    text, or a usage error with the accepted forms."""
    from ldssan.runtime.emu.sched import Policy

    try:
        return str(Policy.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cluster_arg(text: str) -> str:
    from .dask_engine import parse_cluster

    try:
        parse_cluster(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _pytest_arg(text: str) -> str:
    from .pytest_case import PytestCaseError, split_spec

    try:
        split_spec(text)
    except (PytestCaseError, SyntaxError, OSError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(sub) -> None:
    """Add the `mutate` subcommand to an argparse subparsers object."""
    p = sub.add_parser("mutate", help="mutation campaign: one-line sync bugs, sanitizer vs output check",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernels", nargs="*", metavar="KERNEL", help="kernel module name or .py file (several allowed)")
    p.add_argument("--dry-run", action="store_true", help="list every candidate site (operator, line, change) and stop")
    p.add_argument("--list-operators", action="store_true", help="list the mutation operators and stop")
    p.add_argument("--operators", type=_operator_list, default=None, metavar="A,B",
                   help="only these operators (default: all)")
    p.add_argument("--only", default=None, metavar="ID,ID", help="only these mutant ids (as --dry-run prints them)")
    p.add_argument("-k", "--launches", type=_number(int, "an integer >= 1"), default=8, metavar="K",
                   help="output-check launches per case, across scheduler policies and seeds (default 8)")
    p.add_argument("-j", "--jobs", type=_number(int, "an integer >= 1"), default=os.cpu_count() or 1,
                   help="worker processes (default: cores)")
    p.add_argument("--timeout", type=_number(float, "a number of seconds > 0"), default=120.0,
                   help="seconds per mutant before it is a timeout (120)")
    p.add_argument("--policy", default="round-robin", type=policy_arg,
                   help="scheduler policy of the sanitizer's launch")
    p.add_argument("--cluster", type=_cluster_arg, default=None, metavar="local:N|tcp://HOST:PORT",
                   help="run the mutants on dask.distributed (default: local worker processes, -j)")
    p.add_argument("--store", metavar="PATH", help="JSON-lines result store, one line per finished mutant")
    p.add_argument("--resume", action="store_true", help="skip the mutants --store already holds")
    p.add_argument("--pytest", action="append", type=_pytest_arg, default=None, metavar="FILE::TEST",
                   help="take the cases from this pytest test (its launches; its assertions are the output "
                        "check) instead of ldssan_cases(); repeatable")
    p.add_argument("--json", metavar="PATH", help="write the JSON record ('-' for stdout)")
    p.add_argument("--markdown", metavar="PATH", help="write the Markdown summary")
    p.add_argument("--no-live", action="store_true", help="no progress bar / live table")
    p.set_defaults(fn=main)


def _unmatched(only: tuple[str, ...] | None, record) -> list[str]:
    """--only ids that name no planned mutant of any kernel."""
    ids = {m.id for k in record.kernels for m in k.mutants}
    return [i for i in only or () if i not in ids]


def main(args) -> int:
    from rich.console import Console

    from ldssan.report import report_path_problem

    from . import report
    from .campaign import CampaignConfig, plan, run_campaign
    from .dask_engine import ClusterError
    from .interrupt import StopSignals
    from .store import Store, StoreError
    from .target import MissingKernel

    console = Console(stderr=True)
    if args.list_operators:
        for op in OPERATORS.values():
            print(f"{op.name:22} {op.description}\n{'':22} models: {op.model}")
        return 0
    if not args.kernels:
        console.print("[red]ldssan mutate: give at least one KERNEL (module name or .py file)")
        return 1
    for flag, path in (("--json", args.json), ("--markdown", args.markdown)):
        problem = path and path != "-" and report_path_problem(path)
        if problem:
            print(f"ldssan mutate: error: {flag}: {problem}", file=sys.stderr)
            return 2
    if args.resume and not args.store:
        print("ldssan mutate: error: --resume needs --store PATH", file=sys.stderr)
        return 2
    if args.store:
        problem = report_path_problem(args.store)
        if problem is None:
            try:
                Store(args.store)  # read it now: a file that is not a store is a usage error
            except (StoreError, OSError) as exc:
                problem = str(exc)
        if problem:
            print(f"ldssan mutate: error: --store: {problem}", file=sys.stderr)
            return 2
    only = tuple(x.strip() for x in args.only.split(",")) if args.only else None
    if args.dry_run:
        plans = []
        for spec in args.kernels:
            try:
                target, mutants = plan(spec, args.operators, only, args.pytest)
                plans.append((spec, target, mutants, ""))
            except MissingKernel as exc:
                plans.append((spec, None, [], f"skipped: {exc}"))
        print(report.dry_run_text(plans))
        return 0
    config = CampaignConfig(launches=args.launches, jobs=args.jobs, timeout=args.timeout, policy=args.policy,
                            operators=args.operators, only=only, cluster=args.cluster, store=args.store,
                            resume=args.resume, pytest=tuple(args.pytest) if args.pytest else None)
    try:
        with StopSignals() as stop:
            if args.no_live:
                record = run_campaign(args.kernels, config, _Plain(console), stop)
            else:
                with report.LiveView(console) as view:
                    record = run_campaign(args.kernels, config, view, stop)
    except ClusterError as exc:
        print(f"ldssan mutate: error: {exc}", file=sys.stderr)
        return 2
    _write_outputs(args, record)
    if record.interrupted:
        print(interrupted_text(record, args), file=sys.stderr)
        return 128 + signal.Signals[record.interrupted].value
    if not any(k.status != "skipped" for k in record.kernels):
        return 1
    if not record.ok:
        return 2
    unmatched = _unmatched(only, record)
    what = f"--only {', '.join(unmatched)} matched no mutant" if unmatched else "no mutant to run"
    hint = "(`ldssan mutate KERNEL --dry-run` lists the ids)"
    if not any(k.mutants for k in record.kernels):
        print(f"ldssan mutate: nothing to run: {what} {hint}", file=sys.stderr)
        return 1
    if unmatched:
        print(f"ldssan mutate: warning: {what} {hint}", file=sys.stderr)
    return 0


def interrupted_text(record, args) -> str:
    """One line: how far an interrupted campaign got, and how to go on from there."""
    done, total = record.finished()
    partial = [flag for flag, path in (("--json", args.json), ("--markdown", args.markdown)) if path]
    written = f"; partial {' and '.join(partial)} written" if partial else ""
    head = f"ldssan mutate: interrupted by {record.interrupted} after {done} of {total} mutants{written}"
    if not args.store:
        return f"{head}; nothing was kept (no --store): rerun with --store PATH, then --resume runs only the rest"
    argv = list(getattr(args, "argv", None) or ["mutate", *args.kernels, "--store", args.store])
    rerun = shlex.join(["ldssan", *argv, *([] if "--resume" in argv else ["--resume"])])
    return f"{head}; {args.store} keeps them: resume with: {rerun}"


def _write_outputs(args, record) -> None:
    from . import report

    md = report.to_markdown(record)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(md + "\n")
    if args.json == "-":
        print(report.to_json(record))
    elif args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(report.to_json(record) + "\n")
    if args.json != "-":
        print(report.summary_text(record))


class _Plain:
    """Listener without a live view: one line per finished mutant."""

    def __init__(self, console) -> None:
        self.console = console

    def planned(self, kernels) -> None:
        n = sum(len(k.mutants) for k in kernels)
        self.console.print(f"ldssan mutate: {n} mutants in {sum(k.status != 'skipped' for k in kernels)} kernel(s)")

    def message(self, text: str) -> None:
        self.console.print(text)

    def baseline(self, kernel) -> None:
        self.console.print(f"{kernel.name}: clean baseline {kernel.status} {kernel.message}".rstrip())

    def mutant(self, kernel, m) -> None:
        from .report import lint_text, output_k_text, rules_text, status_text

        self.console.print(f"{kernel.name} {m.id}: {status_text(m)}; sanitizer {rules_text(m, 1)}; "
                           f"lint {lint_text(m)}; output {output_k_text(m)} ({m.seconds:.1f} s)", highlight=False)


if __name__ == "__main__":  # pragma: no cover
    ap = argparse.ArgumentParser(prog="ldssan")
    register(ap.add_subparsers(dest="command", required=True))
    ns = ap.parse_args(["mutate", *sys.argv[1:]])
    sys.exit(ns.fn(ns))
