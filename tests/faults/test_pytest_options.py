"""The pytest plugin's settings table (ldssan/pytest_options.py): each setting is a flag,
an ini option named after it and (most) a FLYDSL_LDSSAN_* variable; precedence is command
line > environment > ini option > default, and a bad value names where it came from."""

from __future__ import annotations

import pytest

from ldssan import config as opts
from ldssan import pytest_options as options


class FakeConfig:
    """What `pytest_options` reads of a pytest Config: parsed options and ini values."""

    def __init__(self, cli=None, ini=None, inipath=None):
        self.cli, self.ini, self.inipath = cli or {}, ini or {}, inipath

    def getoption(self, dest):
        return self.cli.get(dest)

    def getini(self, name):
        return self.ini.get(name, "")


# (setting, command-line value, environment value, ini value, what each of them parses to)
CASES = [
    ("mode", "fail", "warn", "WARN", ("fail", "warn", "warn")),
    ("policy", "reverse", "round-robin", "random(7)", ("reverse", "round-robin", "random(7)")),
    ("time_limit", "5", "7", "auto", (5.0, 7.0, "auto")),
    ("enable", True, "0", "true", (True, False, True)),
]


@pytest.mark.parametrize("name, cli, env, ini, parsed", CASES, ids=[c[0] for c in CASES])
def test_command_line_beats_environment_beats_ini(monkeypatch, name, cli, env, ini, parsed):
    s = next(s for s in options.SETTINGS if s.name == name)
    var = opts.OPTIONS[name].env
    monkeypatch.setenv(var, env)
    both = FakeConfig({s.dest: cli}, {s.ini: ini})
    assert (options.value(both, s), options.source(both, name)) == (parsed[0], s.flag)
    no_cli = FakeConfig({}, {s.ini: ini})
    assert (options.value(no_cli, s), options.source(no_cli, name)) == (parsed[1], var)
    monkeypatch.delenv(var)
    assert (options.value(no_cli, s), options.source(no_cli, name)) == (parsed[2], f"ini option {s.ini}")
    assert options.value(FakeConfig(), s) == opts.OPTIONS[name].default


def test_kernels_and_a_setting_without_a_variable(monkeypatch):
    monkeypatch.delenv("FLYDSL_LDSSAN_KERNELS", raising=False)
    kernels = next(s for s in options.SETTINGS if s.name == "kernels")
    assert options.value(FakeConfig({}, {"ldssan_kernels": "a*,-b"}), kernels).text == "a*,-b"
    assert options.value(FakeConfig(), kernels) is None
    require = next(s for s in options.SETTINGS if s.name == "require_launch")
    assert options.value(FakeConfig({}, {"ldssan_require_launch": "yes"}), require) is True
    assert options.value(FakeConfig(), require) is False


def test_an_ini_path_is_relative_to_the_ini_file(monkeypatch, tmp_path):
    monkeypatch.delenv("FLYDSL_LDSSAN_SUPPRESSIONS", raising=False)
    supp = next(s for s in options.SETTINGS if s.name == "suppressions")
    cfg = FakeConfig({}, {"ldssan_suppressions": "ci/supp.txt"}, inipath=tmp_path / "pytest.ini")
    assert options.value(cfg, supp) == str(tmp_path / "ci" / "supp.txt")
    assert options.value(FakeConfig({supp.dest: "ci/supp.txt"}), supp) == "ci/supp.txt"  # the command line's: cwd


@pytest.mark.parametrize("cfg, message", [
    (FakeConfig({}, {"ldssan_mode": "loud"}), "ini option ldssan_mode='loud': expected one of fail, warn"),
    (FakeConfig({"ldssan_mode": "loud"}), "--ldssan-mode='loud': expected one of fail, warn"),
    (FakeConfig({}, {"ldssan": "maybe"}), "ini option ldssan='maybe': expected 0/1"),
    (FakeConfig({}, {"ldssan_step_budget": "-3"}), "ini option ldssan_step_budget='-3'"),
])
def test_a_bad_value_names_its_source(monkeypatch, cfg, message):
    for opt in opts.OPTIONS.values():
        monkeypatch.delenv(opt.env, raising=False)
    with pytest.raises(opts.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        options.resolve(cfg)


def test_every_flag_has_an_ini_option_named_after_it():
    added = {"flags": [], "ini": []}

    class Group:
        def addoption(self, flag, **kwargs):
            added["flags"].append((flag, kwargs["dest"]))

    class Parser:
        def getgroup(self, *args):
            return Group()

        def addini(self, name, help, **kwargs):
            added["ini"].append(name)

    options.add_options(Parser())
    assert [d for _f, d in added["flags"]] == added["ini"]
    assert all(f.startswith("--ldssan") and d == f[2:].replace("-", "_") for f, d in added["flags"])
    # every setting with a variable names an existing option
    assert all(s.name in opts.OPTIONS for s in options.SETTINGS if s.env)
