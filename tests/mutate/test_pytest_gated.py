"""`ldssan mutate --pytest` on tests written for a GPU: the test runs as under
`FLYDSL_LDSSAN=1 pytest` (torch's GPU device is the virtual gfx1250 from its import on, so
a module-level GPU gate passes), and a test that is skipped, errors or launches nothing
stops the campaign at its baseline gate with the reason — never a pickling error, never a
raw traceback, never a campaign over a test that checked nothing."""

from __future__ import annotations

import json
import pickle

import pytest

from ldssan import vdevice
from ldssan.cli import main as ldssan_main
from ldssan.mutate.campaign import gate, plan
from ldssan.mutate.records import KernelRecord
from ldssan.mutate.worker import Task, evaluate

from .conftest import TINY_ARGS
from .kernel_source import RING_KERNEL, line_of

PLAIN_KERNEL = RING_KERNEL.split("def ldssan_cases")[0]
BARRIER = line_of("fx.gpu.barrier()")

# gated both ways GPU suites gate: a skipif mark on the module, and a skip at import
GATED_TESTS = '''\
import numpy as np
import pytest
import torch

import ring_kernel as rk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
if not torch.cuda.is_available():
    pytest.skip("CUDA not available", allow_module_level=True)


def test_ring_on_gpu():
    x = torch.arange(rk.N, dtype=torch.int32, device="cuda") * 7
    out = torch.zeros(rk.N, dtype=torch.int32, device="cuda")
    rk.launch(x, out)
    torch.cuda.synchronize()
    if not np.array_equal(out.cpu().numpy(), rk.reference(x.cpu().numpy())):
        raise SystemExit(1)  # how some suites fail: pytest counts it a failure


@pytest.mark.skip(reason="not on this GPU")
def test_skipped_by_a_mark():
    test_ring_on_gpu()


def test_skipped_while_running():
    pytest.skip("shape not supported")


def test_raises_before_launching():
    raise RuntimeError("no such shape")


def test_launches_nothing():
    assert torch.cuda.is_available()
'''


@pytest.fixture
def user_files(tmp_path):
    (tmp_path / "ring_kernel.py").write_text(PLAIN_KERNEL)
    (tmp_path / "test_gpu_ring.py").write_text(GATED_TESTS)
    return tmp_path


def _campaign(user_files, test: str) -> tuple[int, dict]:
    out = user_files / "out.json"
    code = ldssan_main(["mutate", str(user_files / "ring_kernel.py"), "--pytest",
                        f"{user_files / 'test_gpu_ring.py'}::{test}", "--only", f"delete-sync:{BARRIER}",
                        "-j", "1", *TINY_ARGS, "--json", str(out)])
    return code, json.loads(out.read_text())


def test_a_gpu_gated_test_is_the_case(user_files):
    code, record = _campaign(user_files, "test_ring_on_gpu")
    assert code == 0 and record["ok"], record["kernels"][0]["message"]
    (kernel,) = record["kernels"]
    assert kernel["cases"] == ["test_ring_on_gpu"]
    assert kernel["baseline"]["launches"] == 2 and kernel["baseline"]["failed_launches"] == 0
    (mutant,) = kernel["mutants"]
    assert mutant["sanitizer"] is True and mutant["rules"][0]["code"] == "LDS001"
    assert not vdevice.active()  # the virtual device was the test's, not left behind


def test_a_skipped_test_stops_the_campaign_at_the_gate_with_the_reason(user_files, capsys):
    code, record = _campaign(user_files, "test_skipped_while_running")
    assert code == 2 and not record["ok"]
    message = record["kernels"][0]["message"]
    assert message == ("the test case did not run: test_skipped_while_running: TestSkipped: "
                       "test_gpu_ring.py::test_skipped_while_running was skipped: shape not supported")
    err = capsys.readouterr().err
    assert "Traceback" not in err and "PicklingError" not in err


