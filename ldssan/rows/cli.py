"""The `ldssan rows` subcommand (registered by ldssan/cli.py)."""

from __future__ import annotations

import argparse
import sys

HELP = """\
FUNC is called with no arguments, launches FlyDSL kernels and returns the output tensor(s)
(a tensor, a tuple or a dict). It runs K times on the virtual gfx1250 with identical inputs
under K scheduler policies (listed in the output, replayable with --policy); elements that
are not bitwise identical across runs (or, with --reference, not close to the reference)
are matched to the LDS races whose values reach them.

With --pytest TEST (path/test_x.py::test_y) instead of FILE::FUNC, each run executes that
one test in-process; the tensor arguments its FlyDSL launches write are the outputs, named
<jit function>#<launch index>.<parameter>.

--batch (default: auto) runs that many workgroups side by side; auto batches 8 when the
kernel's IR shows independent workgroups (no global atomics, atomic/volatile flags, fences
wider than the workgroup, cluster ops or sleeps) and 1 otherwise, and says which.

exit status: 0 nothing varies; 1 some element varies; 2 usage error (bad FILE::FUNC, a
function that returns no tensor, an unwritable output path)"""


def _cmd(args) -> int:
    from rich.console import Console

    from ldssan.isa.run import IsaTargetError, resolve
    from ldssan.report import report_path_problem

    from . import explain, render, write_png
    from .variation import RowsError

    try:
        for flag, path in (("--json", args.json), ("--png", args.png)):
            if path and (problem := report_path_problem(path)):
                raise RowsError(f"{flag}: {problem}")
        if (args.target is None) == (args.pytest is None):
            raise RowsError("give FILE::FUNC or --pytest TEST (one of them)")
        fn = resolve(args.target) if args.target else None
        ref = resolve(args.reference) if args.reference else None
        observed = _load_observed(args.observed) if args.observed else None
        report = explain(fn, runs=args.runs, reference=ref, row_dim=args.row_dim, policies_=args.policy,
                         progress=sys.stderr.isatty(), rtol=args.rtol, atol=args.atol, observed=observed,
                         batch=args.batch, pytest=args.pytest)
    except (IsaTargetError, RowsError) as exc:
        print(f"ldssan rows: error: {exc}", file=sys.stderr)
        return 2
    Console().print(render(report))
    if args.json:
        report.to_json(args.json)
    if args.png:
        try:
            write_png(report, args.png, row_dim=args.row_dim)
        except ImportError:
            print("ldssan rows: --png needs matplotlib: pip install 'ldssan[rows]'", file=sys.stderr)
            return 2
    return 1 if report.varying else 0


def _load_observed(paths):
    import torch

    from .variation import RowsError

    out = []
    for path in paths:
        try:
            out.append(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as exc:  # a missing, truncated or non-torch file: the user's input
            raise RowsError(f"--observed {path}: cannot load it with torch.load: {exc}") from None
    return out


def register(sub) -> None:
    p = sub.add_parser("rows", help="which output rows vary between runs, and which LDS race feeds them",
                       description="Run FUNC K times under different schedules; explain the varying outputs.",
                       epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE::FUNC", nargs="?", help="a .py file (or module) and a function in it")
    p.add_argument("--pytest", metavar="TEST", help="instead of FILE::FUNC: the launches of one pytest test "
                   "(path/test_x.py::test_y); the tensors they write are the outputs")
    p.add_argument("--runs", type=int, default=16, metavar="K", help="runs (default 16, at least 2)")
    p.add_argument("--reference", metavar="FILE::REF", help="a function returning the expected output(s)")
    p.add_argument("--row-dim", type=int, default=0, help="the axis whose index is a row (default 0)")
    p.add_argument("--policy", action="append", metavar="POLICY",
                   help="scheduler policy of one run, repeated K times (default: a fixed list)")
    p.add_argument("--batch", type=int, default=None, metavar="N",
                   help="workgroups in lockstep per emulator batch (default: decided from the kernel's IR, "
                        "8 when its workgroups are independent, else 1)")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance against --reference")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance against --reference")
    p.add_argument("--observed", nargs="+", metavar="FILE.pt",
                   help="outputs saved (torch.save) from K runs on a GPU: the varying elements come from "
                        "them, the explanation from the virtual gfx1250's runs of FUNC")
    p.add_argument("--json", metavar="OUT", help="write the result as JSON (schema ldssan.rows/1)")
    p.add_argument("--png", metavar="OUT", help="write a heatmap of the varying elements (needs matplotlib)")
    p.set_defaults(fn=_cmd)
