"""The `ldssan` command line.

    ldssan demo             run the bundled kernels on the virtual gfx1250: checks against their
                            references, then the sanitizer on the clean kernels and on a planted bug
    ldssan env              every FLYDSL_LDSSAN_* option with its default
    ldssan mutate KERNEL    mutation campaign: one-line sync bugs, sanitizer vs output check
"""

from __future__ import annotations

import argparse
import sys

from .mutate.cli import register as _register_mutate


def _cmd_env(args) -> int:
    from .config import help_text

    print(help_text())
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(policy=args.policy, sanitize=not args.no_sanitize)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ldssan", description="LDS synchronization sanitizer for FlyDSL gfx1250 kernels")
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the bundled kernels on the virtual gfx1250 and show the sanitizer")
    demo.add_argument("--policy", default="round-robin", help="scheduler policy (round-robin, reverse, random(SEED))")
    demo.add_argument("--no-sanitize", action="store_true", help="only run the kernels and check their output")
    demo.set_defaults(fn=_cmd_demo)
    env = sub.add_parser("env", help="list the FLYDSL_LDSSAN_* options")
    env.set_defaults(fn=_cmd_env)
    _register_mutate(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
