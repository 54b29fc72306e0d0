"""Campaigns on the small ring kernel: a tiny campaign end to end through the CLI, the
clean-baseline gate, the classification of equivalent, hung and timed-out mutants, and the
counting rules (Wilson intervals, what is not a detection)."""

from __future__ import annotations

import pytest

from ldssan.cli import main as ldssan_main
from ldssan.mutate import CampaignConfig, OPERATORS, find_mutants, operator, run_campaign
from ldssan.mutate.campaign import classify
from ldssan.mutate.records import STATUSES, MutantRecord, wilson
from ldssan.mutate.source import Sync
from ldssan.mutate.target import locate
from ldssan.mutate.worker import Outcome, Task, evaluate, normalize_ir

from .kernel_source import RING_KERNEL, line_of

BARRIER = line_of("fx.gpu.barrier()")
LOOP_LOAD = line_of("v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)")
SIGNAL = line_of("fx.rocdl.s_barrier_signal(-1)")
WAIT_DS = line_of("fx.rocdl.s_wait_dscnt(0)")


def _mutant(record: dict, ident: str) -> dict:
    return next(m for m in record["kernels"][0]["mutants"] if m["id"] == ident)


def test_tiny_campaign_end_to_end(tiny_campaign):
    code, record, md = tiny_campaign
    assert code == 0 and record["ok"]
    (kernel,) = record["kernels"]
    assert kernel["status"] == "ran" and kernel["cases"] == ["ring"]
    assert kernel["baseline"]["rules"] == [] and kernel["baseline"]["failed_launches"] == 0
    assert kernel["schedule"] == ["round-robin", "reverse"]
    assert len(kernel["mutants"]) == len(find_mutants(RING_KERNEL, "k.py"))
    assert all(m["status"] in STATUSES for m in kernel["mutants"])

    # the publication barrier deleted: the sanitizer names the racy read and the write
    gone = _mutant(record, f"delete-sync:{BARRIER}")
    assert gone["status"] == "killed" and gone["sanitizer"] is True
    assert any(r["code"] == "LDS001" and r["line"] == LOOP_LOAD for r in gone["rules"]), gone["rules"]
    # a barrier that is only waited on: the emulator finds every wave blocked -> a hang, not a kill
    hang = _mutant(record, f"delete-sync:{SIGNAL}")
    assert hang["status"] == "hang" and hang["sanitizer"] is None and "DeadlockError" in hang["error"]
    # dscnt(1) leaves the store in flight at the raw signal: no runtime rule fires (a later
    # iteration's wait retires it before it is read) and the output is right, but the static
    # fence-pairing check sees the unretired store -> killed by the lint only, counted apart
    weak = _mutant(record, f"wait-plus-one:{WAIT_DS}")
    assert (weak["status"], weak["sanitizer"], weak["lint"], weak["output_fails"]) == ("killed", False, True, 0)
    assert [(r["code"], r["other_line"]) for r in weak["lint_rules"]] == [("LDS040", SIGNAL)]
    assert record["summary"]["lint_only"] >= 1
    # every counted mutant has its verdicts filled in
    for m in kernel["mutants"]:
        if STATUSES[m["status"]]:
            assert m["sanitizer"] is not None and m["output_launches"] == 2, m

    s = record["summary"]
    assert s["counted"] == sum(1 for m in kernel["mutants"] if STATUSES[m["status"]])
    assert s["hang"] >= 1
    k, n = s["killed_by_sanitizer"]["k"], s["killed_by_sanitizer"]["n"]
    assert s["killed_by_sanitizer"]["wilson95"] == [round(x, 4) for x in wilson(k, n)]
    assert "| kernel | mutants | ran | killed by sanitizer (1 launch)" in md
    assert f"| delete-sync:{BARRIER} | L{BARRIER}: `fx.gpu.barrier()` deleted | LDS001 raw-unpublished" in md


def test_baseline_gate_stops_the_campaign(write_kernel):
    racy = write_kernel(RING_KERNEL.replace("    fx.gpu.barrier()\n", ""), "racy_kernel")
    wrong = write_kernel(RING_KERNEL.replace("ring[it % NB][(tid + 32) % N] + 1", "ring[it % NB][(tid + 32) % N] + 2"),
                         "wrong_reference")
    record = run_campaign([racy, wrong], CampaignConfig(launches=2, jobs=2, timeout=60))
    assert not record.ok
    k_racy, k_wrong = record.kernels
    assert k_racy.status == "baseline-failed"
    assert "sanitizer finding" in k_racy.message and "LDS001" in k_racy.message
    assert k_wrong.status == "baseline-failed"
    assert "fails its output check on 2/2 launches" in k_wrong.message
    for k in record.kernels:
        assert k.mutants and all(m.status == "not-run" for m in k.mutants)
    assert record.summary()["counted"] == 0


def test_baseline_failure_exits_2(write_kernel, capsys):
    racy = write_kernel(RING_KERNEL.replace("    fx.gpu.barrier()\n", ""), "racy_kernel")
    assert ldssan_main(["mutate", racy, "-j", "1", "-k", "1", "--no-live", "--only", "none"]) == 2
    assert "baseline-failed" in capsys.readouterr().out


def test_equivalent_mutant_is_classified(write_kernel):
    @operator("test-touch-barrier", "append a comment to each barrier line (the IR cannot change)")
    def _touch(src):
        for stmt, _call, _kind in src.sync_statements({Sync.BARRIER}):
            yield src.replace(stmt, src.segment(stmt) + "  # touched", "comment only")

    try:
        record = run_campaign([write_kernel()], CampaignConfig(launches=1, jobs=1, timeout=60,
                                                               operators=("test-touch-barrier",)))
    finally:
        OPERATORS.pop("test-touch-barrier", None)
    (m,) = record.kernels[0].mutants
    assert m.status == "equivalent" and not m.counted
    assert m.output_launches == 0  # no output checks are spent on it
    assert record.summary()["equivalent"] == 1 and record.summary()["counted"] == 0


