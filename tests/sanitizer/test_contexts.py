"""Never a false clean from the contexts (issue 29): launches inside `emulate()` under an
active sanitizer are checked; a launch from a thread no context covers is refused; a launch
that raises is kept by the collector even when the caller catches the error; a fault of
ldssan's own code is an `LdssanInternalError` naming the launch; and every argument of
sanitize()/enable()/emulate() is checked when the call is made."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import ldssan
from ldssan import config, hook
from ldssan.runtime.emu import (
    EmulateRefused, EmuMemoryError, StepBudgetExceeded, UncoveredThreadLaunch, emulate, frontend, threads,
)
from ldssan.runtime.emu.frontend import EmuConfig
from ldssan.runtime.emu.runconfig import DeviceLink, RunConfig
from ldssan.runtime.shadow import ShadowEngine
from ldssan.session import LdssanInternalError

from ..neighbour import load_neighbour

N = 64
WRITE = "lds[tid] = fx.Int32(tid) * 10"
READ = "Out[tid] = lds[(tid + 32) % N]"


@pytest.fixture(scope="module")
def racy(tmp_path_factory):
    """The neighbour exchange with no barrier: wave 1's read of wave 0's store races it."""
    return load_neighbour(tmp_path_factory.mktemp("racy"), sync=(), shift=32).launch


def assert_race_with_both_lines(violations) -> None:
    (v,) = [v for v in violations if v.code == "LDS001"]
    assert {v.site.text.strip(), v.other_site.text.strip()} == {WRITE, READ}, (v.site, v.other_site)


# -- emulate() under an active sanitizer --------------------------------------------------


def test_emulate_inside_sanitize_is_checked_with_its_policy(racy):
    out = torch.zeros(N, dtype=torch.int32)
    with ldssan.sanitize() as col, emulate("random(7)") as cfg:
        racy(out)
    assert cfg.sanitize and str(cfg.policy) == "random(7)"  # the schedule asked for, checked
    assert len(col.results) == 1
    assert_race_with_both_lines(col.violations)


def test_emulate_under_enable_is_checked(racy):
    out = torch.zeros(N, dtype=torch.int32)
    hook.enable(device="off")
    try:
        hook.collector().take()
        with emulate("reverse"):
            racy(out)
        results = hook.collector().take()
    finally:
        hook.disable()
    assert len(results) == 1
    assert_race_with_both_lines(results[0].report.violations)


def test_emulate_that_cannot_be_honoured_is_refused():
    hw = EmuConfig(RunConfig(sanitize=True, device=DeviceLink("0", 0, hardware=True)))
    with frontend.active(hw), pytest.raises(EmulateRefused, match="FLYDSL_LDSSAN_DEVICE=hardware"):
        emulate("random(7)").__enter__()
    dev = EmuConfig(RunConfig(sanitize=True, device=DeviceLink("0", 0)))
    with frontend.active(dev), pytest.raises(EmulateRefused, match="per-wave policy"):
        emulate("lockstep").__enter__()
    with frontend.active(dev), emulate("canonical") as cfg:  # a per-wave policy is honoured
        assert cfg.sanitize and str(cfg.policy) == "canonical"


# -- threads --------------------------------------------------------------------------------


def _in_thread(fn, *args):
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


@pytest.mark.parametrize("context", ["sanitize", "emulate"])
def test_a_launch_from_a_thread_the_block_does_not_cover_is_refused(racy, context):
    out = torch.zeros(N, dtype=torch.int32)
    block = ldssan.sanitize() if context == "sanitize" else emulate()
    with block:
        with pytest.raises(UncoveredThreadLaunch, match="covers the launches of its own thread only"):
            _in_thread(racy, out)
    assert not threads.open_blocks  # closed blocks leave no trace


def test_enable_covers_launches_from_other_threads(racy):
    out = torch.zeros(N, dtype=torch.int32)
    hook.enable(device="off")
    try:
        hook.collector().take()
        _in_thread(racy, out)
        results = hook.collector().take()
    finally:
        hook.disable()
    assert_race_with_both_lines(results[0].report.violations)


# -- faulted launches and internal errors -----------------------------------------------------


def test_a_caught_kernel_fault_is_kept_by_the_collector(racy):
    short = torch.zeros(N // 2, dtype=torch.int32)  # the kernel stores N elements: out of bounds
    with ldssan.sanitize() as col:
        try:
            racy(short)
        except EmuMemoryError:
            pass  # swallowed by the user's code
    (fault,) = col.faults
    assert not fault.internal and fault.error.startswith("EmuMemoryError")
    assert "racy" not in fault.kernel and fault.kernel.startswith("neighbour")
    assert "faulted (not checked to its end)" in fault.text


RUNAWAY = """import torch, flydsl.compiler as flyc, flydsl.expr as fx

@flyc.kernel
def runaway(Out: fx.Tensor, n: fx.Int32):
    acc = fx.Int32(0)
    for i in range(n):
        acc = acc + fx.Int32(1)
    Out[fx.thread_idx.x] = acc

@flyc.jit
def launch(Out: fx.Tensor, n: fx.Int32, stream: fx.Stream = fx.Stream(None)):
    runaway(Out, n).launch(grid=(1, 1, 1), block=(64, 1, 1), stream=stream)
