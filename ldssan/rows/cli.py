"""The `ldssan rows` subcommand (registered by ldssan/cli.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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

--observed files are compared bit for bit, as the virtual runs are: each output must have
one dtype in every file (a bfloat16 or float64 copy of a float32 output is refused, not
reported as varying).

exit status: 0 nothing varies; 1 some element varies (between runs, or from --reference);
2 usage error (bad FILE::FUNC: a FILE that does not import, a FUNC that needs arguments or
raises, launches no FlyDSL kernel or returns no tensor; a bad option value; --observed
files of different dtypes; an unwritable output path, checked before the runs)"""


def _cmd(args) -> int:
    from rich.console import Console

    from ldssan.isa.run import IsaTargetError, guarded, resolve
    from ldssan.report import report_path_problem

    from . import explain, render, write_png
    from .variation import RowsError

    try:
        for flag, path in (("--json", args.json), ("--png", args.png)):
            if path and (problem := report_path_problem(path)):
                raise RowsError(f"{flag}: {problem}")
        if args.png:
            _needs_matplotlib()
        if (args.target is None) == (args.pytest is None):
            raise RowsError("give FILE::FUNC or --pytest TEST (one of them)")
        fn = guarded(resolve(args.target), args.target) if args.target else None
        ref = guarded(resolve(args.reference), args.reference) if args.reference else None
        observed = _load_observed(args.observed) if args.observed else None
        report = explain(fn, runs=args.runs, reference=ref, row_dim=args.row_dim, policies_=args.policy,
                         progress=sys.stderr.isatty(), rtol=args.rtol, atol=args.atol, observed=observed,
                         batch=args.batch, pytest=args.pytest)
    except (IsaTargetError, RowsError) as exc:
        print(f"ldssan rows: error: {exc}", file=sys.stderr)
        return 2
    Console().print(render(report))
    writers = (("--json", args.json, report.to_json), ("--png", args.png,
                                                       lambda path: write_png(report, path, row_dim=args.row_dim)))
    for flag, path, write in writers:
        if path:
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)  # as the up-front check allows
                write(path)
            except OSError as exc:
                print(f"ldssan rows: error: {flag}: cannot write {path!r}: {exc.strerror or exc}", file=sys.stderr)
                return 2
    return 1 if report.varying else 0


def _needs_matplotlib() -> None:
    from .variation import RowsError

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RowsError("--png needs matplotlib: pip install 'ldssan[rows]'") from None


def _tolerance(text: str) -> float:
    """argparse type of --rtol/--atol: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number >= 0")
    return value


def _batch(text: str) -> int:
    """argparse type of --batch: 1 up to FLYDSL_LDSSAN_BATCH's bound (config.batch_max)."""
    from ldssan.config import batch_max

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= batch_max():
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer from 1 to {batch_max()}")
    return value


def _load_observed(paths):
    import torch

    from .variation import RowsError, snapshot

    out = []
    for path in paths:
        try:
            out.append(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as exc:  # a missing, truncated or non-torch file: the user's input
            raise RowsError(f"--observed {path}: cannot load it with torch.load: {exc}") from None
    _same_dtypes(paths, [snapshot(o) for o in out])
    return out


def _same_dtypes(paths, runs) -> None:
    """Observed runs are compared bit for bit: every file must hold each output in one dtype
    (a bf16 or float64 copy of a float32 output is another bit pattern, not a variation)."""
    from .variation import RowsError, dtype_name

    for (name, t0), *others in zip(runs[0], *runs[1:]):
        for path, (_, t) in zip(paths[1:], others):
            if t.dtype != t0.dtype:
                raise RowsError(f"--observed: output {name!r} is {dtype_name(t0)} in {paths[0]} but "
                                f"{dtype_name(t)} in {path}: save every run in the dtype the kernel writes "
                                "(runs are compared bit for bit)")


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
    p.add_argument("--batch", type=_batch, default=None, metavar="N",
                   help="workgroups in lockstep per emulator batch (default: decided from the kernel's IR, "
                        "8 when its workgroups are independent, else 1)")
    p.add_argument("--rtol", type=_tolerance, default=1e-3, help="relative tolerance against --reference (>= 0)")
    p.add_argument("--atol", type=_tolerance, default=1e-5, help="absolute tolerance against --reference (>= 0)")
    p.add_argument("--observed", nargs="+", metavar="FILE.pt",
                   help="outputs saved (torch.save) from K runs on a GPU: the varying elements come from "
                        "them, the explanation from the virtual gfx1250's runs of FUNC")
    p.add_argument("--json", metavar="OUT", help="write the result as JSON (schema ldssan.rows/1)")
    p.add_argument("--png", metavar="OUT", help="write a heatmap of the varying elements (needs matplotlib)")
    p.set_defaults(fn=_cmd)
