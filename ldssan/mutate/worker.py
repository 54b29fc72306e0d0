"""What runs in a campaign worker process: one kernel variant (the clean kernel or one
mutant) through one sanitized launch per case and K output-check launches per case.

Every exception is caught and classified here, so a mutant never takes the worker down:

| outcome | meaning |
|---|---|
| `not-compiled` | the edited module does not import, or FlyDSL does not trace/compile it |
| `crashed` | it compiled, but the sanitized launch raised (emulator deadlock, memory fault, ...) |
| `timeout` | the per-mutant deadline passed (a timeout is never a detection) |
| `equivalent` | its instrumented IR is identical to the clean kernel's, for every case |
| `ran` | the campaign classifies it `killed` or `survived` from the verdicts |
| `not-run` | clean baseline only: a --pytest case could not run as given (the test was skipped, needs a fixture, raised before launching, or launched no kernel) |

Whatever a task raises reaches the parent as text (`Outcome.error`, "ExcType: message"):
pytest's outcome exceptions and other BaseExceptions neither pickle nor end the worker.

The per-mutant deadline is a `SIGALRM` timer when the task runs on the process's main
thread (local pool workers), else a timer thread that raises `MutantTimeout` in the task's
thread (dask workers run tasks in a thread); either fires between Python bytecodes, so the
parent keeps a backstop for code that never returns to Python.

Runtime findings (the dynamic rules) and lint findings (the static fence-pairing rules,
`ldssan.decode.STATIC_RULES`) are kept apart: a lint finding is counted as a kill of its
own kind, never as a runtime kill.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

from ldssan.passes.ir.caches import register_cache
from ldssan.variants import Edit, original_path

from .syncbug import sync_sites
from .target import Target, source_digest


class MutantTimeout(BaseException):
    """Raised by the deadline timer; a BaseException so `except Exception` in FlyDSL keeps out."""


@dataclass(frozen=True)
class Task:
    kernel: str  # Target.spec (the campaign's key for the kernel)
    target: Target
    mutant_id: str | None  # None for the clean baseline
    edits: tuple[Edit, ...]
    launches: int
    policy: str  # the sanitizer launch's scheduler policy
    timeout: float
    clean_ir: tuple[str, ...] | None = None  # per-case fingerprints of the clean kernel
    digest: str | None = None  # sha256 of the kernel file the campaign planned from


@dataclass
class Outcome:
    kernel: str
    mutant_id: str | None
    status: str  # ran | equivalent | not-compiled | crashed | timeout | not-run (baseline only)
    violations: list[dict] = field(default_factory=list)  # {code, name, line, other_line, file, count}
    lint: list[dict] = field(default_factory=list)  # static fence-pairing findings, same shape
    launches: list[dict] = field(default_factory=list)  # {case, policy, ok, error}
    ir: tuple[str, ...] = ()
    sync: dict[str, int] = field(default_factory=dict)  # the sync skeleton (syncbug.sync_sites)
    reliance: dict = field(default_factory=dict)  # the clean kernel's barrier reliance (reliance.py)
    cases: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0
    pid: int = 0


# ----------------------------------------------------------------------------- worker setup

_IN_WORKER = False  # set by init_worker: this process belongs to a campaign's pool

def init_worker(cache_dir: str | None) -> None:
    """Pool initializer: FlyDSL and the sanitizer are imported once per worker.

    FlyDSL's on-disk cache is off in workers: its key omits source locations, so a variant
    whose IR equals another's (modulo locations) would be served the other's build, whose
    ldssan site table names the other file. Every variant is compiled anyway (its IR is
    new); the K output-check launches reuse the in-memory build."""
    global _IN_WORKER
    _IN_WORKER = True
    os.environ["FLYDSL_RUNTIME_ENABLE_CACHE"] = "0"
    if cache_dir:
        os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", cache_dir)
        # Pool workers exit without atexit handlers: variants go where the parent removes them.
        from ldssan.variants import use_variant_dir

        use_variant_dir(os.path.join(cache_dir, f"variants-{os.getpid()}"))
    os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx1250")
    os.environ.setdefault("ARCH", "gfx1250")
    import flydsl.compiler  # noqa: F401

    import ldssan.hook  # noqa: F401
    import ldssan.runtime.emu  # noqa: F401


def schedule(k: int) -> list[str]:
    """K output-check policies: every built-in policy in turn, then fresh random seeds."""
    from ldssan.runtime.emu.sched import OUTPUT_POLICIES

    out = [str(p) for p in OUTPUT_POLICIES[:k]]
    seed = 100
    while len(out) < k:
        out.append(f"random({seed})")
        seed += 1
    return out


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.mode = None

    def _fire(self, signum, frame):
        raise MutantTimeout(f"no result within {self.seconds:g} s")

    def _raise_in(self, thread_id: int) -> None:
        # The task's thread is not the main thread (a dask worker): no signal reaches it, so
        # the exception is set asynchronously; it is raised at the thread's next bytecode.
        # Under the lock, so it is never set once the task has left the deadline.
        with self._lock:
            if not self._left:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                                           ctypes.py_object(MutantTimeout))

    def __enter__(self):
        if self.seconds <= 0:
            return self
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            self.mode = "signal"
            self._old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        else:
            self.mode = "thread"
            self._lock, self._left = threading.Lock(), False
            self._timer = threading.Timer(self.seconds, self._raise_in, (threading.get_ident(),))
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc):
        if self.mode == "signal":
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
        elif self.mode == "thread":
            with self._lock:
                self._left = True
            self._timer.cancel()
        return False


# ----------------------------------------------------------------------------- IR identity

_SITES_ATTR = re.compile(r'ldssan\.sites = "(?:[^"\\]|\\.)*",?\s?')


def _strip_locs(line: str) -> str:
    """Remove every `loc(...)` (balanced, strings respected) from one line of MLIR."""
    out, i, n = [], 0, len(line)
    while i < n:
        j = line.find("loc(", i)
        if j < 0 or (j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_.#")):
            if j < 0:
                out.append(line[i:])
                break
            out.append(line[i:j + 4])
            i = j + 4
            continue
        out.append(line[i:j])
        depth, k, in_str = 0, j + 3, False
        while k < n:
            c = line[k]
            if in_str:
                if c == "\\":
                    k += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    return "".join(out).rstrip()


def normalize_ir(text: str) -> str:
    """An instrumented module without what differs between variants of one source:
    location attributes (`loc(...)`, `#loc` lines) and the `ldssan.sites` table (file paths
    and lines)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#loc"):
            continue
        lines.append(_strip_locs(_SITES_ATTR.sub("", line)))
    return "\n".join(lines)


