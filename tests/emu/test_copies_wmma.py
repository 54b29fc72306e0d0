"""Virtual gfx1250: TDM descriptors (padding, out-of-bounds zero fill), async per-lane copies,
copy completion policies, and the WMMA lane layouts against numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ldssan.runtime.emu.rt.wmma import CD_M as _CD_M, CD_N as _CD_N, layout_ab as _layout_ab, wmma
from ldssan.runtime.emu.tdm import decode

from .test_ops import run


def _fragments(mat: np.ndarray, K: int) -> np.ndarray:
    """Per-lane A/B fragments (32, K/2) of a 16xK matrix, in the gfx1250 layout."""
    rows, ks = _layout_ab(K, mat.dtype.itemsize * 8)
    return mat[rows, ks]


@pytest.mark.parametrize("dtype, K", [(ml_dtypes.bfloat16, 32), (ml_dtypes.float8_e4m3fn, 128),
                                      (np.float16, 32), (np.float32, 4)])
def test_wmma_matches_numpy_for_two_batched_groups(dtype, K):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, 16, K)).astype(dtype)
    B = rng.standard_normal((2, 16, K)).astype(dtype)
    C = rng.standard_normal((2, 16, 16)).astype(np.float32)
    a = np.concatenate([_fragments(A[g], K) for g in range(2)])
    b = np.concatenate([_fragments(B[g], K) for g in range(2)])
    c = np.concatenate([C[g][_CD_M, _CD_N] for g in range(2)])
    d = wmma(a, b, c, dtype, dtype, K)
    for g in range(2):
        want = A[g].astype(np.float64) @ B[g].astype(np.float64).T + C[g]
        got = np.zeros((16, 16))
        got[_CD_M, _CD_N] = d[g * 32:(g + 1) * 32]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _desc(lds, gaddr, esize_log2, tdim0, tdim1, tile0, tile1, stride, pad_enc=None):
    cfg = esize_log2 << 16
    if pad_enc is not None:
        interval_enc, amount_enc = pad_enc
        cfg |= 1 << 20 | interval_enc << 22 | amount_enc << 25
    g0 = [1, lds, gaddr & 0xFFFFFFFF, (gaddr >> 32) | (1 << 31)]
    g1 = [cfg, (tdim0 & 0xFFFF) << 16, (tdim0 >> 16) | ((tdim1 & 0xFFFF) << 16),
          (tdim1 >> 16) | (tile0 << 16), tile1, stride, 0, 0]
    return [np.int32(np.uint32(x).astype(np.int32)) for x in g0], [np.uint32(x).astype(np.int32) for x in g1]


def test_tdm_descriptor_decodes_fields():
    g0, g1 = _desc(64, 0x12_3456_7890, 2, 6, 3, 8, 4, 6, pad_enc=(1, 0))
    d = decode(np.array(g0), np.array(g1))
    assert (d.lds_addr, d.global_addr, d.elem_bytes) == (64, 0x12_3456_7890, 4)
    assert (d.tensor_dim0, d.tensor_dim1, d.tile_dim0, d.tile_dim1, d.stride1) == (6, 3, 8, 4, 6)
    assert (d.pad_interval, d.pad_amount) == (16, 4)  # 2^(1+1) dwords, 1 dword


# A TDM descriptor over %src as SSA values (fields per tdm.py's table): %lo / %hi the global
# address (bit 31 of %hi set), %g1 group 1 (the config word %cfg, dims, tile, stride), %z4 /
# %z8 the unused groups; group 0 (it names the LDS address) is the kernel's own.
TDM_DESC = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %chi = arith.constant {hi} : i32
      %cfg = arith.constant {cfg} : i32
      %w1 = arith.constant {w1} : i32
      %w2 = arith.constant {w2} : i32
      %w3 = arith.constant {w3} : i32
      %w4 = arith.constant {w4} : i32
      %w5 = arith.constant {w5} : i32
      %gi = llvm.ptrtoint %src : !llvm.ptr<1> to i64
      %lo = arith.trunci %gi : i64 to i32
      %c32l = arith.constant 32 : i64
      %hi64 = arith.shrui %gi, %c32l : i64
      %hi0 = arith.trunci %hi64 : i64 to i32
      %hi = arith.ori %hi0, %chi : i32
      %g1 = vector.from_elements %cfg, %w1, %w2, %w3, %w4, %w5, %c0, %c0 : vector<8xi32>
      %z4 = arith.constant dense<0> : vector<4xi32>
      %z8 = arith.constant dense<0> : vector<8xi32>"""


