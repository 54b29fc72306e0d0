"""Under the pytest plugin (`FLYDSL_LDSSAN=1`, a child pytest): every FlyDSL launch form runs
and is checked -- a clean kernel's test passes with its output right, a racy one's fails with
the rule and both lines -- and a test that called FlyDSL launchers but had no launch checked
is listed "called, not checked" in the summary and the JSON report, and fails under
--ldssan-require-launch. In-process forms: test_launch_forms.py."""

from __future__ import annotations

import json

import pytest

from ldssan.pytest_plugin import UNCHECKED

pytest_plugins = ["pytester"]

KERNELS = '''
import pytest, torch, flydsl.compiler as flyc, flydsl.expr as fx
import ldssan
N = 64
WANT = torch.tensor([(i + 32) % N * 10 for i in range(N)], dtype=torch.int32)


def make(barrier, Ref):
    @flyc.kernel
    def neighbour(Out: Ref):
        tid = fx.thread_idx.x
        lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
        lds[tid] = fx.Int32(tid) * 10
        if fx.const_expr(barrier):
            fx.gpu.barrier()
        Out[tid] = lds[(tid + 32) % N]

    @flyc.jit
    def launch(Out: Ref, stream: fx.Stream = fx.Stream(None)):
        neighbour(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)
    return launch


def ptr(out):
    return flyc.from_c_void_p(fx.Int32, out.data_ptr())


def later(fn, out):
    compiled = flyc.compile(fn, out, fx.Stream(None))
    out.fill_(-1)
    compiled(out, fx.Stream(None))


FORMS = {
    "jit": (fx.Tensor, lambda fn, out: fn(out)),
    "compile": (fx.Tensor, lambda fn, out: flyc.compile(fn, out)),
    "later": (fx.Tensor, later),
    "dlpack": (fx.Tensor, lambda fn, out: flyc.compile(fn, flyc.from_dlpack(out))),
    "torch_tensor": (fx.Tensor, lambda fn, out: flyc.compile(fn, flyc.from_torch_tensor(out))),
    "jit_pointer": (fx.Pointer, lambda fn, out: fn(ptr(out))),
    "compile_pointer": (fx.Pointer, lambda fn, out: flyc.compile(fn, ptr(out))),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("barrier", [True, False], ids=["clean", "racy"])
def test_form(form, barrier):
    ref, run = FORMS[form]
    out = torch.full((N,), -1, dtype=torch.int32)
    run(make(barrier, ref), out)
    if barrier:
        torch.testing.assert_close(out, WANT)
'''

UNCHECKED_TESTS = '''
import torch, flydsl.compiler as flyc, flydsl.expr as fx
import ldssan
N = 64

@flyc.kernel
def fill(Out: fx.Tensor):
    Out[fx.thread_idx.x] = fx.Int32(7)

@flyc.jit
def launch(Out: fx.Tensor, Other: fx.Tensor):
    fill(Out).launch(grid=(1, 1, 1), block=(N, 1, 1))

def test_faulted_and_caught():
    out = torch.zeros(N // 2, dtype=torch.int32)  # N threads store N elements: out of bounds
    try:
        launch(out, out)
    except ldssan.runtime.emu.EmuMemoryError:
        pass  # the launch ran, faulted, and was not checked to its end

def test_compiled_beside_a_placeholder():
    out = torch.zeros(N, dtype=torch.int32)
    flyc.compile(launch, out, torch.empty(N, dtype=torch.int32, device="meta"))

def test_checked():
    out = torch.zeros(N, dtype=torch.int32)
    launch(out, out)
'''


def test_every_launch_form_runs_and_is_checked_under_the_plugin(pytester, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    pytester.makepyfile(test_forms=KERNELS)
    report = pytester.path / "ldssan.json"
    res = pytester.runpytest_subprocess("-p", "ldssan", f"--ldssan-report={report}", "--ldssan-require-launch")
    res.assert_outcomes(passed=7, failed=7)
    out = res.stdout.str()
    for form in ("jit", "compile", "later", "dlpack", "torch_tensor", "jit_pointer", "compile_pointer"):
        assert f"FAILED test_forms.py::test_form[clean-{form}]" not in out, out
        assert f"FAILED test_forms.py::test_form[racy-{form}]" in out, out
    # each racy form's report: the rule and both lines (the load at 15, the store at 12)
    res.stdout.fnmatch_lines(["*ldssan found LDS synchronization violations*", "*(LDS001)*",
                              "*test_forms.py:15:16 in neighbour*", "*test_forms.py:12:5 in neighbour*"])
    tests = json.loads(report.read_text())["tests"]
    assert len(tests) == 14
    for nodeid, t in tests.items():
        later = "-later]" in nodeid
        assert t["launches"] == (2 if later else 1) and t["calls"] == (2 if later else 1), (nodeid, t)
        assert t["not_checked"] is False
        assert (t["violations"] > 0) == ("racy-" in nodeid), (nodeid, t)
    assert UNCHECKED not in out


def test_called_not_checked_is_listed_and_fails_under_require_launch(pytester, monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    pytester.makepyfile(test_unchecked=UNCHECKED_TESTS)
    report = pytester.path / "ldssan.json"
    res = pytester.runpytest_subprocess("-p", "ldssan", f"--ldssan-report={report}")
    res.assert_outcomes(passed=3, warnings=1)
    res.stdout.fnmatch_lines([
        "*LaunchNotRun: ldssan: flyc.compile(launch, ...) compiled but did not launch: FlyDSL takes argument(s) "
        "'Other' (a tensor on device 'meta') for compile placeholders*",
        f"*ldssan: 2 tests {UNCHECKED} (they called FlyDSL launchers; no launch was checked)*",
        "*test_unchecked.py::test_faulted_and_caught: 1 launcher calls, 0 checked: no launch reached the sanitizer*",
        "*test_unchecked.py::test_compiled_beside_a_placeholder: 1 launcher calls, 0 checked: ldssan: "
        "flyc.compile(launch, ...) compiled but did not launch*",
    ])
    data = json.loads(report.read_text())
    tests = {k.split("::")[-1]: v for k, v in data["tests"].items()}
    assert tests["test_faulted_and_caught"]["not_checked"] and tests["test_faulted_and_caught"]["calls"] == 1
    assert tests["test_compiled_beside_a_placeholder"]["not_checked"]
    assert not tests["test_checked"]["not_checked"] and tests["test_checked"]["launches"] == 1
    assert any(UNCHECKED in str(n) for n in data.get("notes", [])) or UNCHECKED in json.dumps(data)

    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan-require-launch")
    res.assert_outcomes(passed=1, failed=2, warnings=1)
    res.stdout.fnmatch_lines([
        f"*ldssan: {UNCHECKED}: the test called FlyDSL launchers 1 times but no launch was checked "
        "(no launch reached the sanitizer); --ldssan-require-launch fails it*"])
