"""`ldssan rows`: varying output elements matched to the LDS race whose values reach them.

The kernels (tests/rows/kernels.py) are one workgroup per row; `pair_norm` skips its barrier
only in the wide rows, so exactly those rows can vary."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldssan import rows
from ldssan.cli import main
from ldssan.runtime import reset_caches
from ldssan.runtime.emu import codegen

from . import kernels as k

RUNS = 4
HERE = "tests/rows/kernels.py"


@pytest.fixture(scope="module", autouse=True)
def _fresh():
    reset_caches()


@pytest.fixture(scope="module")
def racy():
    return rows.explain(k.pair_norm, runs=RUNS)


def test_only_the_wide_rows_vary_and_every_varying_element_is_explained(racy):
    (out,) = racy.outputs
    assert out.shape == (8, k.N)
    assert out.varying_rows == k.WIDE_ROWS
    assert out.varying == len(k.WIDE_ROWS) * k.N  # every element of a wide row reads the other wave's half
    assert out.unexplained == 0 and racy.unexplained == 0
    # each varying element is blamed on a race, and a non-varying element never is
    assert not (out.varying_mask & (out.taint == 0)).any()
    assert {r for race in racy.races for r in race.rows} == set(k.WIDE_ROWS)
    assert sum(r.elements for r in racy.races) >= out.varying
    narrow = [r for r in range(8) if r not in k.WIDE_ROWS]
    assert not out.varying_mask[narrow].any() and not out.taint[narrow].any()


def test_each_race_names_both_lines_with_their_text(racy):
    assert racy.races and not racy.latent
    for race in racy.races:
        assert race.rule == "LDS001"
        assert race.this.startswith(f"{HERE}:35:") and "s[c]" in race.this_text
        assert race.other.startswith(f"{HERE}:28:") and race.other_text == "s[tid] = x * x"
    # the two reads of the line are two races: one per wave, one half of each wide row each
    halves = sorted(tuple(np.flatnonzero(((racy.outputs[0].taint >> np.uint64(r.index)) & np.uint64(1))[1]))[:1]
                    for r in racy.races)
    assert halves == [(0,), (k.HALF,)]


def test_clean_kernel_nothing_varies_nothing_blamed():
    rep = rows.explain(k.pair_norm_clean, runs=RUNS, reference=k.pair_norm_reference)
    assert rep.varying == 0 and rep.unexplained == 0
    assert not rep.races and not rep.latent and not rep.violations
    assert not rep.outputs[0].taint.any()
    assert "nothing varies" in rows.render_text(rep)


def test_reference_flags_elements_that_differ_from_it():
    rep = rows.explain(k.pair_norm, runs=2, reference=k.pair_norm_reference)
    assert rep.outputs[0].varying_rows == k.WIDE_ROWS  # wrong in some run, in the wide rows only
    assert rep.unexplained == 0


def test_global_atomics_order_is_unexplained_and_said_so():
    rep = rows.explain(k.atomic_sum, runs=RUNS)
    (out,) = rep.outputs
    assert out.varying and out.unexplained == out.varying
    assert not rep.races and not rep.latent
    text = rows.render_text(rep)
    assert "UNEXPLAINED" in text and "atomics" in text


def test_taint_is_off_unless_rows_asks_for_it(racy):
    # the plain translations carry no taint line; the taint ones are cached apart
    keys = list(codegen._CACHE)
    plain = [codegen._CACHE[x] for x in keys if not x.endswith(":taint")]
    tainted = [codegen._CACHE[x] for x in keys if x.endswith(":taint")]
    assert plain and tainted
    assert not any("R.t_" in p.source or "Tv" in p.source for p in plain)
    assert any("R.t_lds_load" in p.source for p in tainted)


def test_json_has_the_documented_shape(racy, tmp_path):
    data = json.loads(racy.to_json(tmp_path / "r.json"))
    assert data == json.loads((tmp_path / "r.json").read_text())
    assert data["schema"] == rows.SCHEMA
    assert data["runs"] == RUNS and len(data["policies"]) == RUNS
    assert all(isinstance(p, str) for p in data["policies"])
    (o,) = data["outputs"]
    assert set(o) >= {"name", "shape", "varying", "varying_rows"}
    assert o["shape"] == [8, k.N] and o["varying_rows"] == k.WIDE_ROWS
    for r in data["races"]:
        assert set(r) >= {"rule", "cause", "this", "other", "elements", "rows"}
        assert isinstance(r["elements"], int) and r["rows"] == k.WIDE_ROWS
    assert data["unexplained"] == 0 and data["latent"] == []


def test_policies_are_recorded_and_replayable():
    pols = rows.policies(16)
    assert len({str(p) for p in pols}) == 16
    from ldssan.runtime.emu.sched import Policy

    assert [Policy.parse(str(p)) for p in pols] == pols
    with pytest.raises(rows.RowsError):
        rows.explain(k.pair_norm, runs=1)


def test_png_is_written(racy, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "rows.png"
    rows.write_png(racy, path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def test_cli_writes_json_and_exits_1_on_variation(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["rows", f"{HERE}::pair_norm", "--runs", "2", "--json", str(out)])
    assert rc == 1
    assert json.loads(out.read_text())["outputs"][0]["varying_rows"] == k.WIDE_ROWS
    assert "LDS001" in capsys.readouterr().out
    assert main(["rows", f"{HERE}::pair_norm_clean", "--runs", "2"]) == 0
    assert main(["rows", f"{HERE}::no_such_function"]) == 2


def test_observed_outputs_are_explained_by_the_virtual_taint(tmp_path):
    # "hardware" outputs: two runs in which only row 3 differs (saved with torch.save)
    import torch

    base = k.pair_norm_reference()
    other = base.clone()
    other[3, 5] += 1.0
    paths = []
    for i, t in enumerate((base, other)):
        paths.append(tmp_path / f"run{i}.pt")
        torch.save(t, paths[-1])
    rep = rows.explain(k.pair_norm, observed=[torch.load(p) for p in paths])
    assert rep.observed and rep.runs == 2
    (out,) = rep.outputs
    assert out.varying == 1 and out.varying_rows == [3] and out.unexplained == 0
    assert main(["rows", f"{HERE}::pair_norm", "--observed", *map(str, paths)]) == 1
    assert main(["rows", f"{HERE}::pair_norm", "--observed", str(tmp_path / "missing.pt"), str(paths[0])]) == 2


def test_bundled_rmsnorm_race_reaches_its_rows_through_shuffles_and_buffer_stores():
    # barrier #1 deleted: wave 0 reads the partials unsynchronised; the value goes through a
    # butterfly of shuffles, LDS `total`, every wave, vector math and buffer stores
    import torch

    from ldssan.kernels import rmsnorm as rms
    from ldssan.variants import Edit, load_variant
    from tests.kernels.protocol import rmsnorm_sites

    mod = load_variant(rms, [Edit(rmsnorm_sites()["publish_partials"], None)], tag="rows_no_barrier_1")
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 1000, generator=gen).to(torch.bfloat16)
    g = torch.randn(1000, generator=gen).to(torch.bfloat16)
    rep = rows.explain(lambda: mod.rmsnorm(x, g), runs=RUNS)
    (out,) = rep.outputs
    assert out.varying and out.unexplained == 0
    assert {r.rule for r in rep.races} == {"LDS001"}
    assert all("partial" in r.this_text for r in rep.races)


def test_batched_runs_find_the_same_rows_and_races(racy):
    # `racy` ran at the automatic batch (independent workgroups: batched); one by one agrees
    assert racy.batch == rows.AUTO_BATCH > 1
    rep = rows.explain(k.pair_norm, runs=RUNS, batch=1)
    assert rep.batch == 1 and rep.to_dict()["batch"] == 1
    (out,) = rep.outputs
    assert out.varying_rows == k.WIDE_ROWS and out.unexplained == 0
    assert not (out.varying_mask & (out.taint == 0)).any()
    narrow = [r for r in range(8) if r not in k.WIDE_ROWS]
    assert not out.taint[narrow].any()
    assert sorted((r.this, r.other) for r in rep.races) == sorted((r.this, r.other) for r in racy.races)