def test_in_process_evaluation_compares_instrumented_ir(write_kernel):
    path = write_kernel()
    target = locate(path)
    clean = evaluate(Task(path, target, None, (), 1, "round-robin", 60))
    assert clean.status == "ran" and not clean.violations and len(clean.ir) == 1
    (touch,) = [m for m in find_mutants(RING_KERNEL, path, ["delete-sync"]) if m.line == BARRIER]
    racy = evaluate(Task(path, target, touch.id, touch.edits, 1, "round-robin", 60, clean.ir))
    assert racy.status == "ran" and racy.ir != clean.ir and racy.violations


def test_missing_kernel_is_skipped_with_a_message(capsys):
    record = run_campaign(["ldssan.kernels.no_such_kernel"], CampaignConfig(jobs=1))
    (k,) = record.kernels
    assert k.status == "skipped" and "no module named 'ldssan.kernels.no_such_kernel'" in k.message
    assert ldssan_main(["mutate", "ldssan.kernels.no_such_kernel", "--no-live"]) == 1
    assert ldssan_main(["mutate", "ldssan.kernels.no_such_kernel", "--dry-run"]) == 0
    assert "skipped: no module named" in capsys.readouterr().out


def test_missing_kernel_file_is_named_by_its_stem_not_its_extension(tmp_path):
    missing = str(tmp_path / "missing_kernel.py")
    record = run_campaign([missing], CampaignConfig(jobs=1))
    (k,) = record.kernels
    assert k.status == "skipped" and k.name == "missing_kernel"  # it read "py" before
    assert k.message == f"no such kernel file: {missing}"


def test_dry_run_lists_every_site(write_kernel, capsys):
    path = write_kernel()
    assert ldssan_main(["mutate", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    for m in find_mutants(RING_KERNEL, path):
        assert f"  {m.id} " in out
    assert f"-{BARRIER}: fx.gpu.barrier()" in out


def test_timeout_is_classified_not_detected(write_kernel):
    slow = RING_KERNEL.replace("    def run(mod):\n", "    def run(mod):\n        import time; time.sleep(30)\n")
    path = write_kernel(slow, "slow_kernel")
    out = evaluate(Task(path, locate(path), "x", (), 1, "round-robin", 0.5))
    assert out.status == "timeout" and "0.5 s" in out.error
    rec = classify(MutantRecord("x", "op", 1, "", "", []), out, ["round-robin"])
    assert rec.status == "timeout" and not rec.counted and rec.sanitizer is None


@pytest.mark.parametrize("error, status", [("ring: DeadlockError: every live wave is blocked", "hang"),
                                           ("ring: EmuMemoryError: outside LDS", "crashed")])
def test_hangs_and_crashes_are_not_detections(error, status):
    out = Outcome("k", "x", "crashed", violations=[{"code": "LDS001", "name": "n", "line": 1}], error=error)
    rec = classify(MutantRecord("x", "op", 1, "", "", []), out, ["round-robin"])
    assert rec.status == status and not rec.counted and rec.sanitizer is None


def test_output_verdicts_one_launch_and_k_launches():
    launches = [{"case": "c", "policy": p, "ok": ok, "error": ""}
                for p, ok in (("round-robin", True), ("reverse", False), ("random(1)", True))]
    out = Outcome("k", "x", "ran", launches=launches)
    rec = classify(MutantRecord("x", "op", 1, "", "", []), out, ["round-robin", "reverse", "random(1)"])
    assert (rec.status, rec.sanitizer, rec.output_first, rec.output_fails) == ("killed", False, False, 1)
    assert rec.first_fail_policy == "reverse"


def test_wilson_interval():
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(12, 12)
    assert lo == pytest.approx(0.7575, abs=1e-4) and hi == 1.0
    lo, hi = wilson(4, 12)
    assert (round(lo, 3), round(hi, 3)) == (0.138, 0.609)


def test_normalize_ir_drops_locations_and_the_site_table():
    a = ('#loc = loc("/src/a.py":3:0)\nmodule attributes {ldssan.sites = "{\\22file\\22: \\22/src/a.py\\22}", '
         'ldssan.emu = "1"} {\n  %0 = arith.addi %a, %b : i32 loc(#loc3)\n  gpu.func @k(%x: i32 loc("/src/a.py":3:0))\n}')
    b = a.replace("/src/a.py", "/src/other_variant.py").replace("#loc3", "#loc7")
    assert normalize_ir(a) == normalize_ir(b)
    assert "loc(" not in normalize_ir(a) and "ldssan.sites" not in normalize_ir(a)
    assert normalize_ir(a) != normalize_ir(a.replace("arith.addi", "arith.subi"))


def test_a_mutant_that_does_not_trace_is_not_compiled(write_kernel):
    from ldssan.variants import Edit

    path = write_kernel()
    broken = (Edit(BARRIER, "fx.gpu.no_such_barrier()"),)
    out = evaluate(Task(path, locate(path), "broken", broken, 1, "round-robin", 60))
    assert out.status == "not-compiled" and "no_such_barrier" in out.error
    rec = classify(MutantRecord("broken", "op", BARRIER, "", "", []), out, ["round-robin"])
    assert rec.status == "not-compiled" and not rec.counted