def _jit_functions(module) -> dict[str, object]:
    from flydsl.compiler.jit_function import JitFunction

    return {name: obj for name, obj in vars(module).items() if isinstance(obj, JitFunction)}


def _compiled(module) -> dict[str, object]:
    return {name: fn._last_compiled[1] for name, fn in _jit_functions(module).items()
            if fn._last_compiled is not None}


def ir_fingerprint(module, case=None) -> str | None:
    """sha256 over the normalized instrumented IR of every JIT function's last compile (the
    module's, and those the case names); None when nothing compiled — no IR to compare."""
    compiled = _compiled(module)
    extra = case.jit_functions(module) if case is not None and case.jit_functions is not None else {}
    compiled.update({n: fn._last_compiled[1] for n, fn in extra.items() if fn._last_compiled is not None})
    if not compiled:
        return None
    h = hashlib.sha256()
    for name, artifact in sorted(compiled.items()):
        text = getattr(artifact, "_ir_text", None) or str(getattr(artifact, "ir", ""))
        h.update(name.encode() + b"\0" + normalize_ir(text).encode() + b"\0")
    return h.hexdigest()


# ----------------------------------------------------------------------------- evaluation

def _brief(v) -> dict:
    other = v.other_site
    return {"code": v.code, "name": v.name, "line": v.site.line, "file": os.path.basename(original_path(v.site.file or "")),
            "other_line": other.line if other is not None else None, "text": (v.site.text or "").strip(),
            "count": v.count, "message": v.message}


def _error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


_CASES: dict[str, list] = register_cache({})
COOP_PACKAGE = "flydsl.extension.coop"  # ldssan.mutate.coop has cases for its modules


def _cases(target: Target):
    from .target import cases_of, import_clean, package_edits

    key = f"{target.spec}|{'|'.join(target.pytest)}"
    if key not in _CASES:
        if target.pytest:  # the kernel and its tests import from where pytest would import them
            from .pytest_case import use_import_roots

            use_import_roots(target)
        clean = _load(target, ()) if package_edits(target) else import_clean(target)
        if target.pytest:
            from .pytest_case import pytest_cases

            _CASES[key] = pytest_cases(target, clean)
        else:
            if (target.module or "").startswith(COOP_PACKAGE + "."):
                from . import coop  # noqa: F401 - registers the cases of FlyDSL's coop primitives
            _CASES[key] = cases_of(target, clean)
    return _CASES[key]


def _load(target: Target, edits, tag: str = "clean"):
    """The kernel with `edits` (none: the clean kernel), as a fresh variant module. A module
    inside a package gets its relative imports made absolute first (a library primitive
    runs edited outside its package)."""
    from ldssan.variants import load_variant

    from .target import package_edits

    extra = package_edits(target)
    return load_variant(target.import_ref, [*extra, *edits], tag=tag)


def _collect(col, out: Outcome) -> None:
    """Runtime findings into `violations`, lint findings (either severity) into `lint`."""
    from ldssan.decode import STATIC_RULES

    for v in [*col.violations, *col.warnings]:
        if v.rule in STATIC_RULES:
            out.lint.append(_brief(v))
        elif v.severity == "error":
            out.violations.append(_brief(v))


