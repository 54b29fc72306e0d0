"""`ldssan rows --pytest tests/test_x.py::test_y`: the launches of one pytest test as the call.

Each run executes the test in-process (`pytest.main` on that one test, its output captured at
the file descriptors as pytest's default does, `-p no:cacheprovider`, the project's
`addopts` dropped so a marker filter cannot deselect it) while every FlyDSL
`@jit` launch is captured: its torch tensor arguments, named `<jit function>#<launch
index>.<parameter>` in launch order. The outputs are the arguments some launch wrote (their
bytes changed across that launch in some run); their contents at the end of the test are
compared across runs. The test's own verdict does not matter (a racy kernel may fail its
assertions in some runs); it is recorded per run.

The test runs as `FLYDSL_LDSSAN=1 pytest` would run it: torch's GPU device is the virtual
gfx1250 from configure on (`hook.torch_device`), so a module-level
`skipif(not torch.cuda.is_available())` gate passes, and the `ldssan` marker is known (the
plugin itself stays off: the runs choose their own scheduler). A test that is not selected,
does not collect, is skipped or launches no FlyDSL kernel is a one-line `RowsError` naming
pytest's reason.
"""

from __future__ import annotations

import contextlib
import inspect
import io

import torch

from .variation import RowsError


class _Capture:
    """While active, the tensor arguments of each launch: a `@jit` function called, or run
    through `flyc.compile(fn, *args)` (which compiles and launches), or the
    `CompiledFunction` that returned called again (counted apart: `PytestCall` refuses it)."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.written: set[str] = set()
        self._seen: dict[tuple, str] = {}  # (address, shape, dtype) -> first name
        self._compiled: dict[int, object] = {}  # id(CompiledFunction) -> its @jit function
        self.launches = 0
        self.compiled_calls = 0  # launches through a CompiledFunction (see PytestCall)
        self._inside = False

    def _named_tensors(self, jf, args, kwargs):
        try:
            bound = inspect.signature(jf.func).bind(*args, **kwargs)
            items = list(bound.arguments.items())
        except (TypeError, AttributeError):  # FlyDSL reports the bad call itself
            items = [(f"#{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        return [(n, a) for n, a in items if isinstance(a, torch.Tensor)]

    def _launch(self, jf, args, kwargs, run):
        if self._inside:  # FlyDSL's own call inside a launch: the outer one counts
            return run()
        self._inside = True
        try:
            return self._record(jf, args, kwargs, run)
        finally:
            self._inside = False

    def _record(self, jf, args, kwargs, run):
        index = self.launches
        self.launches += 1
        fn = getattr(getattr(jf, "func", None), "__name__", "jit")
        before = [(f"{fn}#{index}.{n}", t, t.detach().clone()) for n, t in self._named_tensors(jf, args, kwargs)]
        result = run()
        for name, t, old in before:
            key = (t.data_ptr(), tuple(t.shape), t.dtype)
            name = self._seen.setdefault(key, name)  # the same tensor again keeps its first name
            self.tensors.setdefault(name, t)
            if not _same_bytes(old, t):
                self.written.add(name)
        return result

    @contextlib.contextmanager
    def active(self):
        from flydsl.compiler import jit_function

        jit, compiled = jit_function.JitFunction, jit_function.CompiledFunction
        orig_run, orig_call = jit._compile_or_execute, compiled.__call__
        cap = self

        def run(jf, args, kwargs, *, execute: bool, return_compiled: bool = False):
            go = lambda: orig_run(jf, args, kwargs, execute=execute, return_compiled=return_compiled)  # noqa: E731
            if not execute or jit_function.ir.Context.current is not None:  # a trace or a compile only
                return go()
            result = cap._launch(jf, args, kwargs, go)
            if return_compiled and result is not None:
                cap._compiled[id(result)] = (jf, result)
            return result

        def call(cf, *args):
            jf = cap._compiled.get(id(cf), (None, None))[0]
            cap.compiled_calls += 1
            return cap._launch(jf, args, {}, lambda: orig_call(cf, *args))

        jit._compile_or_execute, compiled.__call__ = run, call
        try:
            yield self
        finally:
            jit._compile_or_execute, compiled.__call__ = orig_run, orig_call


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.detach().contiguous().reshape(-1).view(torch.uint8))


class _Outcomes:
    """The small pytest plugin: how many tests were selected, how the one test ended, and
    pytest's one-line reason for a skip or an error (collection, setup, call, teardown)."""

    def __init__(self) -> None:
        self.selected: list[str] = []
        self.outcome = "not run"
        self.reason = ""  # the first skip or error reason pytest gave

    def pytest_configure(self, config) -> None:
        from ldssan.pytest_plugin import MARKER_HELP

        config.addinivalue_line("markers", MARKER_HELP)  # as with the plugin loaded

    def pytest_collection_finish(self, session) -> None:
        self.selected = [item.nodeid for item in session.items]

    def pytest_collectreport(self, report) -> None:
        if (report.failed or report.skipped) and not self.reason:
            self.reason = ("skipped at collection: " if report.skipped else "collecting it failed: ") + _why(report)

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.outcome = f"failed ({report.when})" if report.when != "call" else "failed"
        elif report.when == "call" or (report.skipped and self.outcome == "not run"):
            self.outcome = report.outcome
        if (report.failed or report.skipped) and not self.reason:
            self.reason = f"{'skipped' if report.skipped else 'failed'} ({report.when}): {_why(report)}"


