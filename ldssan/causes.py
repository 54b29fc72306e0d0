"""The one-line text of every `Cause` of a violation record (split from `rules`, which
re-exports `cause_name` and builds `cause_text` on these lines).

Exhaustive like the rule catalogue: a `Cause` without a line fails at import.
"""

from __future__ import annotations

try:  # Python >= 3.11
    from typing import assert_never
except ImportError:  # pragma: no cover - Python 3.10
    from typing_extensions import assert_never

from ldssan.runtime.records import Cause

__all__ = ["CAUSE_LINES", "cause_name"]


def cause_name(cause: Cause | int) -> str:
    """Stable short name of a cause ("no-barrier"); "cause-N" for an unknown number."""
    try:
        return Cause(cause).name.lower().replace("_", "-")
    except ValueError:
        return f"cause-{int(cause)}"


def _cause_line(cause: Cause) -> str:
    match cause:
        case Cause.NONE:
            return ""
        case Cause.NO_BARRIER:
            return "no barrier phase separates the two accesses"
        case Cause.UNPUBLISHED_DS_STORE:
            return (
                "the writer's ds store was not dscnt-complete at its s_barrier_signal "
                "(no s_wait_dscnt or release fence before the signal)"
            )
        case Cause.BARE_BARRIER:
            return (
                "only a bare s_barrier_signal/s_barrier_wait separates the accesses; with no "
                "release fence or s_wait_dscnt it publishes nothing"
            )
        case Cause.SIGNAL_WAIT_WINDOW:
            return (
                "an access sits between a wave's s_barrier_signal and its s_barrier_wait, "
                "where that barrier phase neither publishes nor protects it"
            )
        case Cause.COPY_NOT_WAITED:
            return (
                "the async/TDM copy had no covering s_wait_asynccnt/s_wait_tensorcnt before "
                "this access"
            )
        case Cause.COPY_WAITED_NOT_PUBLISHED:
            return (
                "the issuing wave waited for the copy only after its s_barrier_signal (or never "
                "signalled), so other waves did not acquire the data"
            )
        case Cause.UNPUBLISHED_READ:
            return "the reader's ds_load was not dscnt-complete when it signalled the barrier"
        case Cause.WAVE_END:
            return "the wave ended with async/TDM copies still outstanding"
        case Cause.ASYNCMARK_UNMARKED:
            return (
                "wait.asyncmark was relied on for copies issued after the last asyncmark; "
                "marks never complete those"
            )
        case Cause.BARRIER_MISMATCH:
            return "the waves of the workgroup executed different barrier sequences"
        case Cause.BARRIER_DIVERGENT_LANES:
            return "the barrier was reached with a partial exec mask (divergent control flow)"
        case Cause.COPY_WAITED_UNPUBLISHED:
            return "copy completed by its wave's wait, never published to this wave"
        case Cause.PEER_COPY_AFTER_ACCESS:
            return (
                "the peer issued its multicast in a later cluster barrier phase than this "
                "access, with no cluster barrier ordering the access before it"
            )
        case _:
            assert_never(cause)


CAUSE_LINES: dict[Cause, str] = {cause: _cause_line(cause) for cause in Cause}
