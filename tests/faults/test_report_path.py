"""A report file that cannot be written is a clear message, never a traceback: refused up
front when the path is already bad (see test_options.py), and when it goes bad during the
run, one error line in the summary and a failing exit status (before: an INTERNALERROR
traceback from the terminal summary)."""

from __future__ import annotations

import pytest

from tests.sanitizer.test_plugin import KERNELS

pytest_plugins = ["pytester"]

BLOCK_THE_PATH = '''

def test_zz_blocks_the_report_directory():
    open("out", "w").write("a file where the report directory should be")
'''


def test_report_path_that_breaks_during_the_run_fails_the_run_in_one_line(pytester):
    pytester.makepyfile(test_kernels=KERNELS + BLOCK_THE_PATH)
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan", "--ldssan-report=out/r.json",
                                        "-k", "clean or blocks")
    res.assert_outcomes(passed=2)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(["ldssan: ERROR: cannot write the report to out/r.json: *"])
    out = res.stdout.str() + res.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out


def test_report_is_still_written_when_the_path_is_good(pytester):
    pytester.makepyfile(test_kernels=KERNELS)
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan", "--ldssan-report=new/dir/r.json",
                                        "-k", "clean")
    assert res.ret == pytest.ExitCode.OK
    res.stdout.fnmatch_lines(["ldssan: report written to new/dir/r.json"])
    assert (pytester.path / "new" / "dir" / "r.json").exists()