def _why(report) -> str:
    """pytest's reason for a skipped or failed report, on one line."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, "Skipped: reason")
        text = str(longrepr[2]).removeprefix("Skipped: ")
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else (report.longreprtext or "").strip()
        errors = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]  # collection errors
        text = errors[-1] if errors else text
    return " ".join(text.split())[:300] or "no reason given"


class PytestCall:
    """Callable: runs the test once, returns its launches' tensors ({name: tensor}). After
    all runs, `written` names the outputs and `outcomes` holds the test's verdict per run."""

    def __init__(self, spec: str) -> None:
        path, sep, _test = spec.partition("::")
        if not sep or not path.endswith(".py") or not _test:
            raise RowsError(f"--pytest {spec!r}: expected path/to/test_file.py::test_name")
        self.spec = spec
        self.written: set[str] = set()
        self.outcomes: list[str] = []

    def __call__(self) -> dict[str, torch.Tensor]:
        from ldssan.hook import torch_device

        try:
            import pytest
        except ImportError:
            raise RowsError("--pytest needs pytest: pip install pytest") from None

        cap, plugin, log = _Capture(), _Outcomes(), io.StringIO()
        # no:unraisableexception: its teardown runs gc.collect() five times per session, which in
        # a long-lived process (a test suite calling rows) costs minutes per run
        args = [self.spec, "-q", "-p", "no:cacheprovider", "-p", "no:ldssan", "-p", "no:unraisableexception",
                "-o", "addopts=", "--capture=fd"]
        with torch_device(), cap.active(), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            code = pytest.main(args, plugins=[plugin])
        if len(plugin.selected) != 1:
            why = plugin.reason or _last_line(log.getvalue())
            raise RowsError(f"--pytest {self.spec!r} selected {len(plugin.selected)} tests, need exactly one "
                            f"(pytest exit {int(code)}): {why}")
        if plugin.outcome == "skipped":
            raise RowsError(f"--pytest {self.spec!r}: the test was {plugin.reason}")
        if not cap.launches:
            why = f": {plugin.reason}" if plugin.reason else ""
            raise RowsError(f"--pytest {self.spec!r} launched no FlyDSL kernel (test {plugin.outcome}){why}")
        if cap.compiled_calls:
            # A CompiledFunction launches with the configuration it was compiled under, not the
            # run's schedule (seen: no record under a later sanitize()): its runs cannot vary.
            raise RowsError(f"--pytest {self.spec!r}: {cap.compiled_calls} of its {cap.launches} launches call a "
                            f"CompiledFunction that flyc.compile() returned, which keeps the schedule it was "
                            f"compiled under, so the runs cannot vary them; launch the @jit function instead")
        self.outcomes.append(plugin.outcome)
        self.written |= cap.written
        return dict(cap.tensors)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "pytest printed nothing"
