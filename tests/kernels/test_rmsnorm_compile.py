"""Compile-only tests of the bundled gfx1250 RMSNorm (kernels/rmsnorm.py).

The kernel is compiled through FlyDSL's normal launch path with COMPILE_ONLY=1
and per-stage IR dumps. Stage 10 (`10_canonicalize.mlir`, the input of the
virtual gfx1250) must hold the LDS protocol the module docstring describes;
stage 19 must go through LLVM's gfx1250 code generator (ISA only: that needs
no linker, while the full code object needs ld.lld, absent on most CI hosts).
"""

import re
from pathlib import Path

import numpy as np
import pytest

from ldssan.kernels import rmsnorm as R



import ml_dtypes  # noqa: E402
import torch  # noqa: E402
from flydsl._mlir import ir  # noqa: E402
from flydsl.compiler.jit_function import _create_mlir_context  # noqa: E402

from .compile_support import compile_dump, compile_only_env, gpu_func, is_lds_ptr, isa as isa_of, walk  # noqa: E402
from .protocol import rmsnorm_sites  # noqa: E402

_TORCH = {"bf16": torch.bfloat16, "f32": torch.float32}
_NP = {"bf16": np.dtype(ml_dtypes.bfloat16), "f32": np.dtype(np.float32)}



@pytest.fixture
def compile_env(tmp_path, monkeypatch):
    return compile_only_env(tmp_path, monkeypatch, R._launch_rmsnorm)


def _compile(dtype: str, n: int, dump: Path) -> Path:
    """Compile through the public launcher; return the kernel's dump folder."""
    x = torch.zeros(2, n, dtype=_TORCH[dtype])
    gamma = torch.ones(n, dtype=_TORCH[dtype])

    def launch():
        out = R.rmsnorm(x, gamma, eps=1e-6)
        assert out.shape == x.shape and out.dtype == x.dtype

    return compile_dump(dump, "rmsnorm_kernel", launch)






@pytest.mark.parametrize("n", [510, 4096, 8190])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_compiles_for_gfx1250(dtype, n, compile_env):
    folder = _compile(dtype, n, compile_env)
    stage10 = folder / "10_canonicalize.mlir"
    stage19 = folder / "19_reconcile_unrealized_casts.mlir"
    assert stage10.exists() and stage19.exists()

    sites = rmsnorm_sites()
    src = Path(R.__file__).absolute()
    split = R._row_split(n, 16 if dtype == "bf16" else 32)

    with _create_mlir_context():
        module = ir.Module.parse(stage10.read_text())
        gmod, func = gpu_func(module)
        assert str(func.attributes["known_block_size"]) == "array<i32: 256, 1, 1>"

        # Two LDS buffers: 8 partial slots (32 B) and the total (4 B).
        lds_globals = {}
        for op in gmod.regions[0].blocks[0].operations:
            if op.operation.name == "llvm.mlir.global" and "addr_space = 3" in str(op):
                lds_globals[op.attributes["sym_name"].value] = str(op.attributes["global_type"])
        assert sorted(lds_globals.values()) == ["!llvm.array<32 x i8>", "!llvm.array<4 x i8>"]

        # Program order of the LDS protocol (the body is structured, so textual
        # walk order is program order).
        events = []
        for op in walk(func):
            name = op.operation.name
            if name == "gpu.barrier":
                events.append(("barrier", str(op.location)))
            elif name == "llvm.store" and is_lds_ptr(op.operands[1]):
                events.append(("st", str(op.location)))
            elif name == "llvm.load" and is_lds_ptr(op.operands[0]):
                events.append(("ld", str(op.location)))
        kinds = [k for k, _ in events]
        assert kinds == ["st", "barrier", "ld", "st", "barrier", "ld"], kinds

        # Each barrier carries the location of its own one-line source statement.
        barrier_locs = [loc for k, loc in events if k == "barrier"]
        for loc, line in zip(barrier_locs, (sites["publish_partials"], sites["publish_total"])):
            assert re.search(rf'"{re.escape(str(src))}":{line}:\d+', loc), (loc, line)

        ops = [op.operation.name for op in walk(func)]
        assert ops.count("gpu.shuffle") == 5 + 3  # 32-lane butterfly + 8-partial butterfly
        assert ops.count("rocdl.make.buffer.rsrc") == 3  # x row, y row, gamma
        assert "math.rsqrt" in ops
        body = str(func)
        vec_type = "vector<8xbf16>" if dtype == "bf16" else "vector<4xf32>"
        assert "rocdl.raw.ptr.buffer.load" in body and "rocdl.raw.ptr.buffer.store" in body
        assert vec_type in body and ": i128" in body  # 128-bit vector accesses
        scalar = re.compile(r"rocdl\.raw\.ptr\.buffer\.load .* : " + ("i16" if dtype == "bf16" else "(f32|i32)") + "$", re.M)
        assert bool(scalar.search(body)) == bool(split["n_tail"])  # scalar tail path only when N % vec != 0

    isa = isa_of(stage19)
    assert ".amdgcn_target \"amdgcn-amd-amdhsa-unknown-gfx1250\"" in isa
    assert ".amdhsa_wavefront_size32 1" in isa
    assert isa.count("s_barrier_signal -1") == 2 and isa.count("s_barrier_wait -1") == 2
    assert "ds_store_b32" in isa and "ds_load_b32" in isa
    assert "buffer_load_b128" in isa and "buffer_store_b128" in isa
    assert ".amdhsa_group_segment_fixed_size 36" in isa  # 32 B partials + 4 B total