def _baseline(user_files, test: str) -> str | None:
    """The gate's verdict on the clean baseline of the kernel with this test as its case
    (the worker's evaluation, in this process)."""
    spec = str(user_files / "ring_kernel.py")
    target, _ = plan(spec, pytest=[f"{user_files / 'test_gpu_ring.py'}::{test}"])
    try:
        out = evaluate(Task(spec, target, None, (), 2, "round-robin", 60.0))
    except (Exception, pytest.skip.Exception, SystemExit) as exc:  # it never raises: it reports
        pytest.fail(f"evaluate() raised {type(exc).__name__}: {exc}")
    pickle.loads(pickle.dumps(out))  # what a worker sends back pickles
    return gate(KernelRecord(spec, "ring_kernel"), out)


@pytest.mark.parametrize("test, why", [
    ("test_skipped_by_a_mark", "TestSkipped: test_gpu_ring.py::test_skipped_by_a_mark was skipped: not on this GPU"),
    ("test_raises_before_launching", "test_raises_before_launching: RuntimeError: no such shape"),
    ("test_launches_nothing", "test_launches_nothing: the test launched no FlyDSL kernel"),
], ids=["skip-mark", "raises", "no-launch"])
def test_a_test_that_does_not_launch_fails_the_baseline_gate_by_name(user_files, test, why):
    verdict = _baseline(user_files, test)
    assert verdict is not None and verdict.startswith("the test case did not run: ") and why in verdict, verdict


PACKAGE_TEST = '''\
import numpy as np
import torch

import pkg.ring_kernel as rk


def test_ring():
    x = torch.arange(rk.N, dtype=torch.int32, device="cuda") * 3
    out = torch.zeros(rk.N, dtype=torch.int32, device="cuda")
    rk.launch(x, out)
    assert np.array_equal(out.cpu().numpy(), rk.reference(x.cpu().numpy()))
'''


def test_a_kernel_in_a_package_tree_is_mutated_where_its_test_imports_it(tmp_path):
    """A checkout's layout: `pkg/ring_kernel.py` given as a file, its test in `tests/` importing
    `pkg.ring_kernel` from the checkout root (pytest puts the package root on sys.path): the
    test must see the mutant, not the original module."""
    for folder in ("pkg", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg" / "ring_kernel.py").write_text(PLAIN_KERNEL)
    (tmp_path / "tests" / "test_ring.py").write_text(PACKAGE_TEST)
    out = tmp_path / "out.json"
    code = ldssan_main(["mutate", str(tmp_path / "pkg" / "ring_kernel.py"), "--pytest",
                        f"{tmp_path / 'tests' / 'test_ring.py'}::test_ring", "--only", f"delete-sync:{BARRIER}",
                        "-j", "1", *TINY_ARGS, "--json", str(out)])
    record = json.loads(out.read_text())
    assert code == 0 and record["ok"], record["kernels"][0]["message"]
    (mutant,) = record["kernels"][0]["mutants"]
    assert mutant["status"] == "killed" and mutant["rules"][0]["code"] == "LDS001"


def test_skip_marks_are_evaluated_as_pytest_does():
    from ldssan.mutate.pytest_case import _skip_reason

    def reason(*marks, **namespace):
        return _skip_reason([m.mark for m in marks], namespace)

    assert reason(pytest.mark.skipif(False, reason="no")) is None
    assert reason(pytest.mark.skipif(True, reason="gated")) == "gated"
    assert reason(pytest.mark.skipif("sys.platform != 'nowhere'", reason="by text")) == "by text"
    assert reason(pytest.mark.skipif("not HAVE_GPU", reason="module global"), HAVE_GPU=True) is None
    assert reason(pytest.mark.skipif(reason="no condition")) == "no condition"
    assert reason(pytest.mark.skip) == "unconditional skip"
    assert reason(pytest.mark.parametrize("a", [1]), pytest.mark.skip("why")) == "why"
