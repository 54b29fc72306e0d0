"""A mutation campaign: plan the mutants of each kernel, gate on the clean baseline, run every
mutant on an engine, and classify the results into records.

    record = run_campaign(["ldssan.kernels.rmsnorm"], CampaignConfig(launches=8, jobs=2))

The parent never imports FlyDSL: it parses the kernel files (operators), schedules tasks and
collects `Outcome`s. Tasks run on an engine (`engines.LocalEngine`: worker processes of this
machine, the default; `dask_engine.DaskEngine` with `cluster=`). Exactly one mutation is
applied per task, and every mutant of a kernel waits for that kernel's clean baseline,
which must report no violation and pass every output-check launch; otherwise the kernel's
campaign stops with that finding.

With `store=` every finished variant is appended to a JSON-lines store (`store.py`) as it
arrives; with `resume=True` variants the store already holds (same kernel file digest, same
mutant id, same K and policy) are not run again, and the record is built from the store.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, fields, replace

from ldssan.variants import keep_temp

from .engines import Engine, LocalEngine
from .equivalence import strengthening, survivor_reason
from .interrupt import CampaignInterrupted, NoStop
from .syncbug import NOT_A_SYNC_BUG, RACE_FREE_PAIRS, survivor_class, sync_bug_reason
from .operators import Mutant, find_mutants
from .records import HANG_ERRORS, CampaignRecord, KernelRecord, MutantRecord, distinct_rules
from .store import BASELINE, Store, verdict_settings
from .target import MissingKernel, Target, kernel_name, locate, source_digest
from .worker import Outcome, Task


@dataclass
class CampaignConfig:
    launches: int = 8  # K: output-check launches per case (policies, then random seeds)
    jobs: int = os.cpu_count() or 1  # worker processes (local engine)
    timeout: float = 120.0  # seconds per mutant (sanitized launch + K launches)
    policy: str = "round-robin"  # scheduler policy of the sanitizer's launch
    operators: tuple[str, ...] | None = None  # None: every registered operator
    only: tuple[str, ...] | None = None  # run only these mutant ids
    cluster: str | None = None  # None: local processes; "local:N" or "tcp://host:port": dask
    store: str | None = None  # JSON-lines result store (appended as results arrive)
    resume: bool = False  # skip the variants the store already holds
    pytest: tuple[str, ...] | None = None  # FILE::TEST specs: cases from pytest tests (pytest_case.py)


class Listener:
    """Progress callbacks of a campaign (the live table implements them); no-ops here."""

    def planned(self, kernels: list[KernelRecord]) -> None: ...

    def message(self, text: str) -> None: ...

    def baseline(self, kernel: KernelRecord) -> None: ...

    def mutant(self, kernel: KernelRecord, mutant: MutantRecord) -> None: ...


def plan(spec: str, operators=None, only=None, pytest=None) -> tuple[Target, list[Mutant]]:
    """The target and its mutants (raises MissingKernel when the kernel does not exist)."""
    target = locate(spec)
    if pytest:
        target = replace(target, pytest=tuple(os.path.abspath(p.partition("::")[0]) + "::" + p.partition("::")[2]
                                              for p in pytest))
    with open(target.path, encoding="utf-8") as f:
        mutants = find_mutants(f.read(), target.path, operators)
    if only:
        mutants = [m for m in mutants if m.id in only]
    return target, mutants


def _record_of(m: Mutant) -> MutantRecord:
    return MutantRecord(m.id, m.operator, m.line, m.diff(), m.note, m.to_dict()["edits"])


def _lint_key(r: dict) -> tuple:
    return r["code"], r["line"], r.get("other_line")


def classify(rec: MutantRecord, out: Outcome, schedule: list[str], clean_lint=frozenset(),
             clean_sync: dict | None = None, reliance: dict | None = None, kernel_file: str = "") -> MutantRecord:
    """Fill a mutant record from its worker outcome. `clean_lint`: the (code, line, other
    line) of the clean kernel's lint findings; only new ones are a lint kill. `clean_sync`:
    the clean kernel's sync skeleton, for the "not a sync bug" criterion, and `reliance`
    its barrier reliance table, for the survivor classes (syncbug.py)."""
    rec.seconds, rec.error = out.seconds, out.error
    rec.rules = distinct_rules(out.violations)
    rec.lint_rules = [r for r in distinct_rules(out.lint) if _lint_key(r) not in clean_lint]
    if out.status != "ran":
        rec.status = out.status
        if out.status == "equivalent":
            rec.equivalence = "identical instrumented IR"
        if out.status == "crashed" and any(h in out.error for h in HANG_ERRORS):
            rec.status = "hang"
        return rec
    rec.sanitizer = bool(out.violations)
    rec.lint = bool(rec.lint_rules)
    first = schedule[0] if schedule else None
    rec.output_launches = len(out.launches)
    rec.output_fails = sum(1 for launch in out.launches if launch["ok"] is False)
    rec.output_errors = sum(1 for launch in out.launches if launch["error"])
    rec.output_first = any(launch["ok"] is False for launch in out.launches if launch["policy"] == first)
    fails = [launch for launch in out.launches if launch["ok"] is False]
    rec.first_fail_policy = fails[0]["policy"] if fails else None
    if rec.output_errors and not rec.error:
        rec.error = next(launch["error"] for launch in out.launches if launch["error"])
    rec.status = "killed" if rec.sanitizer or rec.lint or rec.output_fails else "survived"
    if rec.output_fails and not rec.sanitizer and not rec.lint:
        why = sync_bug_reason(rec, clean_sync, out.sync, out.launches, out.reliance)
        if why is None:
            by_pairs = sync_bug_reason(rec, clean_sync, out.sync, out.launches) is not None
            rec.not_sync_bug = NOT_A_SYNC_BUG.format(k=rec.output_launches, pairs=RACE_FREE_PAIRS if by_pairs else "")
        else:
            rec.missed_sync = f"missed sync bug? {why}"
    if rec.status == "survived":
        why = strengthening(rec.edits)
        if why is not None:
            rec.status, rec.equivalence = "equivalent", f"strengthens synchronization: {why}"
        else:
            rec.reason = survivor_reason(rec.operator, rec.output_launches)
            if rec.output_errors:  # a launch that raises is no detection, but it is no pass either
                rec.reason = (f"no runtime rule, no new lint finding, no wrong output; but {rec.output_errors} of "
                              f"{rec.output_launches} output-check launches raised ({rec.error}): a failure that "
                              f"depends on the schedule, a possible missed sync bug")
            explained = survivor_class(rec, clean_sync, out.sync, reliance, kernel_file, out.reliance)
            if explained is not None:
                rec.survivor_class, rec.reason = explained
    return rec


def gate(kernel: KernelRecord, out: Outcome) -> str | None:
    """Why the clean baseline fails the gate, or None if it passes."""
    if out.status == "not-run":
        return f"the test case did not run: {out.error}"
    if out.status != "ran":
        return f"the clean kernel did not run ({out.status}): {out.error}"
    if out.violations:
        v = out.violations[0]
        other = f" against line {v['other_line']}" if v.get("other_line") else ""
        return (f"the clean kernel has {len(distinct_rules(out.violations))} sanitizer finding(s): first "
                f"{v['code']} {v['name']} at line {v['line']}{other}: {v.get('message', '')}")
    bad = [launch for launch in out.launches if launch["ok"] is not True]
    if bad:
        b = bad[0]
        what = f"raised {b['error']}" if b["error"] else "failed its check"
        return (f"the clean kernel fails its output check on {len(bad)}/{len(out.launches)} launches; first: "
                f"case {b['case']} under {b['policy']} {what}")
    return None


def run_campaign(specs: list[str], config: CampaignConfig | None = None,
                 listener: Listener | None = None, stop=None) -> CampaignRecord:
    """Run the campaign. `stop` (`interrupt.StopSignals`) ends it early: the workers are
    stopped, and the record comes back partial (`record.interrupted` names the signal)."""
    config = config or CampaignConfig()
    listener = listener or Listener()
    stop = stop or NoStop()
    t0 = time.perf_counter()
    kernels: list[KernelRecord] = []
    plans: dict[str, tuple[Target, list[Mutant]]] = {}
    for spec in specs:
        rec = KernelRecord(spec, kernel_name(spec))
        try:
            target, mutants = plan(spec, config.operators, config.only, config.pytest)
        except MissingKernel as exc:
            rec.status, rec.message = "skipped", str(exc)
            listener.message(f"{spec}: skipped: {rec.message}")
        else:
            rec.name, rec.path, rec.digest = target.name, target.path, source_digest(target.path)
            rec.mutants = [_record_of(m) for m in mutants]
            plans[spec] = (target, mutants)
        kernels.append(rec)
    label_kernels(kernels)
    listener.planned(kernels)
    record = CampaignRecord(kernels, config={k: v for k, v in asdict(config).items()},
                            machine={"python": platform.python_version(), "cpu": platform.machine(),
                                     "cores": os.cpu_count(), "jobs": config.jobs})
    if plans:
        cache_dir = tempfile.mkdtemp(prefix="ldssan-mutate-cache-")
        try:
            stop.check()
            engine = _engine(config, cache_dir)
            record.engine = {"name": engine.name, "workers": engine.workers}
            record.resumed = _execute(kernels, plans, config, listener, engine, stop)
        except CampaignInterrupted as exc:
            record.interrupted = exc.name
        finally:
            if not keep_temp():
                shutil.rmtree(cache_dir, ignore_errors=True)
        if config.store:
            _rebuild(kernels, Store(config.store), verdict_settings(config))
    record.seconds = time.perf_counter() - t0
    return record


def label_kernels(kernels: list[KernelRecord]) -> None:
    """Table labels that tell kernels apart: `block.reduce` and `warp.reduce`, not two `reduce`."""
    for _ in range(3):
        seen: dict[str, int] = {}
        for k in kernels:
            seen[k.name] = seen.get(k.name, 0) + 1
        clash = [k for k in kernels if seen[k.name] > 1]
        if not clash:
            return
        for k in clash:
            parts = k.kernel.removesuffix(".py").replace(os.sep, ".").split(".")
            depth = k.name.count(".") + 2
            k.name = ".".join(parts[-depth:])


def _engine(config: CampaignConfig, cache_dir: str) -> Engine:
    if config.cluster:
        from .dask_engine import DaskEngine  # dask is optional: imported only when asked for

        return DaskEngine(config.cluster, cache_dir)
    return LocalEngine(config.jobs, cache_dir)


_MUTANT_FIELDS = {f.name for f in fields(MutantRecord)}


def _restore(rec: MutantRecord, stored: dict) -> None:
    for name, value in stored.items():
        if name in _MUTANT_FIELDS:
            setattr(rec, name, value)


def _rebuild(kernels: list[KernelRecord], store: Store, settings: dict) -> None:
    """The record from the store: every planned mutant's result as the store holds it."""
    for k in kernels:
        for m in k.mutants:
            entry = store.get(k.digest, m.id, settings)
            if entry is not None:
                _restore(m, entry["record"])


