"""`ldssan rows --pytest` (the launches of one pytest test as the call) and the automatic
batch (batched only when the kernel's IR shows independent workgroups)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldssan import hook, rows
from ldssan.cli import main
from ldssan.passes.ir.irview import Block, Function, ModuleView, Op, UNKNOWN_LOC
from ldssan.passes.ir.types import parse_type
from ldssan.runtime.emu import frontend

from . import kernels as k

CASE = "tests/rows/case_pytest.py"
RACY_TEST = f"{CASE}::test_pair_norm_launch"


@pytest.fixture(scope="module")
def from_test():
    return rows.explain(pytest=RACY_TEST, runs=2)


def test_the_tensors_the_test_launches_write_are_the_outputs(from_test):
    # X and W are read only; Y (1-D, row * N + column) is written
    (out,) = from_test.outputs
    assert out.name == "_launch_pair#0.Y" and out.shape == (len(k.WIDTHS) * k.N,)
    flat = np.flatnonzero(out.varying_mask)
    assert sorted(set((flat // k.N).tolist())) == k.WIDE_ROWS
    assert out.varying == len(k.WIDE_ROWS) * k.N and out.unexplained == 0
    assert not (out.varying_mask & (out.taint == 0)).any()
    assert {r.rule for r in from_test.races} == {"LDS001"}
    assert all(r.this.startswith("tests/rows/kernels.py:35:") for r in from_test.races)


def test_same_elements_as_the_function_form(from_test):
    fn = rows.explain(k.pair_norm, runs=2)
    assert np.array_equal(from_test.outputs[0].varying_mask, fn.outputs[0].varying_mask.reshape(-1))
    assert sorted((r.this, r.other, r.elements) for r in from_test.races) == \
        sorted((r.this, r.other, r.elements) for r in fn.races)


def test_the_tests_verdicts_are_recorded(from_test, tmp_path):
    # the test compares with the reference: the racy kernel fails it in these runs
    assert from_test.pytest == {"test": RACY_TEST, "outcomes": ["failed", "failed"]}
    data = json.loads(from_test.to_json(tmp_path / "r.json"))
    assert data["pytest"]["test"] == RACY_TEST and data["outputs"][0]["name"] == "_launch_pair#0.Y"
    assert f"test {RACY_TEST}: failed, failed" in rows.render_text(from_test)


def test_cli_pytest_and_its_usage_errors(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["rows", "--pytest", RACY_TEST, "--runs", "2", "--json", str(out)]) == 1
    assert json.loads(out.read_text())["outputs"][0]["varying"] == len(k.WIDE_ROWS) * k.N
    capsys.readouterr()
    assert main(["rows", f"{CASE}::test_launches_nothing", "--pytest", RACY_TEST]) == 2  # both forms
    assert main(["rows", "--pytest", f"{CASE}::test_launches_nothing", "--runs", "2"]) == 2
    assert "launched no FlyDSL kernel" in capsys.readouterr().err
    assert main(["rows", "--pytest", f"{CASE}::no_such_test", "--runs", "2"]) == 2
    assert "selected 0 tests" in capsys.readouterr().err
    assert main(["rows", "--pytest", CASE, "--runs", "2"]) == 2  # no test named
    with pytest.raises(SystemExit) as exc:  # an option value argparse refuses
        main(["rows", f"tests/rows/kernels.py::pair_norm", "--batch", "0"])
    assert exc.value.code == 2


def _launch_batches(fn, batch):
    with hook.sanitize("round-robin", batch=batch):
        fn()
        return [r.batch for r in frontend.current().launches]


def test_independent_workgroups_are_batched_atomics_are_not():
    auto = rows.AutoBatch()
    # 8 rows = 8 workgroups, one batch (the racy variant's barrier under `if W[row]` diverges
    # across workgroups: the launcher itself falls back to one by one there)
    assert _launch_batches(k.pair_norm_clean, auto) == [rows.AUTO_BATCH]
    assert auto.batch == rows.AUTO_BATCH and "independent" in auto.reason
    auto = rows.AutoBatch()
    assert _launch_batches(k.atomic_sum, auto) == [1]
    assert auto.batch == 1
    assert "a global atomic (llvm.atomicrmw) at" in auto.reason and "tests/rows/kernels.py:48:5" in auto.reason


def test_explain_reports_the_automatic_choice():
    rep = rows.explain(k.atomic_sum, runs=2)
    assert rep.batch == 1 and "global atomic" in rep.batch_reason
    assert rep.to_dict()["batch_reason"] == rep.batch_reason
    assert rows.explain(k.pair_norm_clean, runs=2).batch == rows.AUTO_BATCH
    assert rows.explain(k.pair_norm_clean, runs=2, batch=3).batch_reason == "given"


def _module(*ops):
    return ModuleView(functions={"f": Function("f", "gpu.func", [Block((), (), list(ops))], {}, UNKNOWN_LOC,
                                               is_kernel=True)})


def _op(name, *types, **attrs):
    return Op(name, (), (), (), attrs, [], UNKNOWN_LOC, tuple(parse_type(t) for t in types))


@pytest.mark.parametrize("op, why", [
    (_op("llvm.atomicrmw", "!llvm.ptr<1>", "f32", bin_op=11), "global atomic"),
    (_op("llvm.cmpxchg", "!llvm.ptr", "i32", "i32"), "global atomic"),
    (_op("rocdl.raw.ptr.buffer.atomic.fadd", "f32"), "global atomic"),
    (_op("llvm.load", "!llvm.ptr<1>", ordering=4), "flag"),
    (_op("llvm.store", "i32", "!llvm.ptr<1>", volatile_=True), "flag"),
    (_op("llvm.fence", ordering=5, syncscope="agent"), "scope 'agent'"),
    (_op("llvm.fence", ordering=7), "scope 'system'"),
    (_op("gpu.cluster_id"), "cluster"),
    (_op("rocdl.s.barrier.signal", id=-3), "cluster"),
    (_op("rocdl.s.sleep"), "spin-wait"),
])
def test_each_kind_of_cross_workgroup_op_turns_batching_off(op, why):
    assert why in rows.dependence(_module(op))


@pytest.mark.parametrize("op", [
    _op("llvm.atomicrmw", "!llvm.ptr<3>", "f32", bin_op=11),  # LDS atomics stay in the workgroup
    _op("llvm.load", "!llvm.ptr<1>"), _op("llvm.store", "f32", "!llvm.ptr<1>"),
    _op("llvm.load", "!llvm.ptr<3>", ordering=4),
    _op("llvm.fence", ordering=5, syncscope="workgroup"),
    _op("rocdl.s.barrier.signal", id=-1),
])
def test_workgroup_local_ops_keep_batching(op):
    assert rows.dependence(_module(op)) is None
