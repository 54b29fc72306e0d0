"""The one place that patches FlyDSL and torch.

ldssan runs inside FlyDSL's compile and launch path and, for GPU test suites, stands in for
torch's GPU device; both need attributes of those libraries replaced. Each module that needs
such a patch declares it as data -- `Patch(target, name, wrap)`: `wrap(below)` returns the
new value given the value beneath it -- and hands its patches to `install(group, ...)`.
This module applies them, remembers what it replaced, and puts it back on `uninstall`.

Groups stack on a shared attribute in the fixed order `ORDER` (innermost first), whatever
order they are installed in: the ISA check's launch wrapper always runs outside the front
end's, the virtual device's launch predicates outside the emulator's, the hardware call
state outside the emulator's dispatch. Installing a group that belongs beneath an installed
one re-wraps the ones above it. A value put over one of ours by someone else (a test's
monkeypatch) is left on top: a group installed later wraps it, and uninstalling that group
gives it back; a group that would have to be slid beneath it is refused (`SeamConflict`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from ldssan.passes.ir.errors import LdssanError

# innermost first; each name is the group of one owner:
#   locations  passes/locations.py       FlyDSL's raw MLIR builders take the user's call line
#   frontend   runtime/emu/frontend.py   the pipeline, pass manager, call state, launch cache
#   vdevice    ldssan/vdevice            torch.cuda, the profiler, autograd, launch predicates
#   isa        ldssan/isa/sanitized.py   each sanitized build is also ISA-checked
#   hardware   runtime/device/hardware   device-runtime builds launched on a real gfx1250
#   capture    ldssan/isa/capture.py     FlyDSL's ISA dump, recorded during one capture call
ORDER = ("locations", "frontend", "vdevice", "isa", "hardware", "capture")

_MISSING = object()


class SeamConflict(LdssanError, RuntimeError):
    """A patch that cannot be put in its place: a value someone else set stands above it."""


class Patch(NamedTuple):
    """Replace `target.name` (a module or class attribute) by `wrap(below)`."""

    target: object
    name: str
    wrap: Callable[[object], object]


@dataclass
class _Slot:
    """One patched attribute: the value found before any group, and the groups' layers."""

    target: object
    name: str
    original: object  # `_MISSING`: the attribute was not in the target's own namespace
    seen: object  # what reading it gave then (an inherited value; None if there was none)
    layers: list = field(default_factory=list)  # [group, wrap, below, value], innermost first


def _own(target, name: str):
    return vars(target).get(name, _MISSING)


def _set(target, name: str, value) -> None:
    if value is _MISSING:
        if name in vars(target):
            delattr(target, name)
    else:
        setattr(target, name, value)


def _visible(target, name: str, own):
    """What a wrap gets as `below` when the attribute is inherited or absent."""
    return own if own is not _MISSING else getattr(target, name, None)


def _where(slot: _Slot) -> str:
    owner = getattr(slot.target, "__qualname__", None) or getattr(slot.target, "__name__", repr(slot.target))
    return f"{owner}.{slot.name}"


