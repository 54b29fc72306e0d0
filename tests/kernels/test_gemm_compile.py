"""Compile-only tests of the bundled gfx1250 GEMM (kernels/gemm.py).

The kernel is compiled through the public launcher with COMPILE_ONLY=1 and
per-stage IR dumps. Stage 10 (`10_canonicalize.mlir`, the input of the virtual
gfx1250) must hold exactly the LDS protocol the module docstring describes: the
TDM ring (loads, tensorcnt waits derived from TDM_PER_WAVE), the async scale
loads and their asynccnt wait, the WMMAs, the barriers, the C staging and the
TDM store. Without ld.lld only the final code-object link fails ("lld invocation
failed"); one configuration per input kind is also taken through LLVM's gfx1250
code generator to ISA.
"""

import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from ldssan.kernels import gemm as G

from flydsl._mlir import ir  # noqa: E402
from flydsl.compiler.jit_function import _create_mlir_context  # noqa: E402

from .compile_support import compile_dump, compile_only_env, gpu_func, is_lds_ptr, isa as isa_of, walk  # noqa: E402
from .protocol import GEMM_SYNCS, gemm_sites  # noqa: E402

_IN = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}
_OUT = {"bf16": torch.bfloat16, "f32": torch.float32}
_NP_IN = {"fp8": np.dtype(ml_dtypes.float8_e4m3fn), "bf16": np.dtype(ml_dtypes.bfloat16)}
_WMMA = {
    "fp8": ("rocdl.wmma.f32.16x16x128.fp8_fp8", "vector<16xi32>"),
    "bf16": ("rocdl.wmma.f32.16x16x32.bf16", "vector<16xbf16>"),
}
# (M, N, K): ragged M and N, K = 640 (5 fp8 / 10 bf16 k-tiles)
_SHAPE = (65, 70, 640)



@pytest.fixture
def compile_env(tmp_path, monkeypatch):
    return compile_only_env(tmp_path, monkeypatch, G._launch_gemm)


def _compile(kind: str, waves: int, nb: int, dump: Path, out: str = "bf16", shape=_SHAPE) -> Path:
    """Compile through the public launcher; return the kernel's dump folder."""
    m, n, k = shape
    a = torch.zeros(m, k, dtype=_IN[kind])
    b = torch.zeros(n, k, dtype=_IN[kind])

    def launch():
        c = G.gemm(a, b, waves=waves, nb=nb, out_dtype=_OUT[out])
        assert c.shape == (m, n) and c.dtype == _OUT[out]

    return compile_dump(dump, "gemm_kernel", launch)





