"""pytest plugin: `FLYDSL_LDSSAN=1 pytest` (or `pytest --ldssan`) checks every FlyDSL launch.

A test whose launches produced violations fails with the report (`--ldssan-mode=warn`
only reports). The session ends with a summary: kernels, launches, sites, violations — or
NOTHING WAS CHECKED when no kernel was launched (`--ldssan-require-launch` then fails the
run). On a host with no GPU, torch's GPU device is the virtual gfx1250 (`ldssan.vdevice`)
from configure on, so `torch.cuda.is_available()` guards at collection see it.
Settings: `ldssan.pytest_options` (command line > environment > ini option > default).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from . import config as opts
from . import pytest_options as options
from . import pytest_scope

_RESULTS = pytest.StashKey[list]()
_FAILED = pytest.StashKey[dict]()
_ON = pytest.StashKey[bool]()
_WRITTEN = pytest.StashKey[str]()  # the terminal line about the report file
_PER_TEST = pytest.StashKey[dict]()  # nodeid -> launches, kernels, sites, violations
_NOTES = pytest.StashKey[list]()  # (level, text): launches that deadlocked or timed out
_LINT = pytest.StashKey[dict]()  # (code, access, barrier) -> (warning, first test): lint warnings
_FAULTED = pytest.StashKey[list]()  # (nodeid, LaunchFault.text): launches that raised, caught or not
_REMOTE = pytest.StashKey[dict]()  # pytest-xdist controller: what the workers checked (`_merge_worker`)
_UNCHECKED = pytest.StashKey[dict]()  # nodeid -> (launcher calls, notes): called, not checked
_SETTINGS = pytest.StashKey[dict]()  # pytest_options.resolve: each setting's value
_SUPPRESS_HITS = pytest.StashKey[Counter]()  # suppression FILE:LINE -> reports it covered

NOTHING_CHECKED = "ldssan: NOTHING WAS CHECKED: no FlyDSL kernel was launched"
ALL_FAULTED = "ldssan: NOTHING WAS CHECKED: every FlyDSL launch faulted"
UNCHECKED = "called, not checked"
OUT_OF_SCOPE = "ldssan: NOTHING WAS CHECKED: every FlyDSL launch was outside the kernel scope"
MARKER_HELP = ("ldssan(check=True, kernels=None, expect=None): check=False (or ldssan(False)) leaves the "
               "test's FlyDSL launches unchecked; kernels='PATTERNS' checks only those kernels (within "
               "--ldssan-kernels); expect=['LDS001']: the launches must produce exactly these rule codes "
               "(the test fails if they are missing, and other violations still fail it)")


def pytest_addoption(parser):
    options.add_options(parser)


def _settings(config) -> dict:
    return config.stash[_SETTINGS]


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_HELP)
    try:
        settings = options.resolve(config, only=("enable", "require_launch"))
        on = bool(settings["enable"])
        if on:
            settings = _validate(config)
    except opts.ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings["require_launch"] and not on:
        # asked for checked launches, but nothing will check them: say so now, not after a green run
        raise pytest.UsageError("ldssan: --ldssan-require-launch needs ldssan on (--ldssan or FLYDSL_LDSSAN=1)")
    config.stash[_SETTINGS] = settings
    config.stash[_ON] = on
    config.stash[_RESULTS] = []
    config.stash[_FAILED] = {}
    config.stash[_PER_TEST] = {}
    config.stash[_NOTES] = []
    config.stash[_LINT] = {}
    config.stash[_FAULTED] = []
    config.stash[_REMOTE] = {"builds": {}, "launches": 0, "reports": [],
                             "memo": {"replayed": 0, "recorded": 0, "not_memoizable": {}}}
    config.stash[_UNCHECKED] = {}
    config.stash[_SUPPRESS_HITS] = Counter()
    if on:
        from . import hook
        from .runtime.device.hardware import HardwareUnavailable

        try:
            hook.enable(policy=settings["policy"], time_limit=settings["time_limit"],
                        step_budget=settings["step_budget"], kernels=settings["kernels"])
        except (HardwareUnavailable, opts.ConfigError) as exc:  # one line, exit 4
            raise pytest.UsageError(str(exc)) from None


def _validate(config) -> dict:
    """Every setting and option read once, before any test runs: a bad one is a usage
    error (exit 4). The settings by name; the scope names where it was given."""
    from dataclasses import replace

    from . import suppress
    from .report import report_path_problem

    opts.validate()
    settings = options.resolve(config)
    if settings["kernels"] is not None:
        settings["kernels"] = replace(settings["kernels"], source=options.source(config, "kernels"))
    path = settings["report"]
    problem = path and report_path_problem(path)
    if problem:
        raise opts.ConfigError(f"ldssan: {options.source(config, 'report')}: {problem}")
    settings["suppression_entries"] = suppress.load(settings["suppressions"]) if settings["suppressions"] else ()
    return settings


def pytest_unconfigure(config):
    if config.stash.get(_ON, False):
        from . import hook

        hook.disable()


def pytest_report_header(config):
    if not config.stash.get(_ON, False):
        return None
    mode, policy = _settings(config)["mode"], _settings(config)["policy"]
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

    restore = pytest_scope.enter(item, _settings(item.config)["kernels"])
    col = hook.collector()
    col.take()
    col.take_faults()
    frontend.CALLS.take()
    raised, escaped = True, None
    try:
        out = yield
        raised = False
        return out
    except (DeadlockError, StepBudgetExceeded) as exc:
        escaped = exc  # noted below unless the collector kept its launch already
        raise
    finally:
        restore()
        results, faults = col.take(), col.take_faults()
        try:
            _check(item, results)
        except BaseException:
            _record_faults(item, faults, escaped, fail=False)
            raise
        finally:
            _check_calls(item, results, *frontend.CALLS.take(), fail=not raised)
        _record_faults(item, faults, escaped, fail=not raised)


def _record_faults(item, faults, escaped, *, fail: bool) -> None:
    """Launches that raised (`hook.Collector.faults`), also when the test caught the error:
    each is an error notification of the report (so it is not clean; SARIF:
    executionSuccessful false) and a line of the summary. An ldssan internal error fails
    the test (`fail`: unless it is failing already)."""
    notes = item.config.stash[_NOTES]
    for f in faults:
        item.config.stash[_FAULTED].append((item.nodeid, f.text))
        notes.append(("error", f"{item.nodeid}: {f.text}"))
    if escaped is not None and not faults:  # a fault no collector saw (the hardware engine)
        notes.append(("error", f"{item.nodeid}: {type(escaped).__name__}: {escaped}"))
    item.config.stash[_PER_TEST].setdefault(item.nodeid, {})["faulted"] = len(faults)
    internal = [f for f in faults if f.internal]
    if internal and fail:
        pytest.fail(f"{internal[0].text} (caught by the test, but the launch was not checked)", pytrace=False)


def _check(item, results) -> None:
    from .decode import merge_reports
    from .report import render_text

    settings = _settings(item.config)
    item.config.stash[_RESULTS].extend((item.nodeid, r) for r in results)
    kernels = _builds(results)
    entry = item.config.stash[_PER_TEST][item.nodeid] = {
        "launches": len(results), "kernels": len(kernels), "sites": sum(kernels.values()),
        "violations": sum(len(r.report.violations) for r in results),
        "replayed": sum(r.memo == "replayed" for r in results)}
    pytest_scope.count_skipped(entry, settings["kernels"])
    pytest_scope.mark(results, settings["suppression_entries"], item.config.stash[_SUPPRESS_HITS])
    entry[pytest_scope.SUPPRESSED_KEY] = sum(v.suppression is not None for r in results for v in r.report.violations)
    _note_warnings(item, results)
    marker = item.get_closest_marker("ldssan")
    expected = set(marker.kwargs.get("expect") or ()) if marker else set()
    if not results:
        if expected:  # an expectation no launch could meet is a test that cannot fail
            pytest.fail(f"ldssan: expected {sorted(expected)} but the test launched no FlyDSL kernel "
                        "(nothing was checked)", pytrace=False)
        return
    report = pytest_scope.unsuppressed(merge_reports(*(r.report for r in results)))
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
    if _settings(item.config)["mode"] == "fail":
        text = render_text(report, max_violations=opts.get("max_reports"))
        pytest.fail(f"ldssan found LDS synchronization violations:\n{text}", pytrace=False)


def _check_calls(item, results, calls: int, checked: int, notes: list[str], *, fail: bool) -> None:
    """A test that asked FlyDSL for launches (`@flyc.jit` calls, `flyc.compile`, compiled
    function calls) but had none checked passed on nothing: it is listed in the summary
    and the report ("called, not checked"), and fails under --ldssan-require-launch
    (`fail`: unless the test already failed, whose own error stays the one shown)."""
    entry = item.config.stash[_PER_TEST].setdefault(item.nodeid, {"launches": len(results)})
    entry["calls"] = calls
    # `checked` also counts launches a test sanitized itself (`with ldssan.sanitize()`); a launch
    # a kernel scope left out was not meant to be checked
    outside = pytest_scope.left_out({item.nodeid: entry})
    entry["not_checked"] = unchecked = calls > outside and not results and not checked
    for text in notes:
        item.config.stash[_NOTES].append(("warning", f"{item.nodeid}: {text}"))
    if not unchecked:
        return
    why = notes[0] if notes else ("no launch reached the sanitizer" if fail else
                                  "the test raised before any launch finished its check")
    item.config.stash[_UNCHECKED][item.nodeid] = (calls, why)
    item.config.stash[_NOTES].append(("warning", f"{item.nodeid}: {UNCHECKED}: {calls} launcher calls, 0 checked"))
    if fail and _settings(item.config)["require_launch"]:
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
    """Keep the warnings (lint under FLYDSL_LDSSAN_LINT=warn, LDS004 same-value writes) for the
    terminal summary: they fail no test, so a report printed only on failure would never show
    them. Once per site pair."""
    seen = item.config.stash[_LINT]
    for r in results:
        for v in r.report.violations:
            if v.severity != "warning" or v.suppression is not None:
                continue
            other = v.other_site.location if v.other_site is not None else ""
            seen.setdefault((v.code, v.site.location, other), (v, item.nodeid))


def _write_warnings(tr, config) -> None:
    found = config.stash[_LINT]
    if not found:
        return
    tr.write_sep("-", f"ldssan: {len(found)} warnings (they fail no test; FLYDSL_LDSSAN_LINT=error makes the "
                      "lint ones fail)", yellow=True)
    for n, (v, nodeid) in enumerate(found.values()):
        if n >= 20 and not config.getoption("verbose"):
            tr.write_line(f"({len(found) - n} more hidden; use -v)")
            break
        where = f"{v.code} {v.name} at {v.site.location}"
        if v.other_site is not None:
            other = "other write" if v.code == "LDS004" else "barrier"  # LDS004: same-value writes
            where += f" ({other} at {v.other_site.location})"
        tr.write_line(f"{where}: {v.message} [first in {nodeid}]", yellow=True)


def _builds(results) -> dict:
    """Distinct kernels -> their site count; a kernel = one compiled specialization: its name
    and its site table."""
    return {(r.kernel, tuple((s.file, s.line, s.kind) for s in r.sites.values())): len(r.sites)
            for r in results}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.stash.get(_ON, False):
        return
    failed = config.stash[_FAILED]
    tr = terminalreporter
    kernels = _all_builds(config)
    sites = sum(kernels.values())
    n_viol = sum(len(rep.violations) for rep in failed.values())
    tr.write_sep("=", f"ldssan: {n_viol} violations in {len(failed)} tests")
    tr.write_line(f"ldssan: {len(kernels)} kernels, {_checked_launches(config)} launches, {sites} sites checked")
    from .session import memo_line

    memo = memo_line(_memo(config))
    if memo:
        tr.write_line(memo)
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
    for text, warn in pytest_scope.summary_lines(_settings(config), config.stash[_PER_TEST],
                                                 config.stash[_SUPPRESS_HITS], _kernels_flag(config)):
        tr.write_line(text, yellow=warn)
    _write_warnings(tr, config)
    _write_faults(tr, config)
    _write_unchecked(tr, config)
    if config.stash[_FAULTED] and not _checked_launches(config):
        tr.write_sep("!", ALL_FAULTED, red=True, bold=True)
    elif not _checked_launches(config) and pytest_scope.left_out(config.stash[_PER_TEST]):
        tr.write_sep("!", OUT_OF_SCOPE, red=True, bold=True)
    elif not _checked_launches(config):
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
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: the controller reports
        _send_to_controller(config)
        return
    if not _checked_launches(config) and _settings(config)["require_launch"] and session.exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = _settings(config)["report"]
    if not path:
        return
    from .decode import merge_reports
    from .report import write_report

    try:
        # written with no launch too: the file then says so (0 kernels, each test's counts)
        settings, hits = _settings(config), config.stash[_SUPPRESS_HITS]
        write_report(merge_reports(*_all_reports(config)), path,
                     extra={"tests": config.stash[_PER_TEST], "memo": _memo(config),
                            **pytest_scope.report_extra(settings, config.stash[_PER_TEST], hits, _kernels_flag(config))},
                     notes=config.stash[_NOTES] + pytest_scope.stale_notes(settings, hits))
    except OSError as exc:
        config.stash[_WRITTEN] = f"ldssan: ERROR: cannot write the report to {path}: {exc.strerror or exc}"
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        config.stash[_WRITTEN] = f"ldssan: report written to {path}"


# -- totals over this process and, under pytest-xdist, every worker -----------------------


def _all_builds(config) -> dict:
    """Distinct kernel builds -> site count, this process's and the workers'."""
    return {**_builds(r for _n, r in config.stash[_RESULTS]), **config.stash[_REMOTE]["builds"]}


def _kernels_flag(config) -> str:
    """Where the session's kernel scope was given, for the summary and the report."""
    return options.source(config, "kernels")


