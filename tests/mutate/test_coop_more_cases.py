"""The coop cases that call BlockShuffle, BlockTopK, BlockRunLengthDecode and BlockRadixRank
directly: each clean primitive passes the baseline gate (no sanitizer finding, every output
element equal to the host reference), and deleting a barrier that publishes LDS data
between waves is reported on one launch."""

from __future__ import annotations

import json

import pytest

from ldssan.cli import main as ldssan_main
from ldssan.mutate.coop import COOP

from .conftest import TINY_ARGS

PACKAGE = "flydsl.extension.coop."

# module -> (its cases, a barrier whose deletion races across waves in those cases)
NEW = {
    "block.shuffle": (1, "delete-sync:48"),  # boundary items published before neighbours read them
    "block.topk": (2, "delete-sync:68"),  # AIR: a radix pass's scan storage reused by the next
    "block.run_length_decode": (1, "delete-sync:50"),  # run endpoints published before the decode
    "block.radix_rank": (4, "delete-sync:134"),  # MATCH early counts: per-warp histogram atomics read by all waves
}


def test_new_modules_are_in_the_coop_campaign():
    assert {PACKAGE + m for m in NEW} | {PACKAGE + "warp.exchange"} <= set(COOP)


def test_warp_exchange_baseline_passes(tmp_path):
    """WarpExchange SHARED round trip: the clean case passes the gate; its one mutant, the
    subgroup barrier of `scatter_to_striped`, is on a path the case does not call."""
    out = tmp_path / "out.json"
    code = ldssan_main(["mutate", PACKAGE + "warp.exchange", "-j", "1", *TINY_ARGS, "--json", str(out)])
    record = json.loads(out.read_text())
    assert code == 0 and record["ok"], record
    (kernel,) = record["kernels"]
    assert len(kernel["cases"]) == 1 and kernel["baseline"]["failed_launches"] == 0
    assert [(m["id"], m["status"]) for m in kernel["mutants"]] == [("delete-sync:304", "equivalent")]


# topk and radix_rank cost 15-20 s each on 2 cores: campaign-sized, so `-m slow`.
_CAMPAIGN_SIZED = {"block.topk", "block.radix_rank"}


@pytest.mark.parametrize("module", [pytest.param(m, marks=pytest.mark.slow) if m in _CAMPAIGN_SIZED else m
                                    for m in sorted(NEW)])
def test_clean_baseline_passes_and_a_deleted_barrier_is_killed(module, tmp_path):
    cases, mutant = NEW[module]
    out = tmp_path / "out.json"
    code = ldssan_main(["mutate", PACKAGE + module, "--only", mutant, "-j", "1", *TINY_ARGS, "--json", str(out)])
    record = json.loads(out.read_text())
    assert code == 0 and record["ok"], record
    (kernel,) = record["kernels"]
    assert len(kernel["cases"]) == cases and kernel["baseline"]["failed_launches"] == 0
    (m,) = kernel["mutants"]
    assert m["id"] == mutant and m["status"] == "killed" and m["sanitizer"], m
    assert {r["code"] for r in m["rules"]} & {"LDS001", "LDS002", "LDS003"}, m["rules"]


UNDECORATED = '''
from flydsl.expr.gpu import barrier


def host_helper(n):
    return n + 1


class Primitive:
    @classmethod
    def collective(cls, storage, tid):
        storage.slots[tid] = tid
        barrier()
        return storage.slots[0]

    @classmethod
    def host_only(cls, n):
        return host_helper(n)
'''


def test_an_undecorated_method_that_synchronizes_is_device_code():
    """coop primitives are classmethods with no @jit: the barrier makes the method device
    code (so its syncs are mutation sites); a method with no sync call stays host code."""
    import ast

    from ldssan.mutate.source import KernelSource

    src = KernelSource(UNDECORATED)
    barrier_line = UNDECORATED.splitlines().index("        barrier()") + 1
    assert [(stmt.lineno, kind.value) for stmt, _, kind in src.sync_statements()] == [(barrier_line, "barrier")]
    fns = {fn.name: fn for fn in ast.walk(src.tree) if isinstance(fn, ast.FunctionDef)}
    assert fns["collective"] in src.device_nodes
    assert fns["host_only"] not in src.device_nodes and fns["host_helper"] not in src.device_nodes


@pytest.mark.slow  # a radix_rank campaign case (over 20 s on 2 cores)
def test_radix_rank_two_pass_case_reaches_the_multi_pass_barriers(tmp_path):
    """The 2-pass case runs `_publish` (digits and indices published for the next pass):
    its barrier (line 216) was not built by any single-pass case; deleted, it is a race."""
    out = tmp_path / "rr.json"
    code = ldssan_main(["mutate", PACKAGE + "block.radix_rank", "--only", "delete-sync:216", "-k", "1",
                        "--no-live", "--json", str(out)])
    (m,) = json.loads(out.read_text())["mutants"]
    assert code == 0 and m["status"] == "killed" and m["sanitizer_killed"], m
