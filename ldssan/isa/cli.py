"""The `ldssan isa-check` subcommand (registered by ldssan/cli.py)."""

from __future__ import annotations

import argparse
import sys

HELP = """\
FUNC is called once with no arguments and launches FlyDSL kernels; FlyDSL runs in
compile-only mode for gfx1250 (ldssan supplies ld.lld), so nothing executes. Every kernel
build is linked to a code object and its final ISA is checked on every control-flow path.

exit status: 0 no finding; 1 findings; 2 usage error (bad FILE::FUNC: a FILE that does not
import, a FUNC that needs arguments or raises; an ISA ldssan cannot model, no linker, an
error of the gfx1250 backend, an unwritable --json/--sarif/--report path)"""


def _cmd(args) -> int:
    from ldssan.report import report_path_problem, write_report

    from .asm import IsaParseError
    from .output import render_text, write_json
    from .run import IsaTargetError, guarded, isa_check, resolve
    from .toolchain import IsaToolchainError
    from .violations import isa_report

    outputs = [("--json", args.json), ("--sarif", args.sarif), ("--report", args.report)]
    try:
        for flag, path in outputs:
            if path and (problem := report_path_problem(path)):
                raise IsaTargetError(f"{flag}: {problem}")
        results = isa_check(guarded(resolve(args.target), args.target), offsets=not args.no_offsets)
        writers = [("--json", args.json, lambda path: write_json(results, path))]
        if args.sarif or args.report:
            report = isa_report(results)
            writers += [("--sarif", args.sarif, lambda path: write_report(report, path, format="sarif")),
                        ("--report", args.report, lambda path: write_report(report, path))]
        for flag, path, write in writers:
            if path:
                try:
                    write(path)
                except OSError as exc:
                    raise IsaTargetError(f"{flag}: cannot write {path!r}: {exc.strerror or exc}") from None
    except (IsaTargetError, IsaParseError, IsaToolchainError) as exc:
        print(f"ldssan isa-check: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render_text(results))
    return 1 if any(r.findings for r in results) else 0


def register(sub) -> None:
    p = sub.add_parser("isa-check", help="check the waits of the compiled gfx1250 code (ISA level)",
                       description="Check the waits of the compiled gfx1250 code of every kernel FUNC builds.",
                       epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE::FUNC", help="a .py file (or module) and a function in it")
    p.add_argument("--json", metavar="OUT", help="also write the findings as JSON (schema ldssan.isa/1)")
    p.add_argument("--sarif", metavar="OUT", help="also write the findings as a SARIF 2.1.0 log")
    p.add_argument("--report", metavar="OUT",
                   help="also write the findings as the sanitizer's report (schema ldssan.report/1; "
                        "SARIF if OUT ends in .sarif), one violation per finding")
    p.add_argument("--no-offsets", action="store_true",
                   help="skip re-assembling for byte offsets (findings then give ISA line numbers)")
    p.set_defaults(fn=_cmd)
