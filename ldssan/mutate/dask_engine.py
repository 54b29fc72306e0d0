"""Campaign tasks on dask.distributed (`ldssan mutate ... --cluster local:N | tcp://host:port`).

* `local:N` starts a `LocalCluster` of N worker processes, one thread each, bound to
  127.0.0.1 with no dashboard; it is stopped when the campaign ends.
* `tcp://host:port` connects to a running scheduler. Every worker must have the same ldssan
  and the same kernel files at the same paths (each task carries the kernel file's sha256;
  a worker whose file differs answers `crashed: SourceMismatch`, it never scores another
  kernel).

Each mutant is one task (compile + sanitized launch + K output checks, `worker.evaluate`),
submitted with `retries=1` and streamed back with `distributed.as_completed`. The
per-mutant deadline runs inside the task (dask runs tasks in a thread, so `worker._Deadline`
raises in that thread). A worker that dies is the scheduler's business: it reschedules the
task; for `local:N` the scheduler gives up after one more death (`allowed-failures` 1) and
the mutant is `crashed: worker process died`, like the local engine.

`distributed` is imported only here, and only when `--cluster` is given (`pip install
'ldssan[dask]'`).
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import time
import uuid

from ldssan.passes.ir.errors import UsageError
from .engines import Engine, died
from .worker import Outcome, Task, evaluate, init_worker

_POLL = 0.05  # seconds between looks at the completed queue while waiting


class ClusterError(UsageError, RuntimeError):
    """A --cluster value ldssan cannot use: dask missing, a bad address, no workers."""


def parse_cluster(text: str) -> tuple[str, int | str]:
    """`local:N` -> ("local", N); `tcp://host:port` -> ("tcp", address); else ValueError."""
    if text.startswith("local:"):
        n = text[len("local:"):]
        if not n.isdigit() or int(n) < 1:
            raise ValueError(f"{text!r}: expected local:N with N >= 1 workers")
        return "local", int(n)
    if text.startswith("tcp://"):
        host, _, port = text[len("tcp://"):].rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{text!r}: expected tcp://HOST:PORT of a dask scheduler")
        return "tcp", text
    raise ValueError(f"{text!r}: expected local:N or tcp://HOST:PORT")


_WORKER_DIR: str | None = None


def run_task(task: Task, parent_dir: str | None = None) -> Outcome:
    """The dask task: set the worker process up once (FlyDSL, a private variant folder
    removed at exit, inside `parent_dir` when given: the campaign's temp folder, which the
    campaign removes even when its workers are killed), then evaluate one variant."""
    global _WORKER_DIR
    if _WORKER_DIR is None:
        from ldssan.variants import keep_temp

        _WORKER_DIR = tempfile.mkdtemp(prefix="ldssan-mutate-dask-", dir=parent_dir)
        if not keep_temp():
            atexit.register(shutil.rmtree, _WORKER_DIR, True)
        init_worker(_WORKER_DIR)
    return evaluate(task)


class DaskEngine(Engine):
    name = "dask"

    def __init__(self, cluster: str, cache_dir: str | None = None) -> None:
        kind, arg = parse_cluster(cluster)
        # a local cluster's workers share this machine: their folders go in the campaign's
        self.workdir = cache_dir if kind == "local" else None
        try:
            import dask
            from distributed import Client, LocalCluster, as_completed
        except ImportError as exc:
            raise ClusterError(f"--cluster {cluster} needs dask.distributed ({exc}); "
                               f"install it with: pip install 'ldssan[dask]'") from None
        self.cluster = None
        try:
            if kind == "local":
                with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
                    self.cluster = LocalCluster(n_workers=arg, threads_per_worker=1, processes=True,
                                                host="127.0.0.1", dashboard_address=None, scheduler_port=0,
                                                silence_logs=logging.ERROR, local_directory=cache_dir)
                self.client = Client(self.cluster)
            else:
                self.client = Client(arg, timeout="30s")
                self.client.wait_for_workers(1, timeout=60)
        except (OSError, TimeoutError) as exc:
            self._shutdown()
            raise ClusterError(f"--cluster {cluster}: {type(exc).__name__}: {exc}") from None
        self.workers = len(self.client.scheduler_info().get("workers", {}))
        self.completed = as_completed()
        self.futures: dict[str, tuple[object, Task]] = {}

    def submit(self, task: Task) -> None:
        fut = self.client.submit(run_task, task, self.workdir, key=f"ldssan-mutant-{uuid.uuid4().hex}", retries=1, pure=False)
        self.futures[fut.key] = (fut, task)
        self.completed.add(fut)

    def pending(self) -> int:
        return len(self.futures)

    def wait(self, timeout: float):
        deadline = time.monotonic() + timeout
        batch = self.completed.next_batch(block=False)
        while not batch:
            if time.monotonic() > deadline:
                return None
            time.sleep(_POLL)
            batch = self.completed.next_batch(block=False)
        out = []
        for fut in batch:
            _fut, task = self.futures.pop(fut.key)
            out.append((task, self._outcome(fut, task)))
        return out

    @staticmethod
    def _outcome(fut, task: Task) -> Outcome:
        if fut.status == "finished":
            return fut.result()
        if fut.status == "cancelled":
            return died(task)
        exc = fut.exception()
        if type(exc).__name__ == "KilledWorker":
            return died(task)
        # evaluate() never raises, so this is dask's own failure (e.g. a task it could not unpickle)
        return Outcome(task.kernel, task.mutant_id, "crashed", error=f"dask: {type(exc).__name__}: {exc}"[:300])

    def abandon(self) -> list[Task]:
        left = [task for _fut, task in self.futures.values()]
        self.client.cancel([fut for fut, _task in self.futures.values()])
        self.futures.clear()
        self._shutdown()  # a cluster we started goes with its stuck workers; a remote one stays
        return left

    def close(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
