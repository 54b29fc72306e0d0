"""The declared interfaces of the virtual gfx1250 (`runtime/emu/interfaces.py`): every hook
adapter and every sanitizer implements its protocol with the protocol's signatures, and the
hook protocol is the hook ABI (`passes/abi.HOOKS`), so a hook added to one and not the other
fails here."""

from __future__ import annotations

import inspect

import pytest

from ldssan.passes.abi import HOOKS
from ldssan.runtime.device.emulated import _Launches
from ldssan.runtime.device.session import EmulatedCall
from ldssan.runtime.emu.hooks import ShadowHooks
from ldssan.runtime.emu.interfaces import EMULATOR_METHODS, HOOK_METHODS, Hooks, Sanitizer
from ldssan.runtime.emu.split import BatchHooks
from ldssan.runtime.emu.wave import LockstepHooks, NullHooks
from ldssan.runtime.session import ShadowSession

IMPLEMENTATIONS = [(Hooks, ShadowHooks), (Hooks, NullHooks), (Hooks, BatchHooks), (Hooks, LockstepHooks),
                   (Sanitizer, ShadowSession), (Sanitizer, EmulatedCall), (Sanitizer, _Launches)]


def _members(protocol) -> list[str]:
    return sorted(n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_"))


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("protocol, cls", IMPLEMENTATIONS, ids=lambda x: x.__name__)
def test_implementation_has_every_method_with_the_protocols_signature(protocol, cls):
    for name in _members(protocol):
        method = inspect.getattr_static(cls, name, None)
        assert inspect.isfunction(method), f"{cls.__name__}.{name} is not declared on the class"
        assert _params(method) == _params(getattr(protocol, name)), f"{cls.__name__}.{name}"


def test_hooks_protocol_is_the_abi():
    # plus the emulator-only `stored`, which no `__ldssan_*` function carries
    assert _members(Hooks) == sorted(HOOK_METHODS) == sorted(
        [n.removeprefix("__ldssan_") for n in HOOKS] + list(EMULATOR_METHODS))
    for name, hook in HOOKS.items():
        params = _params(getattr(Hooks, name.removeprefix("__ldssan_")))
        # self, the site id, the hook's operands, the active-lane mask
        assert len(params) == 3 + len(hook.operands), name


def test_null_hooks_are_explicit_no_ops():
    hooks = NullHooks()
    assert isinstance(hooks, Hooks)
    for name in HOOK_METHODS:
        n = len(inspect.signature(getattr(hooks, name)).parameters)
        assert getattr(hooks, name)(*range(n)) is None
    with pytest.raises(AttributeError):
        hooks.not_a_hook  # noqa: B018  (the old catch-all swallowed any name)


def test_sessions_are_sanitizers():
    assert issubclass(ShadowSession, Sanitizer) and issubclass(EmulatedCall, Sanitizer)
    assert issubclass(_Launches, Sanitizer)
    assert not issubclass(NullHooks, Sanitizer) and not issubclass(ShadowSession, Hooks)