"""


def test_a_caught_runaway_loop_is_kept_by_the_collector(tmp_path):
    import importlib.util

    path = tmp_path / "runaway_kernel.py"
    path.write_text(RUNAWAY)
    spec = importlib.util.spec_from_file_location("_runaway_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with ldssan.sanitize() as col:
        try:
            mod.launch(torch.zeros(N, dtype=torch.int32), 2**31 - 1)
        except StepBudgetExceeded:
            pass  # a loop that never ends, swallowed by the user's code
    (fault,) = col.faults
    assert fault.kernel.startswith("runaway") and fault.error.startswith("StepBudgetExceeded: ")
    assert not fault.internal and not col.results


@pytest.mark.parametrize("method, policy", [("finish", "lockstep"), ("ds", "lockstep"), ("ds", "round-robin")])
def test_an_engine_fault_is_an_internal_error_naming_the_launch(racy, monkeypatch, method, policy):
    def broken(self, *args, **kwargs):
        raise KeyError(4097)

    monkeypatch.setattr(ShadowEngine, method, broken)  # at a batch's end / at every LDS access
    out = torch.zeros(N, dtype=torch.int32)
    with ldssan.sanitize(policy) as col:
        with pytest.raises(LdssanInternalError) as info:
            racy(out)
    err = info.value
    assert "ldssan internal error in launch" in str(err) and "of kernel neighbour" in str(err)
    assert isinstance(err.__cause__, KeyError) and err.__cause__.__traceback__ is not None
    (fault,) = col.faults
    assert fault.internal and fault.error == "KeyError: 4097" and not col.results


def test_a_kernel_error_is_not_an_internal_error(racy):
    with ldssan.sanitize(), pytest.raises(EmuMemoryError):
        racy(torch.zeros(N // 2, dtype=torch.int32))


# -- arguments ------------------------------------------------------------------------------

BAD_ARGUMENTS = [
    (ldssan.sanitize, {"policy": None}, TypeError, r"sanitize\(policy=None\): expected a Policy"),
    (ldssan.sanitize, {"policy": "banana"}, ValueError, r"sanitize\(policy='banana'\): expected lockstep"),
    (ldssan.sanitize, {"ring": "8"}, TypeError, r"sanitize\(ring='8'\): expected an integer from 1 to"),
    (ldssan.sanitize, {"ring": 0}, ValueError, r"sanitize\(ring=0\): expected an integer from 1 to"),
    (ldssan.sanitize, {"ring": config.RING_MAX + 1}, ValueError, r"sanitize\(ring=\d+\)"),
    (ldssan.sanitize, {"resident": 0}, ValueError, r"sanitize\(resident=0\): expected an integer >= 1"),
    (ldssan.sanitize, {"resident": 2.0}, TypeError, r"sanitize\(resident=2.0\)"),
    (ldssan.sanitize, {"batch": 0}, ValueError, r"sanitize\(batch=0\): expected 'auto' or an integer"),
    (ldssan.sanitize, {"batch": "many"}, ValueError, r"sanitize\(batch='many'\)"),
    (ldssan.sanitize, {"batch": 2, "resident": 2}, ValueError, "batch and resident are exclusive"),
    (ldssan.sanitize, {"device": "gpu"}, ValueError, r"sanitize\(device='gpu'\): expected one of auto, off"),
    (ldssan.sanitize, {"device": None}, TypeError, r"sanitize\(device=None\)"),
    (ldssan.enable, {"policy": 3}, TypeError, r"enable\(policy=3\)"),
    (ldssan.enable, {"ring": 0}, ValueError, r"enable\(ring=0\)"),
    (ldssan.enable, {"batch": -1}, ValueError, r"enable\(batch=-1\)"),
    (ldssan.enable, {"device": "gpu"}, ValueError, r"enable\(device='gpu'\)"),
    (emulate, {"policy": None}, TypeError, r"emulate\(policy=None\)"),
    (emulate, {"policy": "sideways"}, ValueError, r"emulate\(policy='sideways'\)"),
    (emulate, {"resident": 0}, ValueError, r"emulate\(resident=0\)"),
    (emulate, {"batch": "8"}, ValueError, r"emulate\(batch='8'\)"),
    (emulate, {"batch": 4, "resident": 2}, ValueError, "batch and resident are exclusive"),
]


@pytest.mark.parametrize("fn, kwargs, kind, message", BAD_ARGUMENTS,
                         ids=[f"{f.__name__}-{'-'.join(map(str, k.values()))}" for f, k, _t, _m in BAD_ARGUMENTS])
def test_a_bad_argument_is_a_named_error_at_the_call(fn, kwargs, kind, message):
    kwargs = dict(kwargs)
    policy = kwargs.pop("policy", "lockstep") if fn is not ldssan.enable else kwargs.pop("policy", None)
    with pytest.raises(config.ConfigError, match=message) as info:
        fn(policy, **kwargs) if fn is not ldssan.enable else fn(policy=policy, **kwargs)  # the call, no `with`
    assert isinstance(info.value, kind)
    assert frontend.current() is None  # nothing was turned on
