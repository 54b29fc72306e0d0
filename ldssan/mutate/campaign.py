"""A mutation campaign: plan the mutants of each kernel, gate on the clean baseline, run every
mutant in a worker process, and classify the results into records.

    record = run_campaign(["ldssan.kernels.rmsnorm"], CampaignConfig(launches=8, jobs=2))

The parent never imports FlyDSL: it parses the kernel files (operators), schedules tasks and
collects `Outcome`s. Workers (`worker.py`) come from a forkserver (or spawn) context and
import FlyDSL once each. Exactly one mutation is applied per task, and every mutant of a
kernel waits for that kernel's clean baseline, which must report no violation and pass
every output-check launch; otherwise the kernel's campaign stops with that finding.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue
import shutil
import signal
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass

from ldssan.variants import keep_temp

from .operators import Mutant, find_mutants
from .records import HANG_ERRORS, CampaignRecord, KernelRecord, MutantRecord, distinct_rules
from .target import MissingKernel, Target, locate
from .worker import Outcome, Task, evaluate, init_worker


@dataclass
class CampaignConfig:
    launches: int = 8  # K: output-check launches per case (policies, then random seeds)
    jobs: int = os.cpu_count() or 1  # worker processes
    timeout: float = 120.0  # seconds per mutant (sanitized launch + K launches)
    policy: str = "round-robin"  # scheduler policy of the sanitizer's launch
    operators: tuple[str, ...] | None = None  # None: every registered operator
    only: tuple[str, ...] | None = None  # run only these mutant ids


class Listener:
    """Progress callbacks of a campaign (the live table implements them); no-ops here."""

    def planned(self, kernels: list[KernelRecord]) -> None: ...

    def message(self, text: str) -> None: ...

    def baseline(self, kernel: KernelRecord) -> None: ...

    def mutant(self, kernel: KernelRecord, mutant: MutantRecord) -> None: ...


def plan(spec: str, operators=None, only=None) -> tuple[Target, list[Mutant]]:
    """The target and its mutants (raises MissingKernel when the kernel does not exist)."""
    target = locate(spec)
    with open(target.path, encoding="utf-8") as f:
        mutants = find_mutants(f.read(), target.path, operators)
    if only:
        mutants = [m for m in mutants if m.id in only]
    return target, mutants


def _record_of(m: Mutant) -> MutantRecord:
    return MutantRecord(m.id, m.operator, m.line, m.diff(), m.note, m.to_dict()["edits"])


def classify(rec: MutantRecord, out: Outcome, schedule: list[str]) -> MutantRecord:
    """Fill a mutant record from its worker outcome."""
    rec.seconds, rec.error = out.seconds, out.error
    rec.rules = distinct_rules(out.violations)
    if out.status != "ran":
        rec.status = out.status
        if out.status == "crashed" and any(h in out.error for h in HANG_ERRORS):
            rec.status = "hang"
        return rec
    rec.sanitizer = bool(out.violations)
    first = schedule[0] if schedule else None
    rec.output_launches = len(out.launches)
    rec.output_fails = sum(1 for launch in out.launches if launch["ok"] is False)
    rec.output_errors = sum(1 for launch in out.launches if launch["error"])
    rec.output_first = any(launch["ok"] is False for launch in out.launches if launch["policy"] == first)
    fails = [launch for launch in out.launches if launch["ok"] is False]
    rec.first_fail_policy = fails[0]["policy"] if fails else None
    if rec.output_errors and not rec.error:
        rec.error = next(launch["error"] for launch in out.launches if launch["error"])
    rec.status = "killed" if rec.sanitizer or rec.output_fails else "survived"
    return rec


def gate(kernel: KernelRecord, out: Outcome) -> str | None:
    """Why the clean baseline fails the gate, or None if it passes."""
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


class _Pool:
    """A ProcessPoolExecutor that knows its workers' pids (to stop a stalled one)."""

    def __init__(self, jobs: int, cache_dir: str) -> None:
        methods = mp.get_all_start_methods()
        self.ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
        self.pids = self.ctx.SimpleQueue()
        self.executor = ProcessPoolExecutor(max_workers=jobs, mp_context=self.ctx, initializer=_init,
                                            initargs=(cache_dir, self.pids))

    def submit(self, task: Task):
        return self.executor.submit(evaluate, task)

    def kill(self) -> None:
        """Stop every worker this pool started (by pid), then the pool."""
        pids = set()
        while not self.pids.empty():
            try:
                pids.add(self.pids.get())
            except (EOFError, OSError, queue.Empty):
                break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def _init(cache_dir: str, pids) -> None:
    pids.put(os.getpid())
    init_worker(cache_dir)