def _int_attr(op, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def _events(op, depth=0):
    """Protocol-relevant ops in program order (structured IR: walk order = program order)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                name = inner.operation.name
                if name in ("scf.for", "scf.if"):
                    tag = name.split(".")[1]
                    yield (f"{tag}{{", None)
                    yield from _events(inner, depth + 1)
                    yield ("}", None)
                    continue
                if name == "rocdl.tensor.load.to.lds":
                    yield ("tdm_load", inner)
                elif name == "rocdl.tensor.store.from.lds":
                    yield ("tdm_store", inner)
                elif name == "rocdl.s.wait.tensorcnt":
                    yield (f"tensor_wait {_int_attr(inner, 'count')}", inner)
                elif name == "rocdl.global.load.async.to.lds.b32":
                    yield ("async_load", inner)
                elif name == "rocdl.s.wait.asynccnt":
                    yield (f"async_wait {_int_attr(inner, 'count')}", inner)
                elif name == "gpu.barrier":
                    yield ("barrier", inner)
                elif name.startswith("rocdl.wmma"):
                    yield ("wmma", inner)
                elif name == "llvm.load" and is_lds_ptr(inner.operands[0]):
                    yield ("ds_load", inner)
                elif name == "llvm.store" and is_lds_ptr(inner.operands[1]):
                    yield ("ds_store", inner)
                elif name.startswith("rocdl.") and ("wait" in name or "barrier" in name or "async" in name):
                    yield (name, inner)  # unexpected synchronisation: makes the comparison fail
                else:
                    continue


def _expected_events(cfg) -> list[str]:
    """The protocol of the module docstring as the op sequence stage 10 must show."""
    chunks = cfg.wmma_k * cfg.elem_bytes // 32
    compute = (["ds_load"] * ((cfg.rm + cfg.rn) * chunks) + ["wmma"] * (cfg.rm * cfg.rn)) * cfg.ksteps
    ev = ["tdm_load"] * (G.TDM_PER_WAVE * (cfg.nb - 1))  # prologue: stages 0 .. nb-2
    for _ in range(cfg.scale_jobs):  # async scale jobs, each under `if wave == j % waves`
        ev += ["if{", "async_load", "}"]
    ev += ["for{", f"tensor_wait {G.TDM_PER_WAVE * (cfg.nb - 2)}", "barrier"]
    ev += ["tdm_load"] * G.TDM_PER_WAVE + compute + ["}"]
    for j in range(cfg.nb - 1):  # drain
        ev += [f"tensor_wait {G.TDM_PER_WAVE * (cfg.nb - 2 - j)}", "barrier"] + compute
    ev += [f"async_wait {G.ASYNC_OUTSTANDING}", "barrier"]
    for _ in range(cfg.rm):  # epilogue: scale_a, then per column block scale_b (2 x b128) and C
        ev += ["ds_load"]
        for _ in range(cfg.rn):
            ev += ["ds_load", "ds_load"] + ["ds_store"] * (cfg.out_bytes * 8 // 16)
    ev += ["barrier", "tdm_store", "tensor_wait 0"]
    return ev


def _g1_word(tdm_op, index: int):
    """Constant value of word `index` of a TDM op's group-1 descriptor, or None if runtime."""
    g1 = tdm_op.operands[1].owner.operation
    assert g1.name == "vector.from_elements", g1
    word = g1.operands[index].owner
    if isinstance(word, ir.Block) or word.operation.name != "arith.constant":
        return None
    return ir.IntegerAttr(word.operation.attributes["value"]).value & 0xFFFFFFFF


def _g1_config(elem_bytes: int, pad_interval_bytes: int = 0, pad_bytes: int = 0) -> int:
    word = int(math.log2(elem_bytes)) << 16
    if pad_bytes:
        word |= 1 << 20 | (int(math.log2(pad_interval_bytes // 4)) - 1) << 22 | (pad_bytes // 4 - 1) << 25
    return word


CONFIGS = [(kind, waves, nb) for kind in ("fp8", "bf16") for waves in (4, 8) for nb in (2, 3, 4)]


@pytest.mark.parametrize("kind, waves, nb", CONFIGS)
def test_stage10_protocol(kind, waves, nb, compile_env):
    folder = _compile(kind, waves, nb, compile_env)
    stage10 = folder / "10_canonicalize.mlir"
    assert stage10.exists() and (folder / "19_reconcile_unrealized_casts.mlir").exists()
    tm, tn, tk = G.default_tiles(kind)
    cfg = G.gemm_config(kind, "bf16", tm, tn, tk, waves, nb)
    sites = gemm_sites()
    src = re.escape(str(Path(G.__file__).absolute()))

    with _create_mlir_context():
        module = ir.Module.parse(stage10.read_text())
        gmod, func = gpu_func(module)
        assert str(func.attributes["known_block_size"]) == f"array<i32: {32 * waves}, 1, 1>"

        # One dynamic LDS arena, sized by the launch.
        lds_globals = [
            op for op in gmod.regions[0].blocks[0].operations
            if op.operation.name == "llvm.mlir.global" and "addr_space = 3" in str(op)
        ]
        assert len(lds_globals) == 1 and "!llvm.array<0 x i8>" in str(lds_globals[0])
        launch = [op for op in walk(module.operation) if op.operation.name == "gpu.launch_func"]
        assert len(launch) == 1
        assert f"dynamic_shared_memory_size %c{cfg.lds_bytes}_i32" in str(launch[0])

        events = list(_events(func))
        kinds = [k for k, _ in events]
        assert kinds == _expected_events(cfg)

        # Each synchronisation carries the location of its own one-line statement.
        def lines_of(kind_prefix):
            return [str(op.location) for k, op in events if k.startswith(kind_prefix)]

        barrier_sites = [sites["steady_barrier"]] + [sites["drain_barrier"]] * (nb - 1)
        barrier_sites += [sites["epilogue_barrier"], sites["c_publish_barrier"]]
        wait_sites = [sites["steady_wait"]] + [sites["drain_wait"]] * (nb - 1) + [sites["store_wait"]]
        for locs, want in (
            (lines_of("barrier"), barrier_sites),
            (lines_of("tensor_wait"), wait_sites),
            (lines_of("async_wait"), [sites["scale_wait"]]),
        ):
            assert len(locs) == len(want)
            for loc, line in zip(locs, want):
                assert re.search(rf'"{src}":{line}:\d+', loc), (loc, line)
        # The steady-state TDM loads come from the prefetch line, the others from the prologue.
        tdm_locs = lines_of("tdm_load")
        for loc in tdm_locs[: G.TDM_PER_WAVE * (nb - 1)]:
            assert re.search(rf'"{src}":{sites["prologue_issue"]}:\d+', loc), loc
        for loc in tdm_locs[G.TDM_PER_WAVE * (nb - 1) :]:
            assert re.search(rf'"{src}":{sites["prefetch_issue"]}:\d+', loc), loc
        assert re.search(rf'"{src}":{sites["tdm_store"]}:\d+', lines_of("tdm_store")[0])

        # WMMA op and operand/result types.
        wmma_name, frag = _WMMA[kind]
        for k, op in events:
            if k == "wmma":
                assert op.operation.name == wmma_name
                assert [str(v.type) for v in op.operands] == [frag, frag, "vector<8xf32>"]
                assert str(op.results[0].type) == "vector<8xf32>"
            elif k == "ds_load":
                assert str(op.results[0].type) in ("vector<4xi32>", "f32")
            elif k == "ds_store":
                assert str(op.operands[0].type) == "vector<4xi32>"
            elif k == "async_load":
                assert [str(v.type) for v in op.operands] == ["!llvm.ptr<1>", "!llvm.ptr<3>"]

        # TDM descriptors: vector<4xi32> group 0, vector<8xi32> group 1; the config word
        # (data size, padding) and the per-wave tile rows are compile-time constants.
        tdm_loads = [op for k, op in events if k == "tdm_load"]
        ring_cfg = _g1_config(cfg.elem_bytes, tk * cfg.elem_bytes, cfg.pad_bytes)
        for i, op in enumerate(tdm_loads):
            assert [str(v.type) for v in op.operands[:2]] == ["vector<4xi32>", "vector<8xi32>"]
            assert _g1_word(op, 0) == ring_cfg
            rows = (tm if i % 2 == 0 else tn) // waves  # A, B alternate; split over all waves
            assert _g1_word(op, 4) == rows
            assert _g1_word(op, 3) is None  # K-extent hi bits | tile_dim0: runtime
        store = [op for k, op in events if k == "tdm_store"][0]
        assert _g1_word(store, 0) == _g1_config(cfg.out_bytes)
        assert _g1_word(store, 4) == tm // waves

        # The async scale loads sit in wave-uniform `if wave == j % waves` branches.
        ifs = [op for op in walk(func) if op.operation.name == "scf.if"]
        assert len(ifs) == cfg.scale_jobs
        assert "rocdl.readfirstlane" in str(func) and "rocdl.wave.id" in str(func)



@pytest.mark.parametrize(
    "kind, waves, nb, out, wmma",
    [("fp8", 4, 3, "bf16", "v_wmma_f32_16x16x128_fp8_fp8"), ("bf16", 8, 2, "f32", "v_wmma_f32_16x16x32_bf16")],
)
def test_isa_for_gfx1250(kind, waves, nb, out, wmma, compile_env):
    folder = _compile(kind, waves, nb, compile_env, out=out)
    isa = isa_of(folder / "19_reconcile_unrealized_casts.mlir")
    assert '.amdgcn_target "amdgcn-amd-amdhsa-unknown-gfx1250"' in isa
    assert ".amdhsa_wavefront_size32 1" in isa
    for mnemonic in (
        "tensor_load_to_lds", "tensor_store_from_lds", "s_wait_tensorcnt", "global_load_async_to_lds_b32",
        "s_wait_asynccnt", wmma, "ds_load_b128", "ds_store_b128", "s_barrier_signal -1", "s_barrier_wait -1",
    ):
        assert mnemonic in isa, mnemonic
    # steady + drain + epilogue + C publish barriers (LLVM may duplicate blocks, never drop one)
    assert isa.count("s_barrier_signal -1") == isa.count("s_barrier_wait -1") >= nb + 2


@pytest.mark.parametrize("out", ["bf16", "f32"])
def test_bf16_output_kinds_compile(out, compile_env):
    folder = _compile("bf16", 4, 3, compile_env, out=out, shape=(1, 33, 2880))
    text = (folder / "10_canonicalize.mlir").read_text()
    assert "rocdl.tensor.store.from.lds" in text
    assert ("arith.truncf" in text) == (out == "bf16")


def test_sync_sites_are_single_statement_lines():
    lines = Path(G.__file__).read_text().splitlines()
    sites = {name: line for name, line in gemm_sites().items() if name in GEMM_SYNCS}
    assert list(sites.values()) == sorted(sites.values())
    want = {
        "steady_wait": "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))",
        "drain_wait": "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2 - j))",
        "scale_wait": "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)",
        "store_wait": "tdm_ops.tensor_wait(0)",
    }
    for name, line in sites.items():
        assert lines[line - 1].strip() == want.get(name, "fx.gpu.barrier()"), name
    extra = gemm_sites()
    assert lines[extra["prefetch_issue"] - 1].strip() == "_issue_stage(kt + nb - 1)"
    assert lines[extra["steady_compute"] - 1].strip() == "_compute(kt % nb)"


def _mats(kind, m=4, n=4, k=256):
    return torch.zeros(m, k, dtype=_IN[kind]), torch.zeros(n, k, dtype=_IN[kind])


@pytest.mark.parametrize(
    "kind, kwargs, match",
    [
        ("fp8", {"tile_k": 64}, "below the fp8 WMMA depth 128"),
        ("fp8", {"tile_k": 32}, "below the fp8 WMMA depth 128"),
        ("bf16", {"tile_k": 16}, "below the bf16 WMMA depth 32"),
        ("fp8", {"tile_k": 192}, "multiple of the fp8 WMMA depth"),
        ("bf16", {"tile_k": 0}, "tile_k"),
        ("fp8", {"waves": 6}, "waves"),
        ("fp8", {"nb": 1}, "nb"),
        ("fp8", {"nb": 5}, "nb"),
        ("fp8", {"tile_m": 48}, "tile_m"),
        ("fp8", {"tile_n": 32, "waves": 8}, "tile_n"),
        ("bf16", {"tile_m": 512, "tile_n": 512, "tile_k": 128, "nb": 4}, "LDS"),
        ("fp8", {"out_dtype": torch.float32}, "bf16"),
    ],
)
def test_config_validation(kind, kwargs, match):
    a, b = _mats(kind)
    with pytest.raises(ValueError, match=match):
        G.gemm(a, b, **kwargs)


def test_argument_validation():
    a, b = _mats("fp8")
    with pytest.raises(TypeError, match="dtype"):
        G.gemm(a.float(), b.float())
    with pytest.raises(TypeError, match="b dtype"):
        G.gemm(a, b.to(torch.bfloat16))
    with pytest.raises(ValueError, match="same K"):
        G.gemm(a, torch.zeros(4, 128, dtype=torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="K"):
        G.gemm(torch.zeros(4, 0, dtype=torch.float8_e4m3fn), torch.zeros(4, 0, dtype=torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="2-D"):
        G.gemm(a[0], b)
    with pytest.raises(ValueError, match="contiguous"):
        G.gemm(torch.zeros(256, 8, dtype=torch.bfloat16).t(), torch.zeros(4, 256, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out_dtype"):
        G.gemm(a, b, out_dtype=torch.float16)
    with pytest.raises(TypeError, match="scale_a"):
        G.gemm(a, b, scale_a=torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="scale_b"):
        G.gemm(a, b, scale_b=torch.ones(5))
    with pytest.raises(ValueError, match="out"):
        G.gemm(a, b, out=torch.empty(4, 5, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="out"):
        G.gemm(a, b, out=torch.empty(4, 4, dtype=torch.float32))
    with pytest.raises(TypeError, match="waves"):
        G.gemm(a, b, waves=4.0)


def test_empty_output_needs_no_launch():
    a = torch.zeros(0, 128, dtype=torch.float8_e4m3fn)
    b = torch.zeros(3, 128, dtype=torch.float8_e4m3fn)
    c = G.gemm(a, b)
    assert c.shape == (0, 3) and c.dtype == torch.bfloat16


def test_lds_layout():
    cfg = G.gemm_config("fp8", "bf16", 64, 64, 128, 4, 3)
    assert (cfg.pad_bytes, cfg.row_bytes, cfg.slot_bytes, cfg.ring_bytes) == (16, 144, 18432, 55296)
    assert cfg.c_bytes <= cfg.ring_bytes and cfg.scale_off >= max(cfg.ring_bytes, cfg.c_bytes)
    assert cfg.lds_bytes == cfg.scale_off + (64 + 64) * 4
    assert (cfg.rm, cfg.rn, cfg.ksteps, cfg.scale_jobs) == (2, 2, 1, 4)
    cfg8 = G.gemm_config("bf16", "f32", 64, 64, 64, 8, 2)
    assert (cfg8.m_waves, cfg8.n_waves, cfg8.rm, cfg8.rn, cfg8.ksteps) == (2, 4, 2, 1, 2)
    assert cfg8.c_bytes == 64 * 64 * 4 and cfg8.scale_off >= cfg8.c_bytes
    # a row payload that is not a power-of-two number of dwords cannot be TDM-padded
    assert G.gemm_config("fp8", "bf16", 32, 32, 384, 4, 2).pad_bytes == 0


@pytest.mark.parametrize("shape", [(1, 5, 640), (65, 70, 2880), (17, 33, 100)])
@pytest.mark.parametrize("kind, out", [("fp8", "bf16"), ("bf16", "bf16"), ("bf16", "f32")])
def test_reference_matches_float64_formula(kind, out, shape):
    m, n, k = shape
    rng = np.random.default_rng(m * 1000 + k)
    a = (rng.standard_normal((m, k)) * 2).astype(_NP_IN[kind])
    b = rng.standard_normal((n, k)).astype(_NP_IN[kind])
    sa = (10.0 ** rng.uniform(-3, 0, m)).astype(np.float32)
    sb = rng.uniform(0.5, 2.0, n).astype(np.float32)
    got = G.gemm_reference(a, b, sa, sb, _OUT[out])
    assert got.shape == (m, n)
    assert got.dtype == (np.dtype(ml_dtypes.bfloat16) if out == "bf16" else np.dtype(np.float32))
    want = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    tol = 1e-2 if out == "bf16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())
    # the torch and default-scale entry points agree with the numpy one
    ta = torch.from_numpy(a.view(np.uint8)).view(_IN[kind]) if kind == "fp8" else torch.from_numpy(
        a.view(np.int16)
    ).view(torch.bfloat16)
    tb = torch.from_numpy(b.view(np.uint8)).view(_IN[kind]) if kind == "fp8" else torch.from_numpy(
        b.view(np.int16)
    ).view(torch.bfloat16)
    np.testing.assert_array_equal(
        G.gemm_reference(ta, tb, torch.from_numpy(sa), torch.from_numpy(sb), _OUT[out]).view(np.uint8),
        got.view(np.uint8),
    )
    ones = G.gemm_reference(a, b, None, None, _OUT[out])
    np.testing.assert_array_equal(ones.view(np.uint8), G.gemm_reference(a, b, np.ones(m), np.ones(n), out).view(np.uint8))


def test_reference_accumulates_per_wmma_block():
    # The model rounds the accumulator to f32 once per WMMA (a 32-wide bf16 K block):
    # one large product followed by 31 tiny ones keeps the tiny ones (exact block sum,
    # one rounding), which per-product f32 accumulation would lose.
    a = np.zeros((1, 64), dtype=np.float32)
    b = np.zeros((1, 64), dtype=np.float32)
    a[0, 0] = b[0, 0] = 256.0  # 2^16; f32 ulp there is 2^-7
    a[0, 1:32] = b[0, 1:32] = 2.0**-6  # 31 * 2^-12 ~ 0.97 ulp
    bf = ml_dtypes.bfloat16
    got = G.gemm_reference(a.astype(bf), b.astype(bf), out_dtype="f32")
    assert got[0, 0] == np.float32(65536.0 + 2.0**-7)
    per_product = np.float32(0.0)
    for x, y in zip(a[0], b[0]):
        per_product = np.float32(per_product + np.float32(x * y))
    assert per_product == np.float32(65536.0)
    with pytest.raises(ValueError, match="bf16"):
        G.gemm_reference(a.astype(ml_dtypes.float8_e4m3fn), b.astype(ml_dtypes.float8_e4m3fn), out_dtype="f32")
