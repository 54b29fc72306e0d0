"""The bundled kernels under inputs a hostile user would try (issue #13, item 3): importing a
kernel changes no environment variable; a raw launch whose sizes exceed its tensors is an
error before anything is written; NaN / Inf inputs come out as the references say."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from ldssan.kernels import _launch
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels.mega_moe_reference import moe_weights
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.emu import emulate

from .compile_support import compile_only_env, linker_present

SENTINEL = -777.0


# ---- the environment ----


def test_importing_the_kernels_sets_no_environment_variable():
    env = {k: v for k, v in os.environ.items() if k not in _launch.ARCH_VARS}
    code = ("import os\nbefore = dict(os.environ)\n"
            "import ldssan.kernels.rmsnorm, ldssan.kernels.gemm, ldssan.kernels.mega_moe, ldssan.kernels.ring_pipeline\n"
            "print(sorted(k for k in os.environ if os.environ[k] != before.get(k)))")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_launch_scope_sets_only_what_is_missing_and_removes_it(monkeypatch):
    monkeypatch.delenv("FLYDSL_GPU_ARCH", raising=False)
    monkeypatch.setenv("ARCH", "gfx1250")
    with pytest.raises(KeyError), _launch.gfx1250_target("rmsnorm"):
        assert os.environ["FLYDSL_GPU_ARCH"] == "gfx1250"
        raise KeyError("an error inside the launch")
    assert "FLYDSL_GPU_ARCH" not in os.environ and os.environ["ARCH"] == "gfx1250"


def test_a_caller_chosen_other_target_is_refused(monkeypatch):
    monkeypatch.setenv("FLYDSL_GPU_ARCH", "gfx942")
    monkeypatch.setenv("ARCH", "gfx942")
    with pytest.raises(RuntimeError, match="written for gfx1250"):
        R.rmsnorm(torch.zeros(1, 8), torch.ones(8))
    assert os.environ["FLYDSL_GPU_ARCH"] == "gfx942"


def test_a_launch_without_target_variables_compiles_for_gfx1250(tmp_path, monkeypatch):
    dump = compile_only_env(tmp_path, monkeypatch, R._launch_rmsnorm)
    for var in _launch.ARCH_VARS:
        monkeypatch.delenv(var)
    try:
        R.rmsnorm(torch.zeros(1, 72), torch.ones(72))
    except Exception as exc:  # without ld.lld only the final link fails
        if linker_present() or "lld" not in str(exc):
            raise
    assert not any(var in os.environ for var in _launch.ARCH_VARS)
    (folder,) = dump.glob("rmsnorm_kernel_*")
    assert "gfx1250" in (folder / "12_rocdl_attach_target.mlir").read_text()


# ---- raw launches: bounds before the first store ----


def test_raw_rmsnorm_launch_with_too_many_rows_writes_nothing():
    x, g = torch.randn(2, 256), torch.randn(256)
    y = torch.full((2, 256), SENTINEL)
    with emulate("round-robin"), pytest.raises(ValueError, match=r"addresses X as \(4, 256\)"):
        R.launch_rmsnorm(x, g, y, 4, 1e-6, 256)
    assert (y == SENTINEL).all()


def test_raw_rmsnorm_launch_over_a_prefix_of_the_rows():
    x, g = torch.randn(2, 256), torch.randn(256)
    y = torch.full((2, 256), SENTINEL)
    with emulate("reverse"):
        R.launch_rmsnorm(x, g, y, 1, 1e-6, 256)
    np.testing.assert_allclose(y[0].numpy(), R.rmsnorm_reference(x.numpy(), g.numpy(), 1e-6)[0], rtol=1e-6)
    assert (y[1] == SENTINEL).all()


def _gemm_inputs(m, n, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    return a, b, torch.rand(m, generator=gen) + 0.5, torch.rand(n, generator=gen) + 0.5


@pytest.mark.parametrize("rows", [16, 48])
def test_raw_gemm_launch_checks_bounds_before_any_tile(rows):
    m, n, k = 16, 64, 256
    a, b, sa, sb = _gemm_inputs(m, n, k)
    c = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    tm, tn, tk = G.default_tiles("fp8")
    with emulate("round-robin"):
        args = (a, b, c, sa, sb, rows, n, k, -(-rows // tm), 1, "fp8", "bf16", tm, tn, tk, 4, 2)
        if rows > m:
            with pytest.raises(ValueError, match=r"addresses A as \(48, 256\)"):
                G.launch_gemm(*args)
        else:
            G.launch_gemm(*args)
    if rows > m:
        assert (c == SENTINEL).all()
    else:
        np.testing.assert_array_equal(c.float().numpy(), G.gemm_reference(a, b, sa, sb).astype(np.float32))


# ---- NaN / Inf inputs ----


def test_rmsnorm_nan_and_inf_rows_follow_the_reference():
    x, g = torch.randn(4, 520), torch.randn(520)
    x[1, 7] = float("nan")
    x[2, 519] = float("inf")  # in the scalar tail
    y = torch.full_like(x, SENTINEL)
    with emulate("random(3)"):
        R.rmsnorm(x, g, out=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = R.rmsnorm_reference(x.numpy(), g.numpy(), 1e-6)
    assert np.isnan(ref[1]).all() and np.isnan(ref[2]).any()
    np.testing.assert_array_equal(np.isnan(y.numpy()), np.isnan(ref))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6, equal_nan=True)


def test_gemm_nan_inputs_follow_the_reference():
    a, b, sa, sb = _gemm_inputs(17, 64, 256, seed=1)
    a[3, 100] = float("nan")
    b[5, 0] = float("nan")
    with emulate("reverse"):
        c = G.gemm(a, b, scale_a=sa, scale_b=sb)
    ref = G.gemm_reference(a, b, sa, sb).astype(np.float32)
    assert np.isnan(ref[3]).all() and np.isnan(ref[:, 5]).all()
    np.testing.assert_array_equal(c.float().numpy(), ref)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_mega_moe_nan_and_inf_router_logits_follow_the_reference(scoring):
    gen = torch.Generator().manual_seed(6)
    t, e, d, inter = 6, 4, 256, 256
    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    logits = torch.randn(t, e, generator=gen)
    logits[0, 2] = float("nan")  # one NaN logit
    logits[1] = float("nan")  # every logit NaN
    logits[2, 0] = float("inf")
    logits[3, 3] = float("-inf")
    w1, w2 = moe_weights(gen, e, d, inter)
    out = torch.full((t, d), SENTINEL, dtype=torch.bfloat16)
    with emulate("random(2)", resident=4):
        _, buf = M.mega_moe(x, logits, w1, w2, scoring=scoring, out=out, return_intermediates=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ids, wts = M.route_reference(logits, scoring)
        ref = M.mega_moe_reference(x, logits, w1, w2, scoring=scoring).astype(np.float32)
    np.testing.assert_array_equal(buf["topk_ids"].numpy(), ids)
    np.testing.assert_array_equal(buf["topk_weights"].numpy(), wts)  # NaN where the reference has NaN
    assert np.isnan(ref[1]).all()
    got = out.float().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=2 ** -7, atol=1e-3, equal_nan=True)

