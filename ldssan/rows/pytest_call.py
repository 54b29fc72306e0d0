"""`ldssan rows --pytest tests/test_x.py::test_y`: the launches of one pytest test as the call.

Each run executes the test in-process (`pytest.main` on that one test, `-p no:cacheprovider`,
the project's `addopts` dropped so a marker filter cannot deselect it) while every FlyDSL
`@jit` launch is captured: its torch tensor arguments, named `<jit function>#<launch
index>.<parameter>` in launch order. The outputs are the arguments some launch wrote (their
bytes changed across that launch in some run); their contents at the end of the test are
compared across runs. The test's own verdict does not matter (a racy kernel may fail its
assertions in some runs); it is recorded per run.
"""

from __future__ import annotations

import contextlib
import inspect
import io

import torch

from .variation import RowsError


class _Capture:
    """Wraps `JitFunction.__call__` while active: the tensor arguments of each launch."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.written: set[str] = set()
        self._seen: dict[tuple, str] = {}  # (address, shape, dtype) -> first name
        self.launches = 0

    def _named_tensors(self, jf, args, kwargs):
        try:
            bound = inspect.signature(jf.func).bind(*args, **kwargs)
            items = list(bound.arguments.items())
        except TypeError:  # FlyDSL reports the bad call itself
            items = [(f"#{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
        return [(n, a) for n, a in items if isinstance(a, torch.Tensor)]

    @contextlib.contextmanager
    def active(self):
        from flydsl.compiler import jit_function

        cls = jit_function.JitFunction
        orig = cls.__call__
        cap = self

        def call(jf, *args, **kwargs):
            if jit_function.ir.Context.current is not None:  # a jit call inside a trace, not a launch
                return orig(jf, *args, **kwargs)
            index = cap.launches
            cap.launches += 1
            fn = getattr(jf.func, "__name__", "jit")
            before = [(f"{fn}#{index}.{n}", t, t.detach().clone()) for n, t in cap._named_tensors(jf, args, kwargs)]
            result = orig(jf, *args, **kwargs)
            for name, t, old in before:
                key = (t.data_ptr(), tuple(t.shape), t.dtype)
                name = cap._seen.setdefault(key, name)  # the same tensor again keeps its first name
                cap.tensors.setdefault(name, t)
                if not _same_bytes(old, t):
                    cap.written.add(name)
            return result

        cls.__call__ = call
        try:
            yield self
        finally:
            cls.__call__ = orig


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.detach().contiguous().reshape(-1).view(torch.uint8))


class _Outcomes:
    """The small pytest plugin: how many tests were selected and how the one test ended."""

    def __init__(self) -> None:
        self.selected: list[str] = []
        self.outcome = "not run"

    def pytest_collection_finish(self, session) -> None:
        self.selected = [item.nodeid for item in session.items]

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.outcome = f"failed ({report.when})" if report.when != "call" else "failed"
        elif report.when == "call" or (report.skipped and self.outcome == "not run"):
            self.outcome = report.outcome


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
        try:
            import pytest
        except ImportError:
            raise RowsError("--pytest needs pytest: pip install pytest") from None

        cap, plugin, log = _Capture(), _Outcomes(), io.StringIO()
        args = [self.spec, "-q", "-p", "no:cacheprovider", "-p", "no:ldssan", "-o", "addopts=", "--capture=sys"]
        with cap.active(), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            code = pytest.main(args, plugins=[plugin])
        if len(plugin.selected) != 1:
            tail = "\n".join(log.getvalue().strip().splitlines()[-6:])
            raise RowsError(f"--pytest {self.spec!r} selected {len(plugin.selected)} tests, need exactly one "
                            f"(pytest exit {int(code)}):\n{tail}")
        if not cap.launches:
            raise RowsError(f"--pytest {self.spec!r} launched no FlyDSL kernel (test {plugin.outcome})")
        self.outcomes.append(plugin.outcome)
        self.written |= cap.written
        return dict(cap.tensors)
