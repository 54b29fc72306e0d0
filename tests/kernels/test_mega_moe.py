"""The bundled MegaMoE (kernels/mega_moe.py) on the virtual gfx1250, sanitized: every routing
case matches the numpy reference (routing decisions exactly, the output at bf16 precision)
with no violations, every case under every scheduler policy (two per case in the default run, the rest
under `-m slow`: tests/sweeps.py); persistent workgroups resident
together (resident=4) so their pulls from the work counter interleave."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ldssan import hook
from ldssan.kernels import mega_moe as M
from tests.sweeps import POLICIES, case_policy_params, default_policies

from .protocol import MOE_GEMM_SYNCS, MOE_ROUTE_SYNCS, mega_moe_sites

INTER = 256


def _weights(e: int, d: int, kind: str, gen):
    if kind == "bf16":
        w1 = (torch.randn(e, 2 * INTER, d, generator=gen) / d ** 0.5).to(torch.bfloat16)
        w2 = (torch.randn(e, d, INTER, generator=gen) / INTER ** 0.5).to(torch.bfloat16)
        return w1, w2, None, None
    w1 = torch.randn(e, 2 * INTER, d, generator=gen).clamp(-6, 6).to(torch.float8_e4m3fn)
    w2 = torch.randn(e, d, INTER, generator=gen).clamp(-6, 6).to(torch.float8_e4m3fn)
    s1 = (torch.rand(e, 2 * INTER, generator=gen) + 0.5) / d ** 0.5
    s2 = (torch.rand(e, d, generator=gen) + 0.5) / INTER ** 0.5
    return w1, w2, s1, s2


def _logits(name: str, t: int, e: int, gen) -> torch.Tensor:
    if name == "random":
        return torch.randn(t, e, generator=gen)
    if name == "ties":  # many exactly equal scores, in first and second place
        return torch.randint(0, 2, (t, e), generator=gen).float() * 2.0
    if name == "one_hot":  # one hot expert; the second choice is a tie among all others
        return torch.nn.functional.one_hot(torch.randint(0, e, (t,), generator=gen), e).float() * 6.0
    if name == "identical":  # every token picks the same two experts
        return torch.randn(1, e, generator=gen).repeat(t, 1)
    if name == "empty_experts":  # only experts 1, e-3 and e-1 are ever chosen
        lg = torch.randn(t, e, generator=gen) - 20.0
        lg[:, [1, e - 3, e - 1]] += torch.rand(t, 3, generator=gen) * 4.0 + 20.0
        return lg
    raise ValueError(name)


# name: (tokens, experts, model_dim, weights, logits, scoring, renormalize, launcher options)
CASES = {
    "random-bf16": (16, 8, 512, "bf16", "random", "softmax", False, {}),
    "random-fp8-tile32": (12, 6, 512, "fp8", "random", "softmax", False, {"tile_m": 32, "tile_n": 64}),
    "exact-ties": (8, 4, 512, "bf16", "ties", "softmax", False, {}),
    "one-hot-fp8": (10, 6, 512, "fp8", "one_hot", "sigmoid", True, {}),
    "all-tokens-identical": (24, 4, 512, "bf16", "identical", "softmax", False, {"persistent": 3}),
    "experts-with-no-tokens": (6, 8, 512, "bf16", "empty_experts", "sigmoid", False, {"nb": 2}),
    "one-token-d1024": (1, 4, 1024, "fp8", "random", "softmax", True, {}),
}


def _inputs(case: str, seed: int = 0):
    t, e, d, kind, logits, scoring, renorm, opts = CASES[case]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(t, d, generator=gen).to(torch.bfloat16)
    if logits == "identical":
        x = x[:1].repeat(t, 1)
    lg = _logits(logits, t, e, gen)
    w1, w2, s1, s2 = _weights(e, d, kind, gen)
    return dict(x=x, router_logits=lg, w1=w1, w2=w2, w1_scale=s1, w2_scale=s2, scoring=scoring,
                renormalize=renorm), opts


def _check_routing(buf, args, tile_m: int):
    ids, wts = M.route_reference(args["router_logits"], args["scoring"], args["renormalize"])
    np.testing.assert_array_equal(buf["topk_ids"].numpy(), ids)
    np.testing.assert_array_equal(buf["topk_weights"].numpy(), wts)
    t, e = args["router_logits"].shape
    counts = np.bincount(ids.ravel(), minlength=e)
    padded = -(-counts // tile_m) * tile_m
    base = np.concatenate([[0], np.cumsum(padded)])
    assert buf["meta"][:2].tolist() == [base[-1] // tile_m, base[-1]]
    tiles = buf["tile_expert"].numpy()
    want = np.full(len(tiles), -1)
    for x in range(e):
        want[base[x] // tile_m: base[x + 1] // tile_m] = x
    np.testing.assert_array_equal(tiles, want)
    # every (token, k) pair owns exactly one row of its expert's segment; the rest is padding
    dst1, dst2 = buf["rowmap1"][:, 0].numpy(), buf["rowmap2"][:, 0].numpy()
    w2 = buf["rowmap2"].view(torch.float32)[:, 1].numpy()
    valid = dst2 >= 0
    assert sorted(dst2[valid].tolist()) == list(range(2 * t))
    np.testing.assert_array_equal(dst1[valid], np.flatnonzero(valid))
    assert (dst1[~valid] == -1).all()
    for row in np.flatnonzero(valid):
        tok, k = divmod(int(dst2[row]), 2)
        x = ids[tok, k]
        assert base[x] <= row < base[x] + counts[x]
        assert w2[row] == wts[tok, k]
        np.testing.assert_array_equal(buf["xs"][row].float().numpy(), args["x"][tok].float().numpy())


def run_checked(case: str, policy: str, *, resident: int = 4):
    args, opts = _inputs(case)
    sentinel = torch.full(args["x"].shape, -777.0, dtype=torch.bfloat16)  # every element must be overwritten
    with hook.sanitize(policy, resident=resident) as col:
        out, buf = M.mega_moe(**args, **opts, out=sentinel, return_intermediates=True)
    assert out.data_ptr() == sentinel.data_ptr()
    ref = M.mega_moe_reference(**args).astype(np.float32)
    np.testing.assert_allclose(out.float().numpy(), ref, rtol=2 ** -7, atol=1e-3)
    _check_routing(buf, args, opts.get("tile_m", M.DEFAULTS["tile_m"]))
    assert len(col.results) == 4  # route, stage 1, stage 2, combine
    for r in col.results:
        assert r.report.clean and not r.report.dropped, (r.kernel, r.report.violations)


@pytest.mark.parametrize("case, policy", case_policy_params(CASES))
def test_mega_moe_matches_reference_with_no_violations_under_every_policy(case, policy):
    """Every case under every policy (two per case in the default run; tests/sweeps.py)."""
    run_checked(case, policy)


def test_one_workgroup_pulls_every_tile():
    # resident=1: the workgroups run one after another, so the first one takes all the work
    run_checked("one-hot-fp8", "random(4)", resident=1)


def test_reference_is_the_dense_formula():
    # the reference itself against a plain float64 MoE (bf16 rounding of H and the output)
    args, _ = _inputs("random-bf16")
    ref = M.mega_moe_reference(**args).astype(np.float64)
    x = args["x"].double()
    ids, wts = M.route_reference(args["router_logits"])
    dense = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(2):
            e = int(ids[t, k])
            gu = args["w1"][e].double() @ x[t]
            h = torch.nn.functional.silu(gu[:INTER]) * gu[INTER:]
            dense[t] += float(wts[t, k]) * (args["w2"][e].double() @ h)
    np.testing.assert_allclose(ref, dense.numpy(), rtol=0.05, atol=0.02)


def test_sites_are_single_statement_lines():
    import pathlib

    lines = pathlib.Path(M.__file__).read_text().splitlines()
    sites = mega_moe_sites()
    sync = {name: sites[name] for name in MOE_ROUTE_SYNCS + MOE_GEMM_SYNCS}
    assert list(sync.values()) == sorted(sync.values())
    for name, line in sync.items():
        text = lines[line - 1].strip()
        assert text in ("fx.gpu.barrier()", "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))",
                        "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2 - j))",
                        "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)"), (name, text)
    assert lines[sites["tile_word"] - 1].strip() == "tile_word = lds_addr + cfg.tile_word_off"
    assert lines[sites["rowmap_read"] - 1].strip() == "rows = _read_rowmap()"
    assert sites["rowmap_wait"] < sites["epilogue_barrier"] < sites["rowmap_read"] < sites["tile_read"]
    assert sites["tile_read_barrier"] < sites["tile_fetch"] < sites["prologue_issue"]


def test_lds_layout_keeps_the_tile_word_apart():
    cfg = M.moe_gemm_config(1, 512, 512, "fp8", 16, 128, 64, 3)
    assert cfg.ring.m_waves == 1 and cfg.ring.n_waves == 4 and cfg.rowmap_jobs == 1
    assert cfg.rowmap_off >= cfg.ring.ring_bytes
    assert cfg.tile_word_off >= cfg.rowmap_off + 16 * 8 and cfg.lds_bytes == cfg.tile_word_off + 16
    cfg32 = M.moe_gemm_config(2, 256, 512, "bf16", 32, 64, 64, 2)
    assert (cfg32.ring.m_waves, cfg32.rowmap_jobs, cfg32.n_steady) == (2, 2, 3)


def _small(**kw):
    t, e, d = kw.pop("t", 4), kw.pop("e", 4), kw.pop("d", 512)
    args = dict(x=torch.zeros(t, d, dtype=torch.bfloat16), router_logits=torch.zeros(t, e),
                w1=torch.zeros(e, 2 * INTER, d, dtype=torch.bfloat16), w2=torch.zeros(e, d, INTER, dtype=torch.bfloat16))
    args.update(kw)
    return args


@pytest.mark.parametrize("kw, exc, match", [
    (dict(t=65), ValueError, "tokens"),
    (dict(e=9), ValueError, "number of experts"),
    (dict(d=500), ValueError, "multiple of 256"),
    (dict(x=torch.zeros(4, 512)), TypeError, "x dtype"),
    (dict(w2=torch.zeros(4, 512, 256, dtype=torch.float8_e4m3fn)), TypeError, "w2 dtype"),
    (dict(scoring="relu"), ValueError, "scoring"),
    (dict(tile_m=64), ValueError, "tile_m"),
    (dict(tile_n=32), ValueError, "tile_n"),
    (dict(tile_k=48), ValueError, "tile_k"),
    (dict(nb=5), ValueError, "nb"),
])
def test_bad_arguments_are_rejected(kw, exc, match):
    with pytest.raises(exc, match=match):
        M.mega_moe(**_small(**kw))


def test_the_default_run_still_runs_every_policy_on_some_case():
    default = set().union(*(default_policies(i) for i in range(len(CASES))))
    assert default == set(POLICIES)
