"""pytest plugin: `FLYDSL_LDSSAN=1 pytest` (or `pytest --ldssan`) checks every FlyDSL launch.

A test whose launches produced violations fails with the report (`--ldssan-mode=warn`
only reports). The session ends with a summary: kernels, launches, sites, violations — or
NOTHING WAS CHECKED when no kernel was launched (`--ldssan-require-launch` then fails the
run). On a host with no GPU, torch's GPU device is the virtual gfx1250 (`ldssan.vdevice`)
from configure on, so `torch.cuda.is_available()` guards at collection see it.
Precedence for each setting: command line > environment > default.
"""

from __future__ import annotations

import pytest

from . import config as opts

_RESULTS = pytest.StashKey[list]()
_FAILED = pytest.StashKey[dict]()
_ON = pytest.StashKey[bool]()
_WRITTEN = pytest.StashKey[str]()  # the terminal line about the report file
_PER_TEST = pytest.StashKey[dict]()  # nodeid -> launches, kernels, sites, violations
_NOTES = pytest.StashKey[list]()  # (level, text): launches that deadlocked or timed out
_LINT = pytest.StashKey[dict]()  # (code, access, barrier) -> (warning, first test): lint warnings
_UNCHECKED = pytest.StashKey[dict]()  # nodeid -> (launcher calls, notes): called, not checked

MODE_HELP = "fail: a test whose launches have violations fails; warn: report only"
REQUIRE_HELP = ("fail the run if ldssan is on and no FlyDSL kernel was launched (nothing was checked), and "
                "each test that called a FlyDSL launcher but had no launch checked")
NOTHING_CHECKED = "ldssan: NOTHING WAS CHECKED: no FlyDSL kernel was launched"
UNCHECKED = "called, not checked"
MARKER_HELP = ("ldssan(expect=None): the test's FlyDSL launches are expected to produce exactly these "
               "ldssan rule codes (e.g. expect=['LDS001']); the test fails if they are missing, and "
               "other violations still fail it")


def pytest_addoption(parser):
    group = parser.getgroup("ldssan", "LDS synchronization sanitizer for FlyDSL kernels")
    group.addoption("--ldssan", action="store_true", default=None,
                    help="sanitize every FlyDSL kernel launch (same as FLYDSL_LDSSAN=1)")
    group.addoption("--ldssan-mode", choices=("fail", "warn"), default=None, help=MODE_HELP)
    group.addoption("--ldssan-policy", default=None,
                    help="virtual gfx1250 scheduler policy: lockstep (default), round-robin, reverse, "
                         "random(SEED)[+early|+random]")
    group.addoption("--ldssan-report", default=None, metavar="PATH",
                    help="write all violations to PATH (.sarif for SARIF, otherwise JSON)")
    group.addoption("--ldssan-require-launch", action="store_true", default=False, help=REQUIRE_HELP)


def _setting(cfg, opt: str, name: str):
    value = cfg.getoption(opt)
    return opts.get(name) if value is None else value


def _validate(config) -> None:
    """Every option read once, before any test runs: a bad one is a usage error (exit 4)."""
    from .report import report_path_problem

    opts.validate()
    policy = config.getoption("--ldssan-policy")
    if policy is not None:
        try:
            opts.OPTIONS["policy"].parse(policy)
        except ValueError as exc:
            raise opts.ConfigError(f"ldssan: --ldssan-policy={policy!r}: {exc}") from None
    path = config.getoption("--ldssan-report") or opts.get("report")
    problem = path and report_path_problem(path)
    if problem:
        raise opts.ConfigError(f"ldssan: --ldssan-report / FLYDSL_LDSSAN_REPORT: {problem}")


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        on = bool(_setting(config, "--ldssan", "enable"))
        if on:
            _validate(config)
    except opts.ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("--ldssan-require-launch") and not on:
        # asked for checked launches, but nothing will check them: say so now, not after a green run
        raise pytest.UsageError("ldssan: --ldssan-require-launch needs ldssan on (--ldssan or FLYDSL_LDSSAN=1)")
    config.stash[_ON] = on
    config.stash[_RESULTS] = []
    config.stash[_FAILED] = {}
    config.stash[_PER_TEST] = {}
    config.stash[_NOTES] = []
    config.stash[_LINT] = {}
    config.stash[_UNCHECKED] = {}
    if on:
        from . import hook
        from .runtime.device.hardware import HardwareUnavailable

        policy = config.getoption("--ldssan-policy") or opts.get("policy")
        try:
            hook.enable(policy=policy)
        except HardwareUnavailable as exc:  # FLYDSL_LDSSAN_DEVICE=hardware here: one line, exit 4
            raise pytest.UsageError(str(exc)) from None


