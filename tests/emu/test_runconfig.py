"""The run travels as data: FlyDSL's cache-key fragment is derived from the `RunConfig` in one
function, and what runs at the sentinel comes from the active context, never from the text."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ldssan.runtime.emu import frontend
from ldssan.runtime.emu.frontend import EmuConfig, sentinel_fragment
from ldssan.runtime.emu.runconfig import DeviceLink, RunConfig
from ldssan.runtime.emu.sched import Policy

SAN = RunConfig(sanitize=True, ring=4096)
DEV = RunConfig(sanitize=True, device=DeviceLink("d1", 0x1000))


@pytest.mark.parametrize("changed", [
    replace(SAN, sanitize=False), replace(SAN, ring=64), replace(SAN, ring=None),
    replace(DEV, device=DeviceLink("d2", 0x1000)), replace(DEV, device=DeviceLink("d1", 0x2000)),
    replace(DEV, device=DeviceLink("d1", 0x1000, scratch=True)),
    replace(DEV, device=DeviceLink("d1", 0x1000, hardware=True)),
    replace(DEV, device=DeviceLink("d1", 0x1000, hardware=True, process="p")),
], ids=lambda r: repr(r)[:60])
def test_what_changes_a_build_changes_the_fragment(changed):
    base = DEV if changed.device is not None else SAN
    assert sentinel_fragment(changed) != sentinel_fragment(base)
    assert sentinel_fragment(changed, locs="abc") != sentinel_fragment(changed)


def test_the_schedule_and_limits_do_not_change_the_fragment():
    """They reach the run, not the build: one cache entry serves every schedule."""
    other = replace(SAN, policy=Policy("random", 3), batch=4, resident=2, time_limit=5.0, step_budget=9)
    assert sentinel_fragment(other) == sentinel_fragment(SAN)


class _FakePM:
    """FlyDSL's PassManager as the split sees it: what was added, in order."""

    def __init__(self, anchor):
        self.added = []

    def add(self, what, name=None):
        self.added.append(name or what)


def test_the_sentinel_runs_the_contexts_pass_whatever_the_text_says():
    """Nested runs with different passes: each parse takes the innermost context's (a
    process-wide registry would serve whichever module registered last)."""
    outer, inner = (lambda op, p: None), (lambda op, p: None)
    other = f"builtin.module(a,b,{sentinel_fragment(DEV)})"  # the text says device=..., ctx=...
    with frontend.active(EmuConfig(SAN, sentinel_pass=outer)):
        with frontend.active(EmuConfig(DEV, sentinel_pass=inner)):
            pm = frontend._split_pipeline(_FakePM, f"builtin.module(a,{sentinel_fragment(SAN)},c)")
            assert pm.added == ["a", "ldssan-dev", "c"]
        with pytest.MonkeyPatch.context() as mp:
            seen = []
            mp.setattr(_FakePM, "add", lambda self, what, name=None: seen.append(what))
            frontend._split_pipeline(_FakePM, other)
            assert seen == ["a,b", outer]


def test_a_module_outside_the_scope_runs_the_emulator_tag():
    """`prepare` puts plain emulation's fragment in for a module the run's scope leaves out:
    recognised by equality with it, the module is built unchecked."""
    with frontend.active(EmuConfig(SAN, sentinel_pass=lambda op, p: None)):
        pm = frontend._split_pipeline(_FakePM, f"builtin.module(a,{sentinel_fragment(frontend.PLAIN)})")
    assert pm.added == ["a", "ldssan-emu"]


def test_a_device_run_without_its_link_pass_is_refused():
    with frontend.active(EmuConfig(DEV)), pytest.raises(RuntimeError, match="no link pass"):
        frontend._split_pipeline(_FakePM, f"builtin.module(a,{sentinel_fragment(DEV)},c)")


def test_the_device_pass_takes_the_buffer_address_from_the_run(monkeypatch):
    """The record buffer's address reaches the linker from `RunConfig.device`, not from hex in
    the fragment."""
    import importlib

    import ldssan.passes.instrument as instrument

    # the package exports functions named as these modules
    emulated = importlib.import_module("ldssan.runtime.device.emulated")
    link = importlib.import_module("ldssan.runtime.device.link")

    got = []
    monkeypatch.setattr(instrument, "instrument_pass", lambda op, p: None)
    monkeypatch.setattr(link, "link", lambda op, addr, scratch, calls: got.append((addr, scratch, calls)))
    run = RunConfig(sanitize=True, device=DeviceLink("d", 0xBEEF, scratch=True))
    with frontend.active(EmuConfig(run, sentinel_pass=emulated._device_pass)):
        emulated._device_pass(object())
    assert got == [(0xBEEF, True, True)]  # on the virtual gfx1250 the hooks are called, not inlined
    with pytest.raises(RuntimeError, match="outside `emulated\\(\\)`"), frontend.active(EmuConfig(SAN)):
        emulated._device_pass(object())


@pytest.mark.parametrize("run, executor", [(RunConfig(), "emulator"), (SAN, "python"), (DEV, "emulated"),
                                           (replace(DEV, device=DeviceLink("d", 0, hardware=True)), "hardware")])
def test_who_checks_is_a_field_of_the_run(run, executor):
    from ldssan import hook

    assert run.executor == executor
    with frontend.active(EmuConfig(run)):
        assert hook.engine() == (None if executor == "emulator" else executor)