def tdm_desc(*, tdim0, tdim1, tile0, tile1, stride, pad=None) -> str:
    """`TDM_DESC` for 4-byte elements: a `tdim1` x `tdim0` tensor with row stride `stride`,
    `tile1` x `tile0` tiles, LDS padding `pad` = (interval, amount) encodings or None."""
    cfg = 2 << 16 if pad is None else 2 << 16 | 1 << 20 | pad[0] << 22 | pad[1] << 25
    words = dict(cfg=cfg, w1=(tdim0 & 0xFFFF) << 16, w2=(tdim1 & 0xFFFF) << 16, w3=tile0 << 16,
                 w4=tile1, w5=stride, hi=-(1 << 31))
    return TDM_DESC.format(**{k: int(np.uint32(v & 0xFFFFFFFF).astype(np.int32)) for k, v in words.items()})


TDM_KERNEL = """
      %g0 = vector.from_elements %c1, %c0, %lo, %hi : vector<4xi32>
      %c32i = arith.constant 32 : i32
      %wave0 = arith.cmpi slt, %t, %c32i : i32
      scf.if %wave0 {{
        rocdl.tensor.load.to.lds %g0, %g1, %z4, %z4, %z8, 0 : vector<4xi32>, vector<8xi32>
      }}
      {wait}
      gpu.barrier
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %q = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q : !llvm.ptr<3> -> i32
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""


def _tdm_body(wait: bool, *, tdim0=6, tdim1=3, tile0=8, tile1=4, stride=6, pad=(1, 0)):
    desc = tdm_desc(tdim0=tdim0, tdim1=tdim1, tile0=tile0, tile1=tile1, stride=stride, pad=pad)
    return desc + TDM_KERNEL.format(wait="rocdl.s.wait.tensorcnt 0" if wait else "")


def _tdm_expect(src, tdim0=6, tdim1=3, tile0=8, tile1=4):
    """LDS words after the load: 16-byte rows padded by 4 bytes, OOB zero, padding untouched (-1)."""
    lds = np.full(64, -1, np.int32)
    for r in range(tile1):
        for c in range(tile0):
            lin = (r * tile0 + c) * 4
            off = lin + (lin // 16) * 4
            lds[off // 4] = src[r * 6 + c] if (r < tdim1 and c < tdim0) else 0
    return lds


def test_tdm_load_pads_and_zero_fills_out_of_bounds():
    src = np.arange(100, 124, dtype=np.int32)  # a 4x6 tensor, the descriptor says 3x6
    got = run(_tdm_body(True), params="%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", extra_args=[src])
    np.testing.assert_array_equal(got[:40], _tdm_expect(src)[:40])


def test_copy_completion_policy_decides_when_data_lands():
    # No tensor wait before the barrier: under `late` the copy has not landed when LDS is
    # read; under `early` it has. (The sanitizer reports this kernel either way.)
    src = np.arange(100, 124, dtype=np.int32)
    late = run(_tdm_body(False), params="%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", extra_args=[src],
               policy="round-robin+late")
    early = run(_tdm_body(False), params="%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", extra_args=[src],
                policy="round-robin+early")
    np.testing.assert_array_equal(early[:40], _tdm_expect(src)[:40])
    assert (late[:8] == -1).all()


ASYNC_KERNEL = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c63 = arith.constant 63 : i32
      %g = llvm.getelementptr %src[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      %l = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      rocdl.global.load.async.to.lds.b32 %g, %l, 0, 0 : !llvm.ptr<1>, !llvm.ptr<3>
      rocdl.s.wait.asynccnt 0
      gpu.barrier
      %j = arith.subi %c63, %t : i32
      %q = llvm.getelementptr %base[%j] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r = llvm.load %q : !llvm.ptr<3> -> i32
      %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""


@pytest.mark.parametrize("policy", ["round-robin", "reverse+early", "random(3)+random"])
def test_async_per_lane_copy_lands_by_its_wait(policy):
    src = np.arange(1000, 1064, dtype=np.int32)
    got = run(ASYNC_KERNEL, params="%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", extra_args=[src], policy=policy)
    np.testing.assert_array_equal(got, src[::-1])