def pytest_unconfigure(config):
    if config.stash.get(_ON, False):
        from . import hook

        hook.disable()


def pytest_report_header(config):
    if not config.stash.get(_ON, False):
        return None
    mode = _setting(config, "--ldssan-mode", "mode")
    policy = config.getoption("--ldssan-policy") or opts.get("policy")
    from . import hook, vdevice
    from .runtime.emu.sched import Policy

    gpu = "virtual gfx1250" if vdevice.active() else "torch's own"
    engine = hook.engine()
    if engine == "python":
        checker = f"policy={policy}, executor=virtual gfx1250"
    elif engine == "emulated":  # lockstep runs per wave under the device runtime
        checker = f"policy={Policy.parse(policy).per_wave}, executor=virtual gfx1250 (device runtime)"
    else:
        checker = "executor=gfx1250 HIP device (device runtime)"
    return f"ldssan: on (FLYDSL_LDSSAN=1), mode={mode}, {checker}, torch GPU={gpu}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not item.config.stash.get(_ON, False):
        return (yield)
    from . import hook

    from .runtime.emu import frontend
    from .runtime.emu.sched import DeadlockError
    from .runtime.emu.wave import StepBudgetExceeded

    hook.collector().take()
    frontend.CALLS.take()
    raised = True
    try:
        out = yield
        raised = False
        return out
    except (DeadlockError, StepBudgetExceeded) as exc:
        # the run did not complete: the report file says so (SARIF: executionSuccessful false)
        item.config.stash[_NOTES].append(("error", f"{item.nodeid}: {type(exc).__name__}: {exc}"))
        raise
    finally:
        results = hook.collector().take()
        try:
            _check(item, results)
        finally:
            _check_calls(item, results, *frontend.CALLS.take(), fail=not raised)


def _check(item, results) -> None:
    from .decode import merge_reports
    from .report import render_text

    item.config.stash[_RESULTS].extend((item.nodeid, r) for r in results)
    kernels = _builds(results)
    item.config.stash[_PER_TEST][item.nodeid] = {
        "launches": len(results), "kernels": len(kernels), "sites": sum(kernels.values()),
        "violations": sum(len(r.report.violations) for r in results)}
    _note_warnings(item, results)
    marker = item.get_closest_marker("ldssan")
    expected = set(marker.kwargs.get("expect") or ()) if marker else set()
    if not results:
        if expected:  # an expectation no launch could meet is a test that cannot fail
            pytest.fail(f"ldssan: expected {sorted(expected)} but the test launched no FlyDSL kernel "
                        "(nothing was checked)", pytrace=False)
        return
    report = merge_reports(*(r.report for r in results))
    found = {v.code for v in report.violations}
    if expected:
        missing = expected - found
        if missing:
            pytest.fail(f"ldssan: expected {sorted(missing)} but the launches reported {sorted(found) or 'nothing'}",
                        pytrace=False)
        if found <= expected:
            return
    if report.clean and not report.dropped:
        return
    item.config.stash[_FAILED][item.nodeid] = report
    if _setting(item.config, "--ldssan-mode", "mode") == "fail":
        text = render_text(report, max_violations=opts.get("max_reports"))
        pytest.fail(f"ldssan found LDS synchronization violations:\n{text}", pytrace=False)


def _check_calls(item, results, calls: int, checked: int, notes: list[str], *, fail: bool) -> None:
    """A test that asked FlyDSL for launches (`@flyc.jit` calls, `flyc.compile`, compiled
    function calls) but had none checked passed on nothing: it is listed in the summary
    and the report ("called, not checked"), and fails under --ldssan-require-launch
    (`fail`: unless the test already failed, whose own error stays the one shown)."""
    entry = item.config.stash[_PER_TEST].setdefault(item.nodeid, {"launches": len(results)})
    entry["calls"] = calls
    # `checked` also counts launches a test sanitized itself (`with ldssan.sanitize()`)
    entry["not_checked"] = unchecked = calls > 0 and not results and not checked
    for text in notes:
        item.config.stash[_NOTES].append(("warning", f"{item.nodeid}: {text}"))
    if not unchecked:
        return
    why = notes[0] if notes else ("no launch reached the sanitizer" if fail else
                                  "the test raised before any launch finished its check")
    item.config.stash[_UNCHECKED][item.nodeid] = (calls, why)
    item.config.stash[_NOTES].append(("warning", f"{item.nodeid}: {UNCHECKED}: {calls} launcher calls, 0 checked"))
    if fail and item.config.getoption("--ldssan-require-launch"):
        pytest.fail(f"ldssan: {UNCHECKED}: the test called FlyDSL launchers {calls} times but no launch was "
                    f"checked ({why}); --ldssan-require-launch fails it", pytrace=False)


