"""Which threads an ldssan context covers. An `active()` block (`emulate()`, `sanitize()`)
is thread-local: it covers the launches of the thread that opened it. A FlyDSL launch from a
thread no block covers, while some other thread has one open, is refused here: it would run
unchecked (or, with no GPU, fail inside FlyDSL's linker). The process-wide config
(`frontend.set_global`: `enable()`, FLYDSL_LDSSAN=1) covers every thread.
"""

from __future__ import annotations

import threading

from ldssan.passes.ir.errors import LdssanError

# thread ident -> (thread name, blocks it has open); read unlocked as a quick "any open?"
open_blocks: dict[int, tuple[str, int]] = {}
_lock = threading.Lock()


class UncoveredThreadLaunch(LdssanError, RuntimeError):
    """A FlyDSL launch from a thread no ldssan context covers, while another thread has an
    `emulate()` / `sanitize()` block open."""


def check_covered() -> None:
    """For a launch no config covers: refuse it when another thread has a block open."""
    with _lock:
        others = [name for ident, (name, _n) in open_blocks.items() if ident != threading.get_ident()]
    if others:
        raise UncoveredThreadLaunch(
            f"ldssan: a FlyDSL launch from thread {threading.current_thread().name!r}, while an "
            f"ldssan.sanitize()/emulate() block is open in thread {others[0]!r}: such a block covers "
            "the launches of its own thread only. Launch from that thread, open the block in this "
            "one, or use ldssan.enable() / FLYDSL_LDSSAN=1, which cover every thread.")


def enter_block() -> None:
    me = threading.current_thread()
    with _lock:
        _name, n = open_blocks.get(me.ident, (me.name, 0))
        open_blocks[me.ident] = (me.name, n + 1)


def leave_block() -> None:
    me = threading.get_ident()
    with _lock:
        name, n = open_blocks.pop(me)
        if n > 1:
            open_blocks[me] = (name, n - 1)