def test_sync_sites_are_single_statement_lines():
    lines = Path(R.__file__).read_text().splitlines()
    sites = rmsnorm_sites()
    assert sites["store_partial"] < sites["publish_partials"] < sites["load_partial"]
    assert sites["store_total"] < sites["publish_total"] < sites["load_total"]
    for name in ("publish_partials", "publish_total"):
        assert lines[sites[name] - 1].strip() == "fx.gpu.barrier()"


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: (torch.zeros(2, 8, dtype=torch.float16), torch.ones(8, dtype=torch.float16)), TypeError, "dtype"),
        (lambda: (torch.zeros(8), torch.ones(8)), ValueError, "2-D"),
        (lambda: (torch.zeros(2, 0), torch.ones(0)), ValueError, "N"),
        (lambda: (torch.zeros(1, 65537), torch.ones(65537)), ValueError, "N"),
        (lambda: (torch.zeros(8, 4).t(), torch.ones(8)), ValueError, "contiguous"),
        (lambda: (torch.zeros(2, 8), torch.ones(7)), ValueError, "gamma"),
        (lambda: (torch.zeros(2, 8), torch.ones(8, dtype=torch.bfloat16)), TypeError, "gamma"),
    ],
)
def test_argument_validation(make, error, match):
    x, gamma = make()
    with pytest.raises(error, match=match):
        R.rmsnorm(x, gamma)


def test_out_validation():
    x, gamma = torch.zeros(2, 8), torch.ones(8)
    with pytest.raises(ValueError, match="out"):
        R.rmsnorm(x, gamma, out=torch.empty(2, 9))
    with pytest.raises(TypeError, match="out"):
        R.rmsnorm(x, gamma, out=torch.empty(2, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="eps"):
        R.rmsnorm(x, gamma, eps=float("nan"))


@pytest.mark.parametrize("n", [1, 7, 510, 4096, 8190])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_reference_matches_float64_formula(dtype, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * np.array([[1e-3], [1.0], [1e3]])).astype(_NP[dtype])
    gamma = rng.standard_normal(n).astype(_NP[dtype])
    got = R.rmsnorm_reference(x, gamma, 1e-6)
    assert got.dtype == _NP[dtype] and got.shape == x.shape
    x64, g64 = x.astype(np.float64), gamma.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + 1e-6) * g64
    tol = 1e-2 if dtype == "bf16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())