def run_campaign(specs: list[str], config: CampaignConfig | None = None,
                 listener: Listener | None = None) -> CampaignRecord:
    config = config or CampaignConfig()
    listener = listener or Listener()
    t0 = time.perf_counter()
    kernels: list[KernelRecord] = []
    plans: dict[str, tuple[Target, list[Mutant]]] = {}
    for spec in specs:
        rec = KernelRecord(spec, spec.rsplit(".", 1)[-1])
        try:
            target, mutants = plan(spec, config.operators, config.only)
        except MissingKernel as exc:
            rec.status, rec.message = "skipped", str(exc)
            listener.message(f"{spec}: skipped: {rec.message}")
        else:
            rec.name, rec.path = target.name, target.path
            rec.mutants = [_record_of(m) for m in mutants]
            plans[spec] = (target, mutants)
        kernels.append(rec)
    listener.planned(kernels)
    record = CampaignRecord(kernels, config={k: v for k, v in asdict(config).items()},
                            machine={"python": platform.python_version(), "cpu": platform.machine(),
                                     "cores": os.cpu_count(), "jobs": config.jobs})
    if plans:
        _execute(kernels, plans, config, listener)
    record.seconds = time.perf_counter() - t0
    return record


def _execute(kernels: list[KernelRecord], plans, config: CampaignConfig, listener: Listener) -> None:
    by_spec = {k.kernel: k for k in kernels}
    cache_dir = tempfile.mkdtemp(prefix="ldssan-mutate-cache-")
    pool = _Pool(max(1, config.jobs), cache_dir)
    pending: dict = {}
    retried: set = set()

    def submit(task: Task):
        pending[pool.submit(task)] = task

    def task_for(spec: str, mutant: Mutant | None, clean_ir=None) -> Task:
        target = plans[spec][0]
        if mutant is None:
            return Task(spec, target, None, (), config.launches, config.policy, config.timeout)
        return Task(spec, target, mutant.id, mutant.edits, config.launches, config.policy, config.timeout,
                    tuple(clean_ir))

    def finish(task: Task, out: Outcome) -> None:
        k = by_spec[task.kernel]
        k.seconds += out.seconds
        if task.mutant_id is None:
            k.baseline = {"status": out.status, "seconds": out.seconds, "error": out.error,
                          "rules": distinct_rules(out.violations), "launches": len(out.launches),
                          "failed_launches": sum(1 for launch in out.launches if launch["ok"] is not True)}
            k.cases = out.cases
            k.schedule = sorted({launch["policy"] for launch in out.launches},
                                key=[launch["policy"] for launch in out.launches].index)
            why = gate(k, out)
            if why is not None:
                k.status, k.message = "baseline-failed", why
                for m in k.mutants:
                    m.status, m.error = "not-run", "clean baseline failed"
            else:
                k.status = "ran" if k.mutants else "no-mutants"
                for mutant in plans[task.kernel][1]:
                    submit(task_for(task.kernel, mutant, out.ir))
            listener.baseline(k)
            return
        rec = next(m for m in k.mutants if m.id == task.mutant_id)
        classify(rec, out, k.schedule)
        listener.mutant(k, rec)

    try:
        for spec in plans:
            submit(task_for(spec, None))
        backstop = config.timeout + 60.0
        while pending:
            done, _ = wait(list(pending), timeout=backstop, return_when=FIRST_COMPLETED)
            if not done:  # no worker answered in time: they are stuck outside Python
                listener.message(f"no worker answered for {backstop:.0f} s: stopping the pool")
                pool.kill()
                for task in pending.values():
                    finish(task, Outcome(task.kernel, task.mutant_id, "timeout",
                                         error=f"no result within {backstop:.0f} s (worker stalled)"))
                pending.clear()
                break
            broken = []
            for fut in done:
                task = pending.pop(fut)
                try:
                    out = fut.result()
                except BrokenProcessPool:
                    broken.append(task)
                    continue
                finish(task, out)
            if broken:
                # A worker died (e.g. a crash in native code) and took the pool with it. Retry
                # the tasks once in a fresh pool; a second death is charged to the mutant.
                pool.kill()
                again = [t for t in broken if t not in retried] + list(pending.values())
                for t in broken:
                    if t in retried:
                        finish(t, Outcome(t.kernel, t.mutant_id, "crashed", error="worker process died"))
                retried.update(broken)
                pending.clear()
                pool = _Pool(max(1, config.jobs), cache_dir)
                for t in again:
                    submit(t)
    finally:
        pool.close()
        if not keep_temp():
            shutil.rmtree(cache_dir, ignore_errors=True)
