"""Cases from a pytest test (`ldssan mutate kernel.py --pytest test_file.py::test_fn`): the
test's launches are the case, its assertions the output check, each parametrize set one
case; a kernel file without `ldssan_cases()` is mutated as is. Fixtures are refused by name."""

from __future__ import annotations

import json

import pytest

from ldssan.cli import main as ldssan_main
from ldssan.mutate.pytest_case import PytestCaseError, split_spec
from ldssan.mutate.records import record_from_dict

from .conftest import TINY_ARGS
from .kernel_source import RING_KERNEL, line_of

# the ring kernel as a user's file: no campaign protocol of its own
PLAIN_KERNEL = RING_KERNEL.split("def ldssan_cases")[0]
BARRIER = line_of("fx.gpu.barrier()")
SWAP = line_of("v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)")

TEST_FILE = '''\
import numpy as np
import pytest
import torch

import ring_kernel as rk


@pytest.mark.parametrize("scale", [7, 3])
def test_ring(scale):
    x = torch.arange(rk.N, dtype=torch.int32) * scale
    out = torch.zeros(rk.N, dtype=torch.int32)
    rk.launch(x, out)
    assert np.array_equal(out.numpy(), rk.reference(x.numpy()))


def test_needs_fixture(tmp_path):
    test_ring(7)
'''


@pytest.fixture
def user_files(tmp_path):
    (tmp_path / "ring_kernel.py").write_text(PLAIN_KERNEL)
    (tmp_path / "test_ring.py").write_text(TEST_FILE)
    return tmp_path


def _run(user_files, test: str, only: str) -> tuple[int, dict]:
    out = user_files / "out.json"
    code = ldssan_main(["mutate", str(user_files / "ring_kernel.py"), "--pytest", f"{user_files / 'test_ring.py'}::{test}",
                        "--only", only, "-j", "1", *TINY_ARGS, "--json", str(out)])
    return code, json.loads(out.read_text())


def test_a_pytest_test_is_the_case_and_its_assertions_the_check(user_files):
    code, record = _run(user_files, "test_ring", f"delete-sync:{BARRIER},swap-ping-pong:{SWAP}")
    assert code == 0 and record["ok"]
    (kernel,) = record["kernels"]
    assert kernel["cases"] == ["test_ring[7]", "test_ring[3]"]  # one case per parameter set
    assert kernel["baseline"]["failed_launches"] == 0 and kernel["baseline"]["launches"] == 4
    by_id = {m["id"]: m for m in kernel["mutants"]}
    gone = by_id[f"delete-sync:{BARRIER}"]
    assert gone["sanitizer"] is True and gone["rules"][0]["code"] == "LDS001"
    # the other slot holds published, initialized data: the test's assertion fails on every
    # launch (the output check), and no rule fires: a value change, not a sync bug
    swap = by_id[f"swap-ping-pong:{SWAP}"]
    assert (swap["status"], swap["sanitizer"], swap["output_fails"]) == ("killed", False, 4)
    assert swap["not_sync_bug"] and not swap["missed_sync"]
    # the JSON gives the record back (how benchmarks/campaign.py --table regenerates tables)
    again = record_from_dict(record).summary()
    assert {k: v for k, v in again.items() if k != "seconds"} == \
        {k: v for k, v in record["summary"].items() if k != "seconds"}


def test_a_test_that_needs_a_fixture_is_refused_by_name(user_files):
    code, record = _run(user_files, "test_needs_fixture", f"delete-sync:{BARRIER}")
    assert code == 2 and not record["ok"]
    message = record["kernels"][0]["message"]
    assert "PytestCaseError" in message and "test_needs_fixture" in message and "'tmp_path'" in message


def test_bad_pytest_specs_are_usage_errors(user_files, capsys):
    kernel = str(user_files / "ring_kernel.py")
    for spec in (f"{user_files / 'test_ring.py'}", f"{user_files / 'test_ring.py'}::test_nope",
                 f"{user_files / 'missing.py'}::test_ring"):
        with pytest.raises(SystemExit) as exc:
            ldssan_main(["mutate", kernel, "--pytest", spec, "--dry-run"])
        assert exc.value.code == 2, spec
    with pytest.raises(PytestCaseError, match="no module-level function 'test_nope'"):
        split_spec(f"{user_files / 'test_ring.py'}::test_nope")


def test_the_store_keys_results_by_the_tests_they_came_from(user_files, tmp_path):
    from ldssan.mutate import CampaignConfig
    from ldssan.mutate.store import Store, verdict_settings

    test = f"{user_files / 'test_ring.py'}::test_ring"
    plain, with_test = verdict_settings(CampaignConfig(launches=2)), verdict_settings(CampaignConfig(launches=2, pytest=(test,)))
    assert "cases" not in plain and with_test["cases"].startswith(test + "@")
    store = Store(str(tmp_path / "s.jsonl"))
    store.put("mutant", "d" * 64, "delete-sync:1", with_test, {"status": "killed"})
    assert store.get("d" * 64, "delete-sync:1", plain) is None
    assert Store(store.path).get("d" * 64, "delete-sync:1", with_test)["record"] == {"status": "killed"}
    (user_files / "test_ring.py").write_text(TEST_FILE + "\n# edited\n")  # another test file: another check
    edited = verdict_settings(CampaignConfig(launches=2, pytest=(test,)))
    assert Store(store.path).get("d" * 64, "delete-sync:1", edited) is None
