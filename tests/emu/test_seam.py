"""runtime.seam: every patch of FlyDSL and torch is applied in one fixed order, whatever order
its owners install in, and taken out exactly."""

from __future__ import annotations

import itertools
import types

import pytest

from ldssan.runtime import seam


def _tagger(tag):
    """A wrap whose result says which layers it stands on, innermost first."""
    def wrap(below):
        def fn():
            return [*below(), tag]

        return fn

    return wrap


GROUPS = ("frontend", "vdevice", "isa", "hardware")


@pytest.fixture
def target():
    """A module-like object with an attribute to patch."""
    mod = types.ModuleType("fake_flydsl")
    mod.f = lambda: []
    return mod


@pytest.mark.parametrize("order", list(itertools.permutations(GROUPS[:3])))
def test_groups_stack_in_the_declared_order_whatever_the_install_order(target, order):
    s = seam.Seam(GROUPS)
    original = target.f
    for g in order:
        s.install(g, [(target, "f", _tagger(g))])
    assert target.f() == ["frontend", "vdevice", "isa"]
    assert s.layers(target, "f") == ["frontend", "vdevice", "isa"]
    for g in order:  # taken out in any order, the rest re-wrapped
        s.uninstall(g)
        assert target.f() == [x for x in GROUPS if s.installed(x)]
    assert target.f is original and s.layers(target, "f") == [] and s.patched() == []


def test_install_is_idempotent_and_a_missing_attribute_is_deleted_again(target):
    s = seam.Seam(GROUPS)
    calls = []

    def make():
        calls.append(1)
        return [(target, "f", _tagger("isa")), (target, "absent", lambda below: "put")]

    assert s.install("isa", make) is True
    first = target.f
    assert s.install("isa", make) is False  # nothing made or wrapped twice
    assert calls == [1] and target.f is first and target.f() == ["isa"]
    assert s.original(target, "absent") is None and target.absent == "put"
    assert s.uninstall("isa") is True and s.uninstall("isa") is False
    assert not hasattr(target, "absent") and target.f() == []


def test_a_foreign_value_on_top_is_wrapped_kept_and_given_back(target):
    """A test's monkeypatch over ldssan's patch: a later group wraps it and gives it back;
    a group that would have to slide beneath it is refused, not silently dropped."""
    s = seam.Seam(GROUPS)
    s.install("frontend", [(target, "f", _tagger("frontend"))])
    fake = target.f = lambda: ["fake"]
    s.install("hardware", [(target, "f", _tagger("hardware"))])
    assert target.f() == ["fake", "hardware"]
    with pytest.raises(seam.SeamConflict, match="fake_flydsl.f"):
        s.install("vdevice", [(target, "f", _tagger("vdevice"))])
    s.uninstall("hardware")
    assert target.f is fake


def test_a_group_goes_in_whole_or_not_at_all(target):
    s = seam.Seam(GROUPS)
    s.install("isa", [(target, "f", _tagger("isa"))])
    over = target.f

    def broken(below):
        raise RuntimeError("wrap failed")

    with pytest.raises(RuntimeError, match="wrap failed"):
        s.install("frontend", [(target, "g", lambda below: "g"), (target, "f", broken)])
    assert not s.installed("frontend") and not hasattr(target, "g")
    assert target.f is over and s.layers(target, "f") == ["isa"]


def test_unknown_group_is_refused(target):
    with pytest.raises(ValueError, match="unknown group 'mine'"):
        seam.install("mine", [(target, "f", _tagger("mine"))])


def _held(target, name):
    """The attribute as the target holds it (a class's own descriptor), else as read."""
    return vars(target)[name] if name in vars(target) else getattr(target, name, None)


def _ldssans(value) -> bool:
    """Whether `value` is one of ldssan's replacements (not FlyDSL's or torch's own)."""
    fn = getattr(value, "__func__", value)
    return getattr(fn, "__module__", "").startswith("ldssan") or getattr(fn, "__ldssan_wrapped__", False) \
        or "ldssan" in getattr(fn, "__qualname__", "")


def test_the_real_groups_restore_every_original_attribute():
    """Front end, call lines, virtual device and ISA check installed in the reverse of their
    order, then all taken out: each shared attribute stacked in the declared order, and every
    attribute any of them replaced is FlyDSL's or torch's own again."""
    from flydsl.compiler import jit_function as jf

    from ldssan import vdevice
    from ldssan.isa import sanitized
    from ldssan.runtime.emu import frontend

    assert not seam.installed("hardware") and not vdevice.active()  # the suite's fixtures undo both
    had, collector = seam.groups(), sanitized._collector
    for g in reversed(had):
        seam.uninstall(g)
    try:
        sanitized.install(collector)
        vdevice.install()
        frontend.install()  # the front end (and call lines) last: the seam still puts them beneath
        assert seam.groups() == ["locations", "frontend", "vdevice", "isa"]
        assert seam.layers(jf, "_has_live_device_argument") == ["frontend", "vdevice"]
        assert seam.layers(jf.JitFunction, "_compile_or_execute") == ["frontend", "isa"]
        touched = [(t, n, seam.original(t, n)) for t, n in seam.patched()]
        assert len(touched) > 100 and all(_ldssans(getattr(t, n)) for t, n, _o in touched)
        vdevice.uninstall()
        for g in reversed(seam.ORDER):
            seam.uninstall(g)
        assert seam.patched() == []
        assert [f"{getattr(t, '__name__', t)}.{n}" for t, n, o in touched if _held(t, n) is not o] == []
        assert [f"{getattr(t, '__name__', t)}.{n}" for t, n, o in touched
                if _ldssans(getattr(t, n)) and not _ldssans(o)] == []  # not by the seam's own record
    finally:
        vdevice.uninstall()
        for g in had:
            {"frontend": frontend.install, "locations": frontend.install_locations,
             "isa": lambda: sanitized.install(collector)}[g]()