class Seam:
    """Patch groups over shared attributes, stacked in `order` (innermost first). The
    process has one (`ORDER`, the module functions below); tests make their own."""

    def __init__(self, order: tuple[str, ...]):
        self.order = order
        self._lock = threading.RLock()
        self._slots: dict[tuple[int, str], _Slot] = {}
        self._groups: dict[str, list[Patch]] = {}

    def installed(self, group: str) -> bool:
        return group in self._groups

    def install(self, group: str, patches: "Iterable[Patch] | Callable[[], Iterable[Patch]]") -> bool:
        """Apply `group`'s patches (a list, or a function making it: called only when the
        group is not installed yet). Idempotent: a group already installed is left as it is;
        returns whether this call installed it."""
        if group not in self.order:
            raise ValueError(f"ldssan seam: unknown group {group!r} (known: {', '.join(self.order)})")
        with self._lock:
            if group in self._groups:
                return False
            made = [Patch(*p) for p in (patches() if callable(patches) else patches)]
            done = []
            try:
                for p in made:
                    self._put_in(group, p)
                    done.append(p)
            except BaseException:
                for p in reversed(done):  # all of the group or none of it
                    self._take_out(group, p)
                raise
            self._groups[group] = made
            return True

    def uninstall(self, group: str) -> bool:
        """Take `group`'s patches out (the groups above it are re-wrapped over what lay
        beneath it); returns whether it was installed."""
        with self._lock:
            made = self._groups.get(group)
            if made is None:
                return False
            for p in made:  # refused before anything is taken out
                slot = self._slots[(id(p.target), p.name)]
                at = next(i for i, layer in enumerate(slot.layers) if layer[0] == group)
                if at < len(slot.layers) - 1:
                    _check_clean(slot, at + 1)
            del self._groups[group]
            for p in reversed(made):
                self._take_out(group, p)
            return True

    def _put_in(self, group: str, p: Patch) -> None:
        key = (id(p.target), p.name)
        slot = self._slots.get(key)
        if slot is None:
            own = _own(p.target, p.name)
            slot = self._slots[key] = _Slot(p.target, p.name, own, _visible(p.target, p.name, own))
        rank = self.order.index(group)
        at = sum(1 for layer in slot.layers if self.order.index(layer[0]) < rank)
        if at == len(slot.layers):  # on top, over whatever is there now
            below = _visible(p.target, p.name, _own(p.target, p.name))
        else:
            _check_clean(slot, at)
            below = slot.layers[at][2]
        slot.layers.insert(at, [group, p.wrap, None, None])
        try:
            _restack(slot, at, below)
        except BaseException:  # a wrap failed: nothing was set
            slot.layers.pop(at)
            if not slot.layers:
                del self._slots[key]
            raise

    def _take_out(self, group: str, p: Patch) -> None:
        key = (id(p.target), p.name)
        slot = self._slots[key]
        at = next(i for i, layer in enumerate(slot.layers) if layer[0] == group)
        if at == len(slot.layers) - 1:
            layer = slot.layers.pop()
            if _own(slot.target, slot.name) is layer[3]:  # else someone set a value over ours: it stays
                _set(slot.target, slot.name, layer[2] if slot.layers else slot.original)
        else:
            _check_clean(slot, at + 1)
            below = slot.layers.pop(at)[2]
            _restack(slot, at, below)
        if not slot.layers:
            del self._slots[key]

    def original(self, target, name: str):
        """The value `target.name` had before any group patched it, as the target holds it (a
        class's own descriptor; else what reading it gave, None if nothing): the current one
        if no group patches it."""
        slot = self._slots.get((id(target), name))
        if slot is None:
            return _visible(target, name, _own(target, name))
        return slot.seen if slot.original is _MISSING else slot.original

    def layers(self, target, name: str) -> list[str]:
        """The groups patching `target.name`, innermost first."""
        slot = self._slots.get((id(target), name))
        return [] if slot is None else [layer[0] for layer in slot.layers]

    def patched(self) -> list[tuple[object, str]]:
        """Every attribute a group patches now."""
        with self._lock:
            return [(s.target, s.name) for s in self._slots.values()]

    def groups(self) -> list[str]:
        """The installed groups, in order."""
        return [g for g in self.order if g in self._groups]


def _check_clean(slot: _Slot, at: int) -> None:
    """Layers from `at` up can be re-wrapped: nothing but ldssan's own values between them
    and on top."""
    beneath = slot.layers[at - 1][3] if at else slot.seen
    if slot.layers[at][2] is not beneath or _own(slot.target, slot.name) is not slot.layers[-1][3]:
        raise SeamConflict(f"ldssan seam: {_where(slot)} was replaced by something other than ldssan "
                           f"over a patch; the {', '.join(layer[0] for layer in slot.layers[at:])} patch "
                           "cannot be re-wrapped beneath it")


def _restack(slot: _Slot, start: int, below) -> None:
    """Re-wrap the layers from `start` up over `below`, and set the top one's value; if a
    wrap raises, the layers and the attribute are left as they were."""
    made = []
    for layer in slot.layers[start:]:
        value = layer[1](below)
        made.append((below, value))
        below = value
    for layer, (under, value) in zip(slot.layers[start:], made):
        layer[2], layer[3] = under, value
    _set(slot.target, slot.name, below)


SEAM = Seam(ORDER)  # the process's
installed, install, uninstall = SEAM.installed, SEAM.install, SEAM.uninstall
original, layers, patched, groups = SEAM.original, SEAM.layers, SEAM.patched, SEAM.groups
