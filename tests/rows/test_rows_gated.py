"""`ldssan rows --pytest` on tests written for a GPU: the test runs as `FLYDSL_LDSSAN=1 pytest`
runs it (torch's GPU device is the virtual gfx1250 from collection on, so a module-level
GPU gate passes); a test that is skipped, errors or launches nothing is one line, exit 2."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan import rows, vdevice
from ldssan.cli import main

from . import kernels as k

GATED = "tests/rows/case_gated.py"
SKIP_MODULE = "tests/rows/case_skip_module.py"


@pytest.fixture(autouse=True)
def no_gpu_outside():
    """The runner's virtual device is its own: none before, none left after."""
    assert not vdevice.active()
    yield
    assert not vdevice.active()


@pytest.mark.parametrize("test", [f"{GATED}::test_pair_norm_on_the_gpu", f"{SKIP_MODULE}::test_pair_norm_twice"],
                         ids=["skipif-mark", "module-level-skip"])
def test_a_gpu_gated_test_runs_on_the_virtual_gpu(test):
    report = rows.explain(pytest=test, runs=2)
    (out,) = report.outputs
    flat = np.flatnonzero(out.varying_mask)
    assert out.name == "_launch_pair#0.Y"  # named by the @jit function's parameters, however launched
    assert sorted(set((flat // k.N).tolist())) == k.WIDE_ROWS and out.unexplained == 0
    assert {r.rule for r in report.races} == {"LDS001"}
    # one entry per race, however many launches had it
    assert len({(r.rule, r.this, r.other) for r in report.races}) == len(report.races) >= 1
    assert report.pytest["outcomes"] == ["failed", "failed"]  # its own check sees the race


@pytest.mark.parametrize("test, why", [
    (f"{GATED}::test_skipped_by_a_mark", "the test was skipped (setup): not on this GPU"),
    (f"{GATED}::test_skipped_while_running", "the test was skipped (call): shape not supported"),
    (f"{SKIP_MODULE}::test_always_skipped", "the test was skipped (call): skipped whatever the device"),
    (f"{GATED}::test_raises_before_launching",
     "launched no FlyDSL kernel (test failed): failed (call): RuntimeError: no such shape"),
    (f"{GATED}::test_fixture_errors",
     "launched no FlyDSL kernel (test failed (setup)): failed (setup): RuntimeError: fixture broke"),
    (f"{GATED}::test_launches_nothing", "launched no FlyDSL kernel (test passed)"),
    ("tests/rows/case_broken.py::test_never_collected",
     "selected 0 tests, need exactly one (pytest exit 4): collecting it failed: "
     "ModuleNotFoundError: No module named 'tests.rows.no_such_module'"),
    (f"{GATED}::test_pair_norm_compiled", ": 1 of its 2 launches call a CompiledFunction that flyc.compile() "
     "returned, which keeps the schedule it was compiled under"),
], ids=["skip-mark", "skip-call", "skip-in-skipping-module", "raises", "fixture-error", "no-launch", "no-import",
        "compiled-function"])
def test_a_test_that_does_not_launch_is_one_line_and_exit_2(test, why, capsys):
    assert main(["rows", "--pytest", test, "--runs", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"ldssan rows: error: --pytest {test!r}") and why in err, err