_SLICE = 0.25  # seconds between looks at the stop signals while waiting for results


def _wait(engine: Engine, backstop: float, stop):
    """The next finished tasks, or None when none finished within `backstop` seconds; raises
    `CampaignInterrupted` as soon as a stop signal arrived."""
    deadline = time.monotonic() + backstop
    while True:
        stop.check()
        done = engine.wait(min(_SLICE, max(0.0, deadline - time.monotonic())))
        if done is not None or time.monotonic() >= deadline:
            return done


def _execute(kernels: list[KernelRecord], plans, config: CampaignConfig, listener: Listener,
             engine: Engine, stop=None) -> int:
    """Run every variant not in the store; the number of mutant results taken from it."""
    stop = stop or NoStop()
    by_spec = {k.kernel: k for k in kernels}
    store = Store(config.store) if config.store else None
    settings = verdict_settings(config)
    resumed = 0
    clean_sync: dict[str, dict | None] = {}
    clean_reliance: dict[str, dict | None] = {}

    def stored(k: KernelRecord, ident: str) -> dict | None:
        entry = store.get(k.digest, ident, settings) if store is not None and config.resume else None
        return None if entry is None else entry["record"]

    def task_for(spec: str, mutant: Mutant | None, clean_ir=None) -> Task:
        target, digest = plans[spec][0], by_spec[spec].digest
        if mutant is None:
            return Task(spec, target, None, (), config.launches, config.policy, config.timeout, digest=digest)
        return Task(spec, target, mutant.id, mutant.edits, config.launches, config.policy, config.timeout,
                    tuple(clean_ir), digest)

    def baseline_done(k: KernelRecord, base: dict) -> None:
        nonlocal resumed
        k.baseline, k.cases, k.schedule = base["baseline"], base["cases"], base["schedule"]
        clean_sync[k.kernel] = base.get("sync")  # absent in a store written before it was kept
        clean_reliance[k.kernel] = base.get("reliance")
        if base["why"] is not None:
            k.status, k.message = "baseline-failed", base["why"]
            for m in k.mutants:
                m.status, m.error = "not-run", "clean baseline failed"
            listener.baseline(k)
            return
        k.status = "ran" if k.mutants else "no-mutants"
        listener.baseline(k)
        for mutant, rec in zip(plans[k.kernel][1], k.mutants):
            old = stored(k, mutant.id)
            if old is None:
                engine.submit(task_for(k.kernel, mutant, base["ir"]))
                continue
            _restore(rec, old)
            k.seconds += rec.seconds
            resumed += 1
            listener.mutant(k, rec)

    def finish(task: Task, out: Outcome) -> None:
        k = by_spec[task.kernel]
        k.seconds += out.seconds
        if task.mutant_id is None:
            base = {"baseline": {"status": out.status, "seconds": out.seconds, "error": out.error,
                                 "rules": distinct_rules(out.violations), "lint": distinct_rules(out.lint),
                                 "launches": len(out.launches),
                                 "failed_launches": sum(1 for launch in out.launches if launch["ok"] is not True)},
                    "cases": out.cases, "ir": list(out.ir), "sync": out.sync, "reliance": out.reliance,
                    "why": gate(k, out),
                    "schedule": sorted({launch["policy"] for launch in out.launches},
                                       key=[launch["policy"] for launch in out.launches].index)}
            if store is not None and out.status == "ran":  # a baseline that did not run is retried next time
                store.put("baseline", k.digest, BASELINE, settings, base)
            baseline_done(k, base)
            return
        rec = next(m for m in k.mutants if m.id == task.mutant_id)
        classify(rec, out, k.schedule, frozenset(_lint_key(r) for r in k.baseline.get("lint", [])),
                 clean_sync.get(k.kernel), clean_reliance.get(k.kernel), k.path)
        if store is not None:
            store.put("mutant", k.digest, rec.id, settings, rec.to_dict())
        listener.mutant(k, rec)

    try:
        for spec in plans:
            base = stored(by_spec[spec], BASELINE)
            if base is not None:
                baseline_done(by_spec[spec], base)
            else:
                engine.submit(task_for(spec, None))
        backstop = config.timeout + 60.0
        while engine.pending():
            done = _wait(engine, backstop, stop)
            if done is None:  # no worker answered in time: they are stuck outside Python
                listener.message(f"no worker answered for {backstop:.0f} s: stopping the {engine.name} workers")
                for task in engine.abandon():
                    finish(task, Outcome(task.kernel, task.mutant_id, "timeout",
                                         error=f"no result within {backstop:.0f} s (worker stalled)"))
                break
            for task, out in done:
                finish(task, out)
    except CampaignInterrupted:
        engine.abandon()  # kill the workers now: the running mutants' results are not waited for
        raise
    finally:
        engine.close()
    return resumed
