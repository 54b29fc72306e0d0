"""`ldssan rows` verdicts that must not mislead. Before: a --reference that differs from
the output on every run, identically, was blamed on "global memory ordering, global
atomics order ..."; --observed files holding the same values in another dtype (a float64
or bf16 dump of a float32 output) were reported as varying."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from ldssan import rows
from ldssan.cli import main
from ldssan.runtime.emu import emulate
from tests.faults import cli_targets

TARGETS = os.path.relpath(Path(__file__).parents[1] / "faults" / "cli_targets.py")


def test_a_reference_that_always_differs_is_a_wrong_kernel_or_reference_not_a_race(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["rows", f"{TARGETS}::tiny", "--runs", "2", "--reference", f"{TARGETS}::tiny_wrong_reference",
               "--json", str(out)])
    text = " ".join(capsys.readouterr().out.split())
    assert rc == 1  # the output is wrong: not a pass
    assert ("DIFFERS FROM THE REFERENCE: 64 element(s) (rows 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, … (64 rows)) "
            "differ from the reference on every run, identically in all 2 runs, and no LDS race reaches them: "
            "a wrong kernel or a wrong reference, not a race") in text
    assert "UNEXPLAINED" not in text and "global memory ordering" not in text and "atomics order" not in text
    doc = json.loads(out.read_text())
    assert doc["reference_mismatch"] == 64 and doc["unexplained"] == 0
    assert doc["outputs"][0]["reference_mismatch_rows"] == list(range(64))


def test_outputs_that_vary_between_runs_are_still_unexplained_variation():
    rep = rows.explain(_varies, runs=2)
    assert rep.unexplained == rep.varying == 1 and rep.mismatch == 0
    assert "UNEXPLAINED" in rows.render_text(rep)


_calls = []


def _varies():
    """Launches the tiny kernel, then returns an output that differs between calls (as
    global atomics order would make it)."""
    out = cli_targets.tiny().float()
    _calls.append(1)
    out[0] += len(_calls)
    return out


def _saved(tmp_path, name, tensor) -> str:
    path = tmp_path / name
    torch.save(tensor, path)
    return str(path)


def test_observed_files_of_another_dtype_are_refused_not_reported_as_varying(tmp_path, capsys):
    with emulate():
        out = cli_targets.tiny()
    same = [_saved(tmp_path, "a.pt", out), _saved(tmp_path, "b.pt", out.clone())]
    assert main(["rows", f"{TARGETS}::tiny", "--observed", *same]) == 0
    assert "nothing varies" in capsys.readouterr().out
    for dtype in (torch.float64, torch.bfloat16, torch.int64):
        other = _saved(tmp_path, f"c_{dtype}.pt", out.to(dtype))
        assert main(["rows", f"{TARGETS}::tiny", "--observed", same[0], other]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ldssan rows: error: --observed: output 'out' is int32 in {same[0]} but "
                       f"{str(dtype).removeprefix('torch.')} in {other}: save every run in the dtype the kernel "
                       "writes (runs are compared bit for bit)"], err


def test_compare_refuses_runs_of_different_dtypes():
    a = [("out", torch.ones(4))]
    b = [("out", torch.ones(4, dtype=torch.float64))]
    with pytest.raises(rows.RowsError, match="output 'out' is float32 in run 1 but float64 in run 2"):
        rows.compare([a, b])
