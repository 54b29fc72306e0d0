"""What the virtual gfx1250 calls, declared: the hook adapter of a wave (`ctx.san`) and the
sanitizer of a host call (the Launcher's `sanitizer`). Implementations match them
structurally; `tests/emu/test_interfaces.py` checks every one against these signatures, and
`Hooks` against the hook ABI (`passes/abi.HOOKS`) plus the emulator-only `stored`.

| Protocol  | Implementations                                                                  |
|-----------|----------------------------------------------------------------------------------|
| Hooks     | hooks.ShadowHooks (the engine), wave.NullHooks (no sanitizer), split.BatchHooks  |
|           | (a batch of workgroups), wave.LockstepHooks (a workgroup as one lane array)      |
| Sanitizer | session.ShadowSession (the Python engine), device.session.EmulatedCall and       |
|           | device.emulated._Launches (the device runtime: the kernel checks itself)         |
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ldssan.passes.abi import HOOKS

WaveEnd = Callable[[Any], None]  # the launcher's end-of-wave callback, given the wave's context


@runtime_checkable
class Hooks(Protocol):
    """The `__ldssan_*` hook ABI as the emulator calls it: one method per hook (the name
    without its prefix), the site id first, the operands of `passes/abi.HOOKS`, then the
    wave's active-lane mask. Pointers are per-lane arrays; the rest is wave-uniform."""

    def ds(self, site: int, ptr, nbytes: int, kind: int, mask) -> None:
        """An LDS load/store/atomic (`DsKind`) of `nbytes` per active lane at `ptr`."""

    def use(self, site: int, mask) -> None:
        """The first use of the result of the ds load `site`."""

    def dma(self, site: int, ptr, nbytes: int, kind: int, mask) -> None:
        """An async per-lane copy (`CopyKind`) touching `nbytes` of LDS at `ptr`."""

    def tdm(self, site: int, g0, g1, g2, g3, kind: int, mask) -> None:
        """A tensor-data-mover op, D# groups 0-3 (`CopyKind`)."""

    def wait(self, site: int, counter: int, n: int, mask) -> None:
        """s_wait_<counter>cnt n, or wait.asyncmark n (`WAIT_ASYNCMARK`)."""

    def mark(self, site: int, mask) -> None:
        """rocdl.asyncmark."""

    def barrier(self, site: int, form: int, bid: int, mask) -> None:
        """A barrier event (`BarrierForm`) of barrier `bid`."""

    def fence(self, site: int, ordering: int, scope: int, mask) -> None:
        """llvm.fence with an LLVM ordering and a scope id (`SCOPES`)."""

    def stored(self, site: int, data, mask) -> None:
        """Emulator only (no `__ldssan_*` hook: the device runtime sees no values): right after
        `ds` for a store, the bytes each lane stores (per-lane), so that two unordered stores
        of identical bytes are named LDS004, a warning."""


@runtime_checkable
class Sanitizer(Protocol):
    """The sanitizer of one host call, as the Launcher drives it: a batch of waves is bound
    before it runs and ended after; `finish` once the host call returned."""

    def begin_batch(self, prog, waves: Sequence, chunk: Sequence[tuple[int, int, int]],
                    grid: tuple[int, int, int], lds_bytes: int) -> WaveEnd:
        """Bind the waves of `chunk` (the workgroups they run) to a checker (each wave's
        `ctx.san`); returns the callback for a wave's end."""

    def end_batch(self) -> int:
        """Every batch begun since the last call ran to its end; returns how many of them
        split into parts (`split.BatchSplit`; 0 when batches never split)."""

    def finish(self) -> None:
        """The host call returned: hand its records over."""


#: the method of `Hooks` for each `__ldssan_*` hook of the ABI, in the ABI's order
ABI_METHODS = tuple(name.removeprefix("__ldssan_") for name in HOOKS)
#: the hooks only the virtual gfx1250 calls (not in the ABI)
EMULATOR_METHODS = ("stored",)
HOOK_METHODS = ABI_METHODS + EMULATOR_METHODS


def hook_method(owner: str, name: str, fn: Callable) -> Callable:
    """`fn`, a generic forwarder `(self, site, *args)`, as the hook method `name` of class
    `owner`: it carries the protocol's signature and doc, so a forwarding adapter declares
    each hook explicitly (no `__getattr__`) and inspection sees what it accepts."""
    proto = getattr(Hooks, name)
    functools.update_wrapper(fn, proto, assigned=("__name__", "__doc__"), updated=())
    fn.__qualname__ = f"{owner}.{name}"
    return fn
