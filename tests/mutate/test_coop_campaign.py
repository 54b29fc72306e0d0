"""Campaigns over FlyDSL's coop primitives (flydsl.extension.coop, installed with flydsl):
the module is mutated in place of the package's (relative imports made absolute, line for
line), the cases build their own kernel around the mutant's primitive, and the IR-identity
test reads that kernel's build."""

from __future__ import annotations

import ast
import json

from ldssan.cli import main as ldssan_main
from ldssan.mutate.campaign import plan
from ldssan.mutate.target import package_edits
from ldssan.variants import load_variant

from .conftest import TINY_ARGS

REDUCE = "flydsl.extension.coop.block.reduce"


def test_package_edits_make_relative_imports_absolute_line_for_line():
    target, _ = plan(REDUCE)
    edits = package_edits(target)
    with open(target.path, encoding="utf-8") as f:
        relative = [n.lineno for n in ast.walk(ast.parse(f.read())) if isinstance(n, ast.ImportFrom) and n.level]
    assert sorted(e.line for e in edits) == relative and relative
    assert all(e.text.startswith("from flydsl.") for e in edits), [e.text for e in edits]
    module = load_variant(REDUCE, list(edits), tag="test")  # imports outside its package
    assert module.BlockReduce is not None and module.__name__.startswith("_ldssan_test_reduce_")


def test_block_reduce_campaign(tmp_path):
    out = tmp_path / "out.json"
    # 95: the barrier between the warp partials' stores and their loads; 173: a barrier on a
    # path none of the four algorithms' cases reach
    code = ldssan_main(["mutate", REDUCE, "--only", "delete-sync:95,delete-sync:173", "-j", "1", *TINY_ARGS,
                        "--json", str(out)])
    record = json.loads(out.read_text())
    assert code == 0 and record["ok"]
    (kernel,) = record["kernels"]
    assert len(kernel["cases"]) == 4 and kernel["baseline"]["failed_launches"] == 0
    by_id = {m["id"]: m for m in kernel["mutants"]}
    gone = by_id["delete-sync:95"]
    assert gone["status"] == "killed" and gone["sanitizer"] and gone["rules"][0]["code"] == "LDS001"
    # the case kernel's build is compared (the module has no JIT function of its own)
    assert by_id["delete-sync:173"]["status"] == "equivalent"
    assert by_id["delete-sync:173"]["equivalence"] == "identical instrumented IR"


def test_kernels_with_one_stem_get_distinct_labels():
    from ldssan.mutate.campaign import label_kernels
    from ldssan.mutate.records import KernelRecord

    ks = [KernelRecord(f"{REDUCE}", "reduce"), KernelRecord("flydsl.extension.coop.warp.reduce", "reduce"),
          KernelRecord("ldssan.kernels.gemm", "gemm")]
    label_kernels(ks)
    assert [k.name for k in ks] == ["block.reduce", "warp.reduce", "gemm"]
