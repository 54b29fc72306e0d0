"""pytest plugin: `FLYDSL_LDSSAN=1 pytest` (or `pytest --ldssan`) checks every FlyDSL launch.

A test whose launches produced violations fails with the report (`--ldssan-mode=warn`
only reports). The session ends with a summary: kernels, launches, sites, violations.
Precedence for each setting: command line > environment > default.
"""

from __future__ import annotations

import pytest

from . import config as opts

_RESULTS = pytest.StashKey[list]()
_FAILED = pytest.StashKey[dict]()
_ON = pytest.StashKey[bool]()

MODE_HELP = "fail: a test whose launches have violations fails; warn: report only"
MARKER_HELP = ("ldssan(expect=None): the test's FlyDSL launches are expected to produce exactly these "
               "ldssan rule codes (e.g. expect=['LDS001']); the test fails if they are missing, and "
               "other violations still fail it")


def pytest_addoption(parser):
    group = parser.getgroup("ldssan", "LDS synchronization sanitizer for FlyDSL kernels")
    group.addoption("--ldssan", action="store_true", default=None,
                    help="sanitize every FlyDSL kernel launch (same as FLYDSL_LDSSAN=1)")
    group.addoption("--ldssan-mode", choices=("fail", "warn"), default=None, help=MODE_HELP)
    group.addoption("--ldssan-policy", default=None,
                    help="virtual gfx1250 scheduler policy: round-robin, reverse, random(SEED)[+early|+random]")
    group.addoption("--ldssan-report", default=None, metavar="PATH",
                    help="write all violations to PATH (.sarif for SARIF, otherwise JSON)")


def _setting(cfg, opt: str, name: str):
    value = cfg.getoption(opt)
    return opts.get(name) if value is None else value


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_HELP)
    on = bool(_setting(config, "--ldssan", "enable"))
    config.stash[_ON] = on
    config.stash[_RESULTS] = []
    config.stash[_FAILED] = {}
    if on:
        from . import hook

        policy = config.getoption("--ldssan-policy") or opts.get("policy")
        hook.enable(policy=policy)


def pytest_unconfigure(config):
    if config.stash.get(_ON, False):
        from . import hook

        hook.disable()


def pytest_report_header(config):
    if not config.stash.get(_ON, False):
        return None
    mode = _setting(config, "--ldssan-mode", "mode")
    policy = config.getoption("--ldssan-policy") or opts.get("policy")
    return f"ldssan: on (FLYDSL_LDSSAN=1), mode={mode}, policy={policy}, executor=virtual gfx1250"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not item.config.stash.get(_ON, False):
        return (yield)
    from . import hook

    hook.collector().take()
    try:
        return (yield)
    finally:
        _check(item, hook.collector().take())


def _check(item, results) -> None:
    from .decode import merge_reports
    from .report import render_text

    item.config.stash[_RESULTS].extend((item.nodeid, r) for r in results)
    if not results:
        return
    report = merge_reports(*(r.report for r in results))
    marker = item.get_closest_marker("ldssan")
    expected = set(marker.kwargs.get("expect") or ()) if marker else set()
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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.stash.get(_ON, False):
        return
    results = config.stash[_RESULTS]
    failed = config.stash[_FAILED]
    tr = terminalreporter
    # a kernel = one compiled specialization: its name and its site table
    builds = {(r.kernel, tuple((s.file, s.line, s.kind) for s in r.sites.values())): len(r.sites)
              for _n, r in results}
    kernels, sites = builds, sum(builds.values())
    n_viol = sum(len(rep.violations) for rep in failed.values())
    tr.write_sep("=", f"ldssan: {n_viol} violations in {len(failed)} tests")
    tr.write_line(f"ldssan: {len(kernels)} kernels, {len(results)} launches, {sites} sites checked")
    shown = 0
    for nodeid, rep in failed.items():
        for v in rep.violations:
            if shown >= 20 and not config.getoption("verbose"):
                break
            site = v.site
            tr.write_line(f"{nodeid}: {v.code} {v.name} at {site.file}:{site.line}")
            shown += 1
    hidden = n_viol - shown
    if hidden > 0:
        tr.write_line(f"({hidden} more hidden; use -v)")
    path = config.getoption("--ldssan-report") or opts.get("report")
    if path:
        from .decode import merge_reports
        from .report import write_report

        merged = merge_reports(*(r.report for _n, r in results)) if results else None
        if merged is not None:
            write_report(merged, path)
            tr.write_line(f"ldssan: report written to {path}")