def _write_unchecked(tr, config) -> None:
    found = config.stash[_UNCHECKED]
    if not found:
        return
    tr.write_sep("-", f"ldssan: {len(found)} tests {UNCHECKED} (they called FlyDSL launchers; no launch was checked)",
                 yellow=True)
    for nodeid, (calls, why) in found.items():
        tr.write_line(f"{nodeid}: {calls} launcher calls, 0 checked: {why}", yellow=True)


def _note_warnings(item, results) -> None:
    """Keep the lint warnings (FLYDSL_LDSSAN_LINT=warn) for the terminal summary: they fail
    no test, so a report printed only on failure would never show them. Once per site pair."""
    seen = item.config.stash[_LINT]
    for r in results:
        for v in r.report.violations:
            if v.severity != "warning":
                continue
            other = v.other_site.location if v.other_site is not None else ""
            seen.setdefault((v.code, v.site.location, other), (v, item.nodeid))


def _write_warnings(tr, config) -> None:
    found = config.stash[_LINT]
    if not found:
        return
    tr.write_sep("-", f"ldssan: {len(found)} lint warnings (FLYDSL_LDSSAN_LINT=error makes them fail)",
                 yellow=True)
    for n, (v, nodeid) in enumerate(found.values()):
        if n >= 20 and not config.getoption("verbose"):
            tr.write_line(f"({len(found) - n} more hidden; use -v)")
            break
        where = f"{v.code} {v.name} at {v.site.location}"
        if v.other_site is not None:
            where += f" (barrier at {v.other_site.location})"
        tr.write_line(f"{where}: {v.message} [first in {nodeid}]", yellow=True)


def _builds(results) -> dict:
    """Distinct kernels -> their site count; a kernel = one compiled specialization: its name
    and its site table."""
    return {(r.kernel, tuple((s.file, s.line, s.kind) for s in r.sites.values())): len(r.sites)
            for r in results}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.stash.get(_ON, False):
        return
    results = config.stash[_RESULTS]
    failed = config.stash[_FAILED]
    tr = terminalreporter
    kernels = _builds(r for _n, r in results)
    sites = sum(kernels.values())
    n_viol = sum(len(rep.violations) for rep in failed.values())
    tr.write_sep("=", f"ldssan: {n_viol} violations in {len(failed)} tests")
    tr.write_line(f"ldssan: {len(kernels)} kernels, {len(results)} launches, {sites} sites checked")
    shown = 0
    for nodeid, rep in failed.items():
        for v in rep.violations:
            if shown >= 20 and not config.getoption("verbose"):
                break
            site = v.site
            tr.write_line(f"{nodeid}: {v.code} {v.name} at {site.short_location}")
            shown += 1
    hidden = n_viol - shown
    if hidden > 0:
        tr.write_line(f"({hidden} more hidden; use -v)")
    _write_warnings(tr, config)
    _write_unchecked(tr, config)
    if not results:
        tr.write_sep("!", NOTHING_CHECKED, red=True, bold=True)
        tr.write_line("ldssan was on, but no test launched a FlyDSL kernel: did every kernel test skip "
                      "(a torch.cuda.is_available() guard with FLYDSL_LDSSAN_DEVICE=off?), or launch in a "
                      "subprocess? --ldssan-require-launch makes this a failure.", red=True)
    line = config.stash.get(_WRITTEN, "")
    if line:
        tr.write_line(line, red=line.startswith("ldssan: ERROR"))


def pytest_sessionfinish(session):
    """Write the report file here, where a failure can still fail the run (the terminal
    summary only prints the outcome)."""
    config = session.config
    if not config.stash.get(_ON, False):
        return
    results = config.stash[_RESULTS]
    if not results and config.getoption("--ldssan-require-launch") and session.exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = config.getoption("--ldssan-report") or opts.get("report")
    if not path:
        return
    from .decode import merge_reports
    from .report import write_report

    try:
        # written with no launch too: the file then says so (0 kernels, each test's counts)
        write_report(merge_reports(*(r.report for _n, r in results)), path,
                     extra={"tests": config.stash[_PER_TEST]}, notes=config.stash[_NOTES])
    except OSError as exc:
        config.stash[_WRITTEN] = f"ldssan: ERROR: cannot write the report to {path}: {exc.strerror or exc}"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        config.stash[_WRITTEN] = f"ldssan: report written to {path}"
