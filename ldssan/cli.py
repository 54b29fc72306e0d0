"""The `ldssan` command line.

    ldssan demo             run the bundled kernels on the virtual gfx1250: checks against their
                            references, then the sanitizer on the clean kernels and on a planted bug
    ldssan env              every FLYDSL_LDSSAN_* option with its default, and what the
                            virtual gfx1250 runs (launch and argument forms, ops)
    ldssan mutate KERNEL    mutation campaign: one-line sync bugs, sanitizer vs output check
    ldssan isa-check F::FN  the waits of the compiled gfx1250 code, on every path (ldssan/isa/)
    ldssan rows F::FN       which output rows vary between runs, and which LDS race feeds them
    ldssan build --device F::FN  gfx1250 code objects with the device runtime linked in

An error the user can fix (a bad option or FLYDSL_LDSSAN_* value, a path that cannot be
written, a malformed input file) is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from .devicebuild import register as _register_build
from .isa.cli import register as _register_isa_check
from .mutate.cli import policy_arg
from .mutate.cli import register as _register_mutate
from .rows.cli import register as _register_rows

EXIT_STATUS = """\
exit status: 0 success; 1 a check failed (demo) or nothing to run (mutate);
2 usage error (a bad option or FLYDSL_LDSSAN_* value or an unknown FLYDSL_LDSSAN_* name,
a path that cannot be written, a malformed input) or, for mutate, a clean baseline that
failed its gate; 141 stdout was closed early (`ldssan env | head`), quietly"""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (argparse prints the whole usage block first);
    subcommand parsers are made with the same class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def _cmd_env(args) -> int:
    from .config import help_text
    from .runtime.emu.launch import supported_text

    print(help_text())
    print()
    print(supported_text())
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(policy=args.policy, sanitize=not args.no_sanitize)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ldssan", description="LDS synchronization sanitizer for FlyDSL gfx1250 kernels",
                                 epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the bundled kernels on the virtual gfx1250 and show the sanitizer",
                          epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--policy", default="round-robin", type=policy_arg,
                      help="scheduler policy (round-robin, reverse, canonical, random(SEED))")
    demo.add_argument("--no-sanitize", action="store_true", help="only run the kernels and check their output")
    demo.set_defaults(fn=_cmd_demo)
    env = sub.add_parser("env", help="list the FLYDSL_LDSSAN_* options and what the virtual gfx1250 runs")
    env.set_defaults(fn=_cmd_env)
    _register_mutate(sub)
    _register_isa_check(sub)
    _register_rows(sub)
    _register_build(sub)
    return ap


def _exit_status(exc: BaseException) -> int | None:
    """The exit status of an error by its base class (`passes/ir/errors.py`): the user's input
    is wrong (`UsageError`, or a path the OS refused) -> one line and status 2; None for
    anything else, which is a bug in ldssan or the kernel's failure and keeps its traceback."""
    from .passes.ir.errors import UsageError

    for base, status in ((UsageError, 2), (OSError, 2)):
        if isinstance(exc, base):
            return status
    return None


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (`ldssan env | head -1`): stop quietly, as `cat` does.
    stdout is pointed at /dev/null so the interpreter's last flush cannot fail again; the
    status is the shell's for a process ended by SIGPIPE."""
    import os
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports POLLERR on it), so
    a BrokenPipeError of another pipe or socket is not mistaken for it."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR is reported whatever is asked
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fd (a captured stdout), no poll()
        return False


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        return _quiet_broken_pipe()


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as given (a rerun hint)
    try:
        if args.command != "env":  # `ldssan env` is where a user looks up the accepted values
            from .config import validate

            validate()
        return args.fn(args)
    except BrokenPipeError:
        raise  # not the user's error: main() ends quietly
    except Exception as exc:
        status = _exit_status(exc)
        if status is None:
            raise
        text = "; ".join(str(exc).split("\n"))
        if not text.startswith("ldssan"):
            text = f"ldssan {args.command}: error: {text}"
        print(text, file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
