"""Every FlyDSL launch form runs and is checked while ldssan is on: `@flyc.jit` calls,
`flyc.compile(fn, *args)` (whose first call launches exactly when it would on hardware with
device buffers: host tensors are the virtual device's memory), later calls of the compiled
function, `from_dlpack` / `from_torch_tensor` wrappers and raw pointer arguments; under
`ldssan.sanitize()` and `ldssan.enable()` here, under the pytest plugin in
test_launch_forms_plugin.py. A clean kernel passes with its output right; a racy one is
reported with the rule and both lines. A compile that does not launch although live memory
was passed is said (`LaunchNotRun`), never silent."""

from __future__ import annotations

import warnings

import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
import ldssan
from ldssan import hook
from ldssan.runtime.emu import frontend

N = 64


@flyc.kernel
def _clean(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10  # clean: store
    fx.gpu.barrier()
    Out[tid] = lds[(tid + 32) % N]


@flyc.kernel
def _racy(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10  # racy: store
    Out[tid] = lds[(tid + 32) % N]  # racy: load


@flyc.kernel
def _clean_ptr(Out: fx.Pointer):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10
    fx.gpu.barrier()
    Out[tid] = lds[(tid + 32) % N]


@flyc.kernel
def _racy_ptr(Out: fx.Pointer):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10  # racy pointer: store
    Out[tid] = lds[(tid + 32) % N]  # racy pointer: load


@flyc.jit
def clean(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _clean(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def racy(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _racy(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def clean_ptr(Out: fx.Pointer, stream: fx.Stream = fx.Stream(None)):
    _clean_ptr(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def racy_ptr(Out: fx.Pointer, stream: fx.Stream = fx.Stream(None)):
    _racy_ptr(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def _line(marker: str) -> int:
    """The line of this file that ends with `# marker`."""
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith("# " + marker))


RACE_LINES = {"tensor": {_line("racy: store"), _line("racy: load")},
              "pointer": {_line("racy pointer: store"), _line("racy pointer: load")}}
WANT = torch.tensor([(i + 32) % N * 10 for i in range(N)], dtype=torch.int32)


def _pointer(out: torch.Tensor):
    return flyc.from_c_void_p(fx.Int32, out.data_ptr())


def _later(launcher, wrap):
    """The compiled function's later call: the compile's own launch is taken away first, so
    only the later call's launch is left to check."""
    def launch(out, results):
        compiled = flyc.compile(launcher, wrap(out), fx.Stream(None))
        assert len(results.take()) == 1  # the compile launched (host memory is device memory)
        out.fill_(-1)
        compiled(wrap(out), fx.Stream(None))
    return launch


# form -> (kernel kind, launch(out, results) using the clean or racy launcher given)
FORMS = {
    "jit call": ("tensor", lambda fn: lambda out, _r: fn(out)),
    "compile, first call": ("tensor", lambda fn: lambda out, _r: flyc.compile(fn, out)),
    "compile, later call": ("tensor", lambda fn: _later(fn, lambda t: t)),
    "jit call, from_dlpack": ("tensor", lambda fn: lambda out, _r: fn(flyc.from_dlpack(out))),
    "compile, from_dlpack": ("tensor", lambda fn: lambda out, _r: flyc.compile(fn, flyc.from_dlpack(out))),
    "compile, from_torch_tensor": ("tensor",
                                   lambda fn: lambda out, _r: flyc.compile(fn, flyc.from_torch_tensor(out))),
    "compile later call, from_dlpack": ("tensor", lambda fn: _later(fn, flyc.from_dlpack)),
    "jit call, raw pointer": ("pointer", lambda fn: lambda out, _r: fn(_pointer(out))),
    "compile, raw pointer": ("pointer", lambda fn: lambda out, _r: flyc.compile(fn, _pointer(out))),
}
LAUNCHERS = {("tensor", False): clean, ("tensor", True): racy,
             ("pointer", False): clean_ptr, ("pointer", True): racy_ptr}


class _Taken:
    """`take()` of a collector: what one form's launches added."""

    def __init__(self, collector):
        self.collector = collector

    def take(self):
        return self.collector.take()


def _run(form: str, is_racy: bool, collector):
    kind, make = FORMS[form]
    out = torch.full((N,), -1, dtype=torch.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", frontend.LaunchNotRun)  # every form here launches
        make(LAUNCHERS[kind, is_racy])(out, _Taken(collector))
    return kind, out, collector.take()


def _assert_verdict(kind: str, is_racy: bool, out, results) -> None:
    assert len(results) == 1, f"{len(results)} launches checked, want 1"
    found = results[0].report.violations
    if not is_racy:
        assert not found, found
        torch.testing.assert_close(out, WANT)
        return
    races = [v for v in found if v.code == "LDS001"]
    assert races, [v.code for v in found]
    assert {races[0].site.line, races[0].other_site.line} == RACE_LINES[kind]
    assert races[0].site.file == __file__


@pytest.mark.parametrize("is_racy", [False, True], ids=["clean", "racy"])
@pytest.mark.parametrize("form", list(FORMS))
def test_every_launch_form_is_checked_under_sanitize(form, is_racy):
    with ldssan.sanitize() as col:
        kind, out, results = _run(form, is_racy, col)
    _assert_verdict(kind, is_racy, out, results)


def _enabled_for_one_test(device: str):
    """`ldssan.enable(device=...)` for one test; its launches go to the process collector."""
    hook.collector().take()
    hook.enable(device=device)
    try:
        yield hook.collector()
    finally:
        hook.disable()
        hook.collector().take()


@pytest.fixture
def enabled():
    """`ldssan.enable()` for one test, torch left alone."""
    yield from _enabled_for_one_test("off")


@pytest.mark.parametrize("is_racy", [False, True], ids=["clean", "racy"])
@pytest.mark.parametrize("form", ["compile, first call", "compile, later call", "compile, from_dlpack",
                                  "compile, raw pointer", "jit call"])
def test_every_launch_form_is_checked_under_enable(enabled, form, is_racy):
    kind, out, results = _run(form, is_racy, enabled)
    _assert_verdict(kind, is_racy, out, results)


@pytest.fixture
def enabled_virtual():
    """`ldssan.enable()` with torch's GPU device the virtual gfx1250, as FLYDSL_LDSSAN=1 on a
    host without a GPU."""
    yield from _enabled_for_one_test("virtual")


@pytest.mark.parametrize("is_racy", [False, True], ids=["clean", "racy"])
@pytest.mark.parametrize("wrap", ["tensor", "from_dlpack", "later call"])
def test_virtual_gpu_tensors_launch_at_compile_and_are_checked(enabled_virtual, wrap, is_racy):
    # the case: an output allocated with device=x.device, passed as is or through
    # from_dlpack, to flyc.compile -- it compiled only and nothing was checked
    x = torch.zeros(N, dtype=torch.int32, device="cuda")
    out = torch.full((N,), -1, dtype=torch.int32, device=x.device)
    assert out.is_cuda
    fn = racy if is_racy else clean
    with warnings.catch_warnings():
        warnings.simplefilter("error", frontend.LaunchNotRun)
        if wrap == "later call":
            _later(fn, lambda t: t)(out, enabled_virtual)
        else:
            flyc.compile(fn, flyc.from_dlpack(out) if wrap == "from_dlpack" else out)
    _assert_verdict("tensor", is_racy, out.cpu(), enabled_virtual.take())


def test_a_compile_with_a_placeholder_beside_live_memory_says_it_did_not_launch():
    # FlyDSL takes a meta tensor for a compile placeholder, on hardware too: no launch. With
    # live memory beside it a launch was evidently meant, so ldssan says so, naming it.
    out = torch.full((N,), -1, dtype=torch.int32)
    meta = torch.empty(N, dtype=torch.int32, device="meta")
    frontend.CALLS.take()
    with ldssan.sanitize() as col, pytest.warns(frontend.LaunchNotRun) as caught:
        compiled = flyc.compile(_two_outputs, out, meta)
    text = str(caught[0].message)
    assert "compiled but did not launch" in text and "'Second' (a tensor on device 'meta')" in text
    assert f"{__file__}:" in text  # the user's line
    assert col.results == [] and (out == -1).all()
    calls, checked, notes = frontend.CALLS.take()
    assert (calls, checked, notes) == (1, 0, [text])
    with ldssan.sanitize() as col:  # a later call with device memory runs and is checked
        second = torch.zeros(N, dtype=torch.int32)
        compiled(out, second, fx.Stream(None))
    assert len(col.results) == 1 and not col.violations
    torch.testing.assert_close(out, WANT)


def test_a_compile_of_placeholders_only_is_a_compile_and_says_nothing():
    meta = torch.empty(N, dtype=torch.int32, device="meta")
    with ldssan.sanitize() as col, warnings.catch_warnings():
        warnings.simplefilter("error", frontend.LaunchNotRun)
        flyc.compile(clean, meta)
    assert col.results == []


@flyc.kernel
def _two(First: fx.Tensor, Second: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10
    fx.gpu.barrier()
    First[tid] = lds[(tid + 32) % N]
    Second[tid] = lds[tid]


@flyc.jit
def _two_outputs(First: fx.Tensor, Second: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _two(First, Second).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def test_launch_requests_are_counted_once_each():
    # the pytest plugin's "called, not checked" compares these with the checked launches
    out = torch.zeros(N, dtype=torch.int32)
    frontend.CALLS.take()
    with ldssan.sanitize():
        clean(out)                                  # a jit call
        compiled = flyc.compile(clean, out)         # a compile (it launches: one request)
        compiled(out, fx.Stream(None))              # a later call
    assert frontend.CALLS.take() == (3, 3, [])
    with ldssan.emulate():                          # emulated, not sanitized: not checked
        clean(out)
    assert frontend.CALLS.take() == (1, 0, [])
    clean_args = frontend.CALLS.take()
    assert clean_args == (0, 0, [])                 # nothing outside an active config