def evaluate(task: Task) -> Outcome:
    """Run one variant; never raises (except KeyboardInterrupt)."""
    out = Outcome(task.kernel, task.mutant_id, "ran", pid=os.getpid())
    t0 = time.perf_counter()
    try:
        with _Deadline(task.timeout):
            _evaluate(task, out)
    except MutantTimeout as exc:
        out.status, out.error = "timeout", str(exc) or f"no result within {task.timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - the campaign's own bug: report, do not die
        out.status, out.error = "crashed", _error_text(exc) + " (campaign) " + traceback.format_exc(limit=3)[-300:]
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit, pytest outcomes...: named text, never the object
        out.status, out.error = "crashed", _error_text(exc)
    out.seconds = round(time.perf_counter() - t0, 3)
    return out


def _evaluate(task: Task, out: Outcome) -> None:
    from contextlib import nullcontext

    from .reliance import Probe

    if task.digest is not None and source_digest(task.target.path) != task.digest:
        # A remote worker with another version of the kernel file would score other mutants.
        out.status = "crashed"
        out.error = (f"SourceMismatch: {task.target.path} on this worker is not the file the campaign "
                     f"planned from (sha256 {task.digest[:12]}); give every worker the same kernel sources")
        return
    if _IN_WORKER and task.target.module is None:
        # A kernel given as a file imports its neighbours the way a script does.
        folder = os.path.dirname(task.target.path)
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        cases = _cases(task.target)
    except Exception as exc:  # noqa: BLE001
        out.status = "not-run" if task.mutant_id is None and task.target.pytest else "crashed"
        out.error = "cases: " + _error_text(exc)
        return
    out.cases = [c.name for c in cases]
    tag = "clean" if task.mutant_id is None else "mutant"
    try:
        module = _load(task.target, list(task.edits), tag=tag)
    except Exception as exc:  # noqa: BLE001 - a mutant that does not import is not compiled
        out.status, out.error = "not-compiled", _error_text(exc)
        return

    # 1. the sanitizer's verdict: one launch per case (the clean kernel's under the reliance probe)
    probe = Probe() if task.mutant_id is None else None
    with probe or nullcontext():
        if not _sanitize_cases(task, module, cases, out):
            return
    if probe is not None:
        out.reliance = probe.result()
    if task.clean_ir is not None and None not in out.ir and out.ir == tuple(task.clean_ir):
        out.status = "equivalent"
        return
    # 2. the output check
    _output_check(task, module, cases, out)
    # 3. the own reliance table of a mutant no rule saw (a survivor, or an output-only kill):
    # the independent race check of its ds accesses
    if task.mutant_id is not None and not out.violations and not out.lint:
        quiet = Outcome(task.kernel, task.mutant_id, "ran")
        with Probe() as probe:
            _sanitize_cases(task, module, cases, quiet)
        out.reliance = probe.result() if quiet.status == "ran" else {}


def _sanitize_cases(task: Task, module, cases, out: Outcome) -> bool:
    """One sanitized launch per case; False when a case did not run (`out.status` says why)."""
    from ldssan import hook

    fingerprints = []
    for case in cases:
        before = {n: id(a) for n, a in _compiled(module).items()}
        col = None
        try:
            with hook.sanitize(task.policy) as col:
                case.run(module)
        except Exception as exc:  # noqa: BLE001
            after = {n: id(a) for n, a in _compiled(module).items()}
            out.status = "crashed" if after != before or not _jit_functions(module) else "not-compiled"
            out.error = f"{case.name}: {_error_text(exc)}"
            if _test_did_not_run(task, exc, col):
                out.status = "not-run"
            if col is not None:
                _collect(col, out)
            return False
        if _test_did_not_run(task, None, col):
            out.status, out.error = "not-run", f"{case.name}: the test launched no FlyDSL kernel"
            return False
        _collect(col, out)
        for key, n in sync_sites(col.results).items():
            out.sync[key] = out.sync.get(key, 0) + n
        fingerprints.append(ir_fingerprint(module, case))
    out.ir = tuple(fingerprints)
    return True


def _test_did_not_run(task: Task, exc: Exception | None, col) -> bool:
    """A --pytest case of the clean baseline that was skipped or refused, or raised before
    launching, or launched nothing: the case, not the kernel, is what failed."""
    from .pytest_case import PytestCaseError

    if task.mutant_id is not None or not task.target.pytest:
        return False
    return isinstance(exc, PytestCaseError) or col is None or not col.results


def _output_check(task: Task, module, cases, out: Outcome) -> None:
    """K launches per case, across scheduler policies and seeds."""
    from ldssan.runtime.emu import emulate

    for policy in schedule(task.launches):
        for case in cases:
            rec = {"case": case.name, "policy": policy, "ok": None, "error": ""}
            try:
                with emulate(policy):
                    result = case.run(module)
                rec["ok"] = bool(case.check(result))
            except Exception as exc:  # noqa: BLE001 - a launch that fails is not a detection
                rec["error"] = _error_text(exc)
            out.launches.append(rec)
