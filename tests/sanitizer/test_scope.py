"""Kernel scope (ldssan/scope.py): the pattern forms, and `sanitize(kernels=...)` on a racy
kernel: in scope it is checked; out of scope it runs plain (its output still right) and is
counted, never checked; the launch cache keeps the two builds apart."""

from __future__ import annotations

import os

import pytest

from ldssan import scope
from ldssan.runtime.arguments import ArgumentTypeError, ArgumentValueError, ConfigError

from ..neighbour import load_neighbour

FILE = os.path.join(os.sep, "src", "pkg", "ops", "gemm.py")


@pytest.mark.parametrize("patterns, covered", [
    ("gemm", {"gemm_0"}),                        # the Python name: the symbol less FlyDSL's _<n>
    ("gemm_0", {"gemm_0"}),                      # the symbol itself
    ("g*,-*_2", {"gemm_0"}),                     # a leading - excludes
    ("-gemm", {"norm_1", "gemm_bwd_2"}),         # only exclusions: everything else
    ("file:gemm.py", {"gemm_0", "norm_1", "gemm_bwd_2"}),  # a trailing part of the path
    ("file:ops/*.py,-norm", {"gemm_0", "gemm_bwd_2"}),
    ("file:/src/pkg/ops/gemm.py", {"gemm_0", "norm_1", "gemm_bwd_2"}),
    ("file:other.py", set()),
    (" gemm_bwd , norm ", {"norm_1", "gemm_bwd_2"}),  # spaces around patterns
    ("Gemm", set()),                             # case sensitive
])
def test_patterns(patterns, covered):
    s = scope.parse(patterns, "test")
    assert {k for k in ("gemm_0", "norm_1", "gemm_bwd_2") if s.covers([(k, FILE)])} == covered


def test_module_pattern_names_the_importing_module():
    s = scope.parse("module:ldssan.sco*", "test")
    assert s.covers([("k_0", scope.__file__)]) and not s.covers([("k_0", FILE)])


def test_a_module_is_checked_when_any_kernel_is_in_scope_and_markers_narrow():
    session = scope.parse("-norm", "--ldssan-kernels")
    assert session.covers([("norm_0", FILE), ("gemm_1", FILE)])
    narrow = session.narrowed(scope.parse("norm,gemm", "marker"))
    assert narrow.covers([("gemm_1", FILE)]) and not narrow.covers([("norm_0", FILE)])
    assert narrow.refuser([("norm_0", FILE)]).source == "--ldssan-kernels"  # the outer one left it out
    assert narrow.refuser([("other_0", FILE)]).source == "marker"
    assert not scope.nothing().covers([("gemm_0", FILE)])


@pytest.mark.parametrize("text, problem", [("a,,b", "an empty pattern"), ("a,", "an empty pattern"),
                                           ("-", "nothing to match"), ("file:", "nothing to match")])
def test_bad_patterns(text, problem, monkeypatch):
    with pytest.raises(ValueError, match=problem):
        scope.parse(text, "test")
    monkeypatch.setenv("FLYDSL_LDSSAN_KERNELS", text)
    from ldssan import config

    with pytest.raises(ConfigError, match=f"FLYDSL_LDSSAN_KERNELS={text!r}: .*{problem}"):
        config.validate()
    with pytest.raises(ArgumentValueError, match=rf"sanitize\(kernels="):
        scope.argument("sanitize", text)
    with pytest.raises(ArgumentTypeError):
        scope.argument("sanitize", 3)
    assert scope.parse(" , ", "test") is None and scope.argument("enable", None) is None


def test_a_scope_on_a_gfx1250_device_is_a_usage_error():
    with pytest.raises(ConfigError, match="not supported on a gfx1250 HIP device"):
        scope.refuse_hardware(scope.parse("gemm", "--ldssan-kernels"), "hardware")
    scope.refuse_hardware(scope.parse("gemm", "--ldssan-kernels"), "emulated")
    scope.refuse_hardware(None, "hardware")


def test_sanitize_checks_only_kernels_in_scope(tmp_path):
    import torch

    import ldssan

    mod = load_neighbour(tmp_path, name="racy", sync=(), shift=32)
    seen = []
    scope.SKIPPED.take()
    # alternating scopes on one launcher: each build is served only to its own scope
    for kernels in ("file:neighbour_kernel.py,-module:nothing.*", "-racy", None):
        with ldssan.sanitize(kernels=kernels) as res:
            out = torch.zeros(64, dtype=torch.int32)
            mod.launch(out)
        assert out.tolist() == [((t + 32) % 64) * 10 for t in range(64)]  # right either way
        seen.append((len(res.results), {v.code for v in res.violations}, scope.SKIPPED.take()))
    checked = (1, {"LDS001"}, [])
    left_out = (0, set(), [("sanitize(kernels=...)", ("racy_0",))])
    assert seen == [checked, left_out, checked]