def _checked_launches(config) -> int:
    return len(config.stash[_RESULTS]) + config.stash[_REMOTE]["launches"]


def _memo(config) -> dict:
    """How the launch memo took the checked launches (`session.memo_counts`), workers' included."""
    from .session import add_memo_counts, memo_counts

    return add_memo_counts(memo_counts(r for _n, r in config.stash[_RESULTS]), config.stash[_REMOTE]["memo"])


def _all_reports(config) -> list:
    return [r.report for _n, r in config.stash[_RESULTS]] + config.stash[_REMOTE]["reports"]


def _write_faults(tr, config) -> None:
    faulted = config.stash[_FAULTED]
    if not faulted:
        return
    tr.write_sep("-", f"ldssan: {len(faulted)} launches faulted (not checked to their end)", red=True)
    for n, (nodeid, text) in enumerate(faulted):
        if n >= 20 and not config.getoption("verbose"):
            tr.write_line(f"({len(faulted) - n} more hidden; use -v)")
            break
        tr.write_line(f"{nodeid}: {text}", red=True)


# -- pytest-xdist: each worker sends what it checked; the controller alone reports ------------

_WORKER_KEY = "ldssan"


def _send_to_controller(config) -> None:
    """A worker's results as JSON text in `config.workeroutput` (xdist hands it to the
    controller's `pytest_testnodedown`)."""
    from .decode import Report, merge_reports
    from .report import to_json
    from .session import memo_counts

    stash = config.stash
    config.workeroutput[_WORKER_KEY] = json.dumps({
        "builds": [[kernel, [list(s) for s in sites], n] for (kernel, sites), n in _builds(
            r for _n, r in stash[_RESULTS]).items()],
        "launches": len(stash[_RESULTS]),
        "memo": memo_counts(r for _n, r in stash[_RESULTS]),
        "report": to_json(merge_reports(*(r.report for _n, r in stash[_RESULTS]))),
        "failed": {nodeid: to_json(rep) for nodeid, rep in stash[_FAILED].items()},
        "per_test": stash[_PER_TEST],
        "notes": stash[_NOTES],
        "faulted": stash[_FAULTED],
        "unchecked": stash[_UNCHECKED],
        "suppress_hits": dict(stash[_SUPPRESS_HITS]),
        "lint": [[list(key), to_json(Report(violations=(v,))), nodeid] for key, (v, nodeid) in stash[_LINT].items()],
    })


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the plugin works without xdist
def pytest_testnodedown(node, error):
    config = node.config
    if not config.stash.get(_ON, False):
        return
    sent = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if sent is None:  # the worker died before its session finished: its checks are lost
        config.stash[_NOTES].append(("error", f"ldssan: pytest-xdist worker {node.gateway.id} went down "
                                              f"({error or 'no results sent'}): its launches' results are lost"))
        return
    _merge_worker(config, json.loads(sent))


def _merge_worker(config, data: dict) -> None:
    from .report import from_json
    from .session import add_memo_counts

    stash = config.stash
    remote = stash[_REMOTE]
    for kernel, sites, n in data["builds"]:
        remote["builds"][kernel, tuple(tuple(s) for s in sites)] = n
    remote["launches"] += data["launches"]
    remote["memo"] = add_memo_counts(remote["memo"], data["memo"])
    remote["reports"].append(from_json(data["report"]))
    stash[_FAILED].update({nodeid: from_json(rep) for nodeid, rep in data["failed"].items()})
    stash[_PER_TEST].update(data["per_test"])
    stash[_NOTES].extend(tuple(n) for n in data["notes"])
    stash[_FAULTED].extend(tuple(f) for f in data["faulted"])
    stash[_UNCHECKED].update({nodeid: tuple(v) for nodeid, v in data["unchecked"].items()})
    stash[_SUPPRESS_HITS].update(data["suppress_hits"])
    for key, rep, nodeid in data["lint"]:
        stash[_LINT].setdefault(tuple(key), (from_json(rep).violations[0], nodeid))
