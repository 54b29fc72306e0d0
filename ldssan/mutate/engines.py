"""Where a campaign's tasks run: an `Engine` takes `Task`s and hands back `(Task, Outcome)`
pairs as they finish, in any order. The campaign loop (`campaign._execute`) is the same for
every engine.

| engine | made by | workers |
|---|---|---|
| `LocalEngine` | the default | processes of this machine (forkserver, else spawn) |
| `dask_engine.DaskEngine` | `--cluster local:N` / `--cluster tcp://host:port` | dask.distributed workers |

Every engine guarantees: a task whose worker dies is retried once, a second death is the
mutant's `crashed` outcome ("worker process died"); `abandon()` stops the workers this
engine started and returns the tasks that never finished.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .worker import Outcome, Task, evaluate, init_worker

WORKER_DIED = "worker process died"


class Engine:
    name = "engine"
    workers = 0

    def submit(self, task: Task) -> None:
        raise NotImplementedError

    def wait(self, timeout: float) -> list[tuple[Task, Outcome]] | None:
        """The tasks finished since the last call (at least one), or None when none finished
        within `timeout` seconds (the workers are stalled)."""
        raise NotImplementedError

    def pending(self) -> int:
        raise NotImplementedError

    def abandon(self) -> list[Task]:
        """Stop the workers this engine started; the tasks that never finished."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def died(task: Task) -> Outcome:
    return Outcome(task.kernel, task.mutant_id, "crashed", error=WORKER_DIED)


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
        """Stop every worker this pool started (by pid), then the pool. The executor's own
        table has the workers still starting (not yet in `pids`): one killed mid-start must
        not outlive the parent and find its pipes gone."""
        pids = set(getattr(self.executor, "_processes", None) or ())
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
    # Ctrl-C reaches the terminal's whole process group: the parent stops the campaign and
    # kills the workers (interrupt.py); a worker neither dies mid-result nor prints a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pids.put(os.getpid())
    init_worker(cache_dir)


class LocalEngine(Engine):
    """Worker processes on this machine."""

    name = "local"

    def __init__(self, jobs: int, cache_dir: str) -> None:
        self.workers = max(1, jobs)
        self.cache_dir = cache_dir
        self.pool = _Pool(self.workers, cache_dir)
        self.futures: dict = {}
        self.retried: set = set()

    def submit(self, task: Task) -> None:
        self.futures[self.pool.submit(task)] = task

    def pending(self) -> int:
        return len(self.futures)

    def wait(self, timeout: float):
        done, _ = wait(list(self.futures), timeout=timeout, return_when=FIRST_COMPLETED)
        if not done:
            return None
        out, broken = [], []
        for fut in done:
            task = self.futures.pop(fut)
            try:
                out.append((task, fut.result()))
            except BrokenProcessPool:
                broken.append(task)
        if broken:
            # A worker died (e.g. a crash in native code) and took the pool with it. Retry the
            # tasks once in a fresh pool; a second death is charged to the mutant.
            self.pool.kill()
            again = [t for t in broken if t not in self.retried] + list(self.futures.values())
            out += [(t, died(t)) for t in broken if t in self.retried]
            self.retried.update(broken)
            self.futures.clear()
            self.pool = _Pool(self.workers, self.cache_dir)
            for t in again:
                self.submit(t)
            if not out:
                return self.wait(timeout)
        return out

    def abandon(self) -> list[Task]:
        self.pool.kill()
        left = list(self.futures.values())
        self.futures.clear()
        return left

    def close(self) -> None:
        self.pool.close()
