"""The public API at the package root, what importing ldssan costs, and what it leaves alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_public_names_import_from_the_root():
    from ldssan import Report, Violation, disable, emulate, enable, sanitize
    import ldssan
    from ldssan import decode, hook
    from ldssan.runtime.emu import emulate as emu_emulate

    assert (enable, disable, sanitize) == (hook.enable, hook.disable, hook.sanitize)
    assert emulate is emu_emulate
    assert (Report, Violation) == (decode.Report, decode.Violation)
    assert set(ldssan.__all__) == {"enable", "disable", "sanitize", "emulate", "Report", "Violation"}
    assert set(ldssan.__all__) <= set(dir(ldssan))


def test_unknown_root_name_is_an_attribute_error():
    import ldssan

    with pytest.raises(AttributeError, match="no_such_thing"):
        ldssan.no_such_thing  # noqa: B018


def test_importing_ldssan_and_its_plugin_stays_cheap():
    """The pytest plugin imports ldssan in every pytest run: neither may pull in FlyDSL, MLIR,
    torch or numpy until a public name is used."""
    heavy = ["flydsl", "torch", "numpy", "ldssan.hook", "ldssan.runtime.emu"]
    loaded = json.loads(_python(
        "import sys, json, ldssan, ldssan.pytest_plugin, ldssan.runtime; "
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"))
    assert loaded == []


def test_importing_ldssan_modules_leaves_the_environment_alone():
    """No module of ldssan, its pass or its runtime sets environment variables at import
    (bundled kernels are user code and not part of this check)."""
    code = """
import json, os, pkgutil, importlib
import ldssan, ldssan.passes, ldssan.runtime
before = dict(os.environ)
names = []
for pkg in (ldssan, ldssan.passes, ldssan.runtime):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not info.name.startswith("ldssan.kernels"):
            names.append(info.name)
for name in names:
    importlib.import_module(name)
after = dict(os.environ)
print(json.dumps({"n": len(names), "changed": sorted(k for k in before.keys() | after.keys()
                                                     if before.get(k) != after.get(k))}))
"""
    got = json.loads(_python(code))
    assert got["n"] > 40  # every module was really imported
    assert got["changed"] == []
