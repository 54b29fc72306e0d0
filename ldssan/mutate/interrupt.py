"""Stopping a campaign on SIGINT (Ctrl-C) or SIGTERM.

While `StopSignals` is active, either signal only records itself; the campaign loop looks at
it between short waits (`check`) and raises `CampaignInterrupted` there, so the engine is
stopped from one known place: its workers killed, the temp folders removed, and the record
returned partial (the store keeps every finished mutant for `--resume`). The usual exit
status of a process ended by a signal is 128 + its number (130, 143).

The pool's workers ignore SIGINT (`engines._init`): Ctrl-C reaches the terminal's whole
process group, and a worker must neither die mid-result nor print its own traceback; the
parent ends them.
"""

from __future__ import annotations

import signal
import threading

from ldssan.passes.ir.errors import LdssanError

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CampaignInterrupted(LdssanError):
    """A stop signal arrived while the campaign ran."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class StopSignals:
    """Context manager: SIGINT and SIGTERM are recorded instead of ending the process (a
    second one is recorded too: the shutdown already under way is short). Outside the main
    thread signals cannot be caught; then it does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, object] = {}

    def _record(self, signum, _frame) -> None:
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._old[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc) -> bool:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        return False

    def check(self) -> None:
        """Raise `CampaignInterrupted` if a stop signal has arrived."""
        if self.signum is not None:
            raise CampaignInterrupted(self.signum)


class NoStop:
    """The stop of a campaign run without signal handling: never stops."""

    signum = None

    def check(self) -> None:
        return None
