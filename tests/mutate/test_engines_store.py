"""Engines and the result store: the tiny campaign on a loopback dask cluster gives the local
run's verdicts; an interrupted campaign resumes from its store without re-running what it
finished, and the resumed report equals a fresh run's; the JSON's top-level `mutants` and
`engine`; the store fails closed on a file it cannot read; per-task deadlines in a thread."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ldssan.cli import main as ldssan_main
from ldssan.mutate import report
from ldssan.mutate.records import PUBLIC_STATUS, CampaignRecord, KernelRecord, MutantRecord
from ldssan.mutate.store import BASELINE, Store, StoreError
from ldssan.mutate.target import locate, source_digest
from ldssan.mutate.worker import Task, evaluate

from .conftest import TINY_ARGS

# what a verdict is, per mutant (times and pids differ between runs)
VERDICT = ("status", "sanitizer", "lint", "output_first", "output_fails", "output_launches", "rules", "lint_rules",
           "equivalence", "reason", "not_sync_bug", "missed_sync")


def _verdicts(record: dict) -> dict:
    return {m["id"]: {k: m[k] for k in VERDICT} for k in record["kernels"] for m in k["mutants"]}


def _tables(record: dict) -> tuple:
    """The per-mutant table rows and the summary without times: what must not depend on how
    (or in how many sittings) the campaign ran."""
    kernels = []
    for k in record["kernels"]:
        rec = KernelRecord(k["kernel"], k["name"], k["path"], status=k["status"], cases=k["cases"],
                           mutants=[MutantRecord(**m) for m in k["mutants"]])
        rows = [line for line in report.kernel_markdown(rec).splitlines() if line.startswith("| ")]
        kernels.append((rows, {key: v for key, v in k["summary"].items() if key != "seconds"}))
    return tuple(kernels)


def _mutate(kernel, *extra) -> tuple[int, dict]:
    out = kernel.parent / f"out-{len(list(kernel.parent.glob('out-*')))}.json"
    code = ldssan_main(["mutate", str(kernel), *TINY_ARGS, "--json", str(out), *extra])
    return code, json.loads(out.read_text())


@pytest.fixture
def kernel(write_kernel):
    return Path(write_kernel())


@pytest.mark.slow  # starts a dask local cluster (about 25 s on 2 cores)
def test_dask_local_cluster_gives_the_local_verdicts(tiny_campaign, kernel):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'ldssan[dask]')")
    _code, local, _md = tiny_campaign
    code, dask = _mutate(kernel, "--cluster", "local:2")
    assert code == 0 and dask["ok"]
    assert dask["engine"] == {"name": "dask", "workers": 2} and local["engine"] == {"name": "local", "workers": 2}
    assert _verdicts(dask) == _verdicts(local)
    assert _tables(dask) == _tables(local)


def test_resume_skips_done_mutants_and_rebuilds_the_report(tiny_campaign, kernel, tmp_path):
    _code, fresh, _md = tiny_campaign
    store = tmp_path / "results.jsonl"
    ids = [m["id"] for m in fresh["mutants"]]
    first = ids[:3]
    code, part = _mutate(kernel, "-j", "1", "--store", str(store), "--only", ",".join(first))
    assert code == 0 and [m["id"] for m in part["mutants"]] == first
    lines = store.read_text().splitlines()
    assert len(lines) == 1 + len(first)  # the baseline and one line per finished mutant

    # the "interrupted" campaign, resumed over the full set: the 3 done are taken from the store
    code, whole = _mutate(kernel, "-j", "2", "--store", str(store), "--resume")
    assert code == 0 and whole["resumed"] == len(first)
    after = store.read_text().splitlines()
    assert after[:len(lines)] == lines  # the done ones were not re-run: their lines are untouched
    assert len(after) == 1 + len(ids)  # every other mutant once; no baseline re-run
    stored = [json.loads(line) for line in after]
    assert [e["id"] for e in stored].count(BASELINE) == 1
    assert sorted(e["id"] for e in stored if e["kind"] == "mutant") == sorted(ids)
    assert {e["digest"] for e in stored} == {source_digest(str(kernel))}
    assert _verdicts(whole) == _verdicts(fresh)
    assert _tables(whole) == _tables(fresh)

    # everything done: nothing runs, and the report is the store's
    code, again = _mutate(kernel, "-j", "1", "--store", str(store), "--resume")
    assert code == 0 and again["resumed"] == len(ids) and store.read_text().splitlines() == after
    assert again["mutants"] == whole["mutants"]


def test_json_has_the_mutants_list_and_the_engine(tiny_campaign):
    _code, record, _md = tiny_campaign
    assert record["engine"] == {"name": "local", "workers": 2}
    nested = [m for k in record["kernels"] for m in k["mutants"]]
    assert [m["id"] for m in record["mutants"]] == [m["id"] for m in nested]
    for flat, full in zip(record["mutants"], nested):
        assert flat["status"] == PUBLIC_STATUS[full["status"]] and flat["detail"] == full["status"]
        assert flat["status"] in {"killed", "survived", "equivalent", "not_compiled", "crash", "timeout"}
        assert flat["sanitizer_killed"] == full["sanitizer"] and flat["lint_killed"] == full["lint"]
        assert flat["output_killed_1"] == full["output_first"]
        if full["output_first"] is not None:
            assert flat["output_killed_k"] == (full["output_fails"] > 0)
        first = (full["rules"] or full["lint_rules"] or [None])[0]
        assert flat["rule"] == (first and f"{first['code']} {first['name']}")
        edit = full["edits"][0]
        assert flat["diff"].startswith(f"L{edit['line']}") and edit["before"] in flat["diff"]
        assert "\n" not in flat["diff"]
    # every survivor says why no rule saw it; killed and equivalent ones need no excuse
    for m in nested:
        assert bool(m["reason"]) == (m["status"] == "survived"), m
    hang = next(m for m in record["mutants"] if m["detail"] == "hang")
    assert hang["status"] == "crash"


def _entry(ident: str) -> str:
    return json.dumps({"store": "ldssan.mutate/1", "kind": "mutant", "digest": "d", "id": ident,
                       "config": {"launches": 2, "policy": "round-robin"}, "record": {"status": "killed"}})


def test_store_drops_a_torn_last_line_and_refuses_a_corrupt_one(tmp_path):
    path = tmp_path / "s.jsonl"
    settings = {"launches": 2, "policy": "round-robin"}
    path.write_text(_entry("a") + "\n" + _entry("b")[:30])  # the writer died mid-line
    s = Store(str(path))
    assert s.torn and s.get("d", "a", settings) is not None and s.get("d", "b", settings) is None
    s.put("mutant", "d", "b", settings, {"status": "survived"})
    again = Store(str(path))  # the torn tail was cut: the new line is whole and readable
    assert again.get("d", "b", settings)["record"] == {"status": "survived"}
    assert again.get("d", "a", {"launches": 8, "policy": "round-robin"}) is None  # other K: not reused

    path.write_text(_entry("a") + "\n{not json\n" + _entry("b") + "\n")
    with pytest.raises(StoreError, match=r"s\.jsonl:2: not a campaign store line"):
        Store(str(path))


def test_cli_refuses_bad_store_resume_and_cluster_values(tmp_path, capsys, write_kernel):
    path = write_kernel()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\n{"b": 2}\n')
    assert ldssan_main(["mutate", path, "--store", str(bad), "--no-live"]) == 2
    assert "--store" in capsys.readouterr().err
    assert ldssan_main(["mutate", path, "--resume", "--no-live"]) == 2
    assert "--resume needs --store" in capsys.readouterr().err
    for value in ("local:0", "udp://x:1", "tcp://nohost"):
        with pytest.raises(SystemExit) as exc:
            ldssan_main(["mutate", path, "--cluster", value])
        assert exc.value.code == 2


def test_a_worker_with_another_kernel_file_refuses_the_task(write_kernel):
    path = write_kernel()
    out = evaluate(Task(path, locate(path), "x", (), 1, "round-robin", 60, digest="0" * 64))
    assert out.status == "crashed" and out.error.startswith("SourceMismatch:")


def test_deadline_fires_in_a_worker_thread(write_kernel):
    """dask runs a task in a thread, where no SIGALRM arrives: the deadline raises there."""
    from .kernel_source import RING_KERNEL

    busy = RING_KERNEL.replace("    def run(mod):\n", "    def run(mod):\n        import time\n"
                                                       "        t0 = time.time()\n"
                                                       "        while time.time() - t0 < 30:\n"
                                                       "            pass\n")
    path = write_kernel(busy, "busy_kernel")
    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "out", evaluate(Task(path, locate(path), "x", (), 1, "round-robin", 0.5))))
    t.start()
    t.join(20)
    assert not t.is_alive() and result["out"].status == "timeout" and "0.5 s" in result["out"].error


def test_resumed_count_and_engine_are_reported():
    rec = CampaignRecord([], {"launches": 2, "policy": "round-robin"}, resumed=3,
                         engine={"name": "dask", "workers": 4})
    assert "3 mutant results resumed from the store" in report.summary_markdown(rec)
    assert "engine dask, 4 workers" in report.summary_markdown(rec)
