"""Virtual gfx1250 hot ops: the vectorized forms equal the straightforward ones.

- WMMA: operand and C/D matrices built by reshape/transpose and 8-bit code tables equal the
  fancy-index scatter of the layout statement (`layout_ab`, `CD_M`/`CD_N`, `scaled_layout`)
  with ml_dtypes conversion, for random bit patterns of every element type.
- TDM: one batched move of all workgroups' tiles leaves LDS and global memory exactly as
  moving them one workgroup at a time does (differing addresses, out-of-bounds tiles,
  padding, predicated-off workgroups), and a batch decodes per workgroup as `decode` does.
"""

from __future__ import annotations

import importlib
import types

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ldssan.runtime.emu.memory import EmuMemoryError, GlobalMemory, LocalMemory
from ldssan.runtime.emu.rt.copies import tdm_copy
from ldssan.runtime.emu.tdm import decode, decode_batch

# the module, not the `wmma` function the package re-exports under that name
W = importlib.import_module("ldssan.runtime.emu.rt.wmma")
_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (dtype, K) of every plain WMMA element type the emitter accepts
_PLAIN = [(ml_dtypes.bfloat16, 32), (np.float16, 32), (np.float32, 4), (ml_dtypes.float8_e4m3fn, 64),
          (ml_dtypes.float8_e4m3fn, 128), (ml_dtypes.float8_e5m2, 128), (np.int8, 64)]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaN where NaN, and equal signs of zero."""
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # NaNs compare equal here
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _fancy_matrix(frag, dtype, K):
    """The scatter of the layout statement (the emulator's former construction)."""
    vals = np.ascontiguousarray(frag).view(np.uint8).reshape(len(frag), -1).view(dtype).astype(np.float64)
    B = len(frag) // 32
    rows, ks = W.layout_ab(K, np.dtype(dtype).itemsize * 8)
    mat = np.zeros((B, 16, K))
    mat[:, rows, ks] = vals.reshape(B, 32, K // 2)
    return mat


def _fancy_cd(c):
    B = len(c) // 32
    C = np.zeros((B, 16, 16))
    C[:, W.CD_M, W.CD_N] = c.reshape(B, 32, 8).astype(np.float64)
    return C


def _random_bytes(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("dtype, K", _PLAIN)
@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 3))
def test_wmma_operand_layout_equals_the_fancy_index_scatter(dtype, K, seed, groups):
    size = np.dtype(dtype).itemsize
    frag = _random_bytes(seed, (32 * groups, K // 2 * size)).view(dtype)
    _same(W._matrix(frag, dtype, K), _fancy_matrix(frag, dtype, K))


@pytest.mark.parametrize("cdt", [np.float32, np.float16, ml_dtypes.bfloat16])
@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 3), mod=st.sampled_from(sorted(W.C_MODIFIERS)))
def test_wmma_cd_layout_equals_the_fancy_index_scatter(cdt, seed, groups, mod):
    rng = np.random.default_rng(seed)
    A, Bm = rng.standard_normal((2, groups, 16, 8))
    c = rng.standard_normal((32 * groups, 8)).astype(cdt)
    D = A @ Bm.transpose(0, 2, 1) + W.C_MODIFIERS[mod](_fancy_cd(c))
    want = D[:, W.CD_M, W.CD_N].reshape(-1, 8).astype(cdt)
    got = W._accumulate(A, Bm, c, mod)
    _same(got.astype(np.float64), want.astype(np.float64))


def _fancy_scaled(frag, fmt, scale, opsel, scale_fmt):
    bits, dtype = W.SCALED_FORMATS[fmt]
    raw = np.ascontiguousarray(frag).view(np.uint8).reshape(len(frag), -1)
    stream = np.unpackbits(raw, axis=1, bitorder="little").reshape(len(raw), 64, bits)
    codes = (stream << np.arange(bits, dtype=np.uint8)).sum(axis=2, dtype=np.uint8)
    vals = codes.view(dtype).astype(np.float64)
    B = len(raw) // 32
    mat = np.zeros((B, 16, 128))
    rows = np.broadcast_to(np.arange(32)[:, None] % 16, (32, 64))
    mat[:, rows, W.scaled_layout(bits)] = vals.reshape(B, 32, 64)
    sb = np.ascontiguousarray(scale).view(np.uint8).reshape(B, 32, -1)[:, opsel * 16:opsel * 16 + 16]
    factors = sb.view(W.SCALE_FORMATS[scale_fmt]).astype(np.float64)
    return mat * np.repeat(factors, 128 // factors.shape[2], axis=2)


@pytest.mark.parametrize("fmt", sorted(W.SCALED_FORMATS))
@_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 2), opsel=st.integers(0, 1),
       scale_fmt=st.sampled_from(sorted(W.SCALE_FORMATS)), scale_bytes=st.sampled_from([4, 8]))
def test_scaled_wmma_layout_equals_the_fancy_index_scatter(fmt, seed, groups, opsel, scale_fmt, scale_bytes):
    bits = W.SCALED_FORMATS[fmt][0]
    frag = _random_bytes(seed, (32 * groups, bits * 8)).view(np.int32)
    scale = _random_bytes(seed + 1, (32 * groups, scale_bytes))
    _same(W._scaled_matrix(frag, fmt, scale, opsel, scale_fmt), _fancy_scaled(frag, fmt, scale, opsel, scale_fmt))


# -- TDM ------------------------------------------------------------------------------------

LDS_BYTES = 1024
GLOBAL_BYTES = 4096


def _words(*, pred, lds, gaddr, esize_log2, tdim0, tdim1, tile0, tile1, stride, pad):
    """Group 0 and group 1 words of a 2-D descriptor (the field table of `tdm.py`)."""
    cfg = esize_log2 << 16
    if pad is not None:
        cfg |= 1 << 20 | pad[0] << 22 | pad[1] << 25
    g0 = [int(pred), lds, gaddr & 0xFFFFFFFF, (gaddr >> 32) | (2 << 30)]
    g1 = [cfg, (tdim0 & 0xFFFF) << 16, (tdim0 >> 16) | ((tdim1 & 0xFFFF) << 16),
          (tdim1 >> 16) | (tile0 << 16), tile1, stride, 0, 0]
    return np.array(g0, np.uint32).view(np.int32), np.array(g1, np.uint32).view(np.int32)


@st.composite
def tdm_batches(draw):
    """Per-lane (B*32, n) descriptor groups of B workgroups sharing one tile shape, each with
    its own addresses, tensor extents (some smaller than the tile) and predicate."""
    B = draw(st.integers(1, 4))
    esize_log2 = draw(st.integers(0, 2))
    eb = 1 << esize_log2
    tile0, tile1 = draw(st.integers(1, 8)), draw(st.integers(1, 6))
    stride = tile0 + draw(st.integers(0, 4))
    pad = draw(st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 1))))
    rows = []
    for _ in range(B):
        span = ((tile1 - 1) * stride + tile0) * eb
        rows.append(_words(pred=draw(st.integers(0, 5)) > 0,
                           lds=draw(st.integers(0, LDS_BYTES // 4)) * 4,  # some tiles leave the LDS
                           gaddr=BASE + draw(st.integers(0, (GLOBAL_BYTES - span) // eb)) * eb,
                           esize_log2=esize_log2, tdim0=draw(st.integers(0, tile0 + 2)),
                           tdim1=draw(st.integers(0, tile1 + 2)), tile0=tile0, tile1=tile1,
                           stride=stride, pad=pad))
    g0 = np.repeat(np.stack([r[0] for r in rows]), 32, axis=0)
    g1 = np.repeat(np.stack([r[1] for r in rows]), 32, axis=0)
    return B, g0, g1


_GLOBAL = np.zeros(GLOBAL_BYTES, np.uint8)  # lives as long as the module: regions alias it
BASE = _GLOBAL.ctypes.data


def _ctx(B: int, seed: int):
    rng = np.random.default_rng(seed)
    _GLOBAL[:] = rng.integers(0, 256, GLOBAL_BYTES, dtype=np.uint8)
    gmem = GlobalMemory()
    gmem.add(BASE, GLOBAL_BYTES, "buf")
    lds = LocalMemory(LDS_BYTES, B)
    lds.data[:] = rng.integers(0, 256, lds.data.size, dtype=np.uint8)
    zero = np.int64(0)
    return types.SimpleNamespace(L=32 * B, lds=lds, gmem=gmem, lds_oob_ok=False, cdim=(1, 1, 1),
                                 cwg=(zero, zero, zero))


def _move(B, g0, g1, to_lds, seed, oob_ok, one_by_one):
    """(LDS bytes, global bytes) after the copy from the same random start, or the text of
    the memory error it raised."""
    ctx = _ctx(B, seed)
    ctx.lds_oob_ok = oob_ok
    z4, z8 = np.zeros((32 * B, 4), np.int32), np.zeros((32 * B, 8), np.int32)
    copy = tdm_copy(ctx, g0, g1, z4, z8, to_lds)
    try:
        if one_by_one:
            for g in np.flatnonzero(copy.descs.pred).tolist():
                (copy._load if to_lds else copy._store)(g, copy.descs.row(g))
        else:
            copy.move()
    except EmuMemoryError as e:
        return str(e)
    return ctx.lds.data.copy(), _GLOBAL.copy()


@_SETTINGS
@given(batch=tdm_batches(), to_lds=st.booleans(), seed=st.integers(0, 2**32 - 1), oob_ok=st.booleans())
def test_batched_tdm_move_equals_per_workgroup_moves(batch, to_lds, seed, oob_ok):
    B, g0, g1 = batch
    want = _move(B, g0, g1, to_lds, seed, oob_ok, one_by_one=True)
    got = _move(B, g0, g1, to_lds, seed, oob_ok, one_by_one=False)
    if isinstance(want, str):
        assert got == want
    else:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@_SETTINGS
@given(batch=tdm_batches())
def test_batch_decodes_per_workgroup_as_decode(batch):
    B, g0, g1 = batch
    ctx = types.SimpleNamespace(L=32 * B)
    descs = decode_batch(ctx, g0, g1, np.zeros(4, np.int32), np.zeros(8, np.int32))
    rows = [decode(g0[32 * g], g1[32 * g]) for g in range(B)]
    assert [descs.row(g) for g in range(B)] == rows
    fps = descs.footprints()
    for fp, d in zip(fps, rows):
        np.testing.assert_array_equal(fp, d.lds_bytes())


def test_batched_tdm_out_of_lds_tile_raises_the_per_workgroup_error():
    # workgroup 1's tile ends past the LDS: the batch falls back and raises its error
    rows = [_words(pred=True, lds=lds, gaddr=BASE, esize_log2=2, tdim0=8, tdim1=4, tile0=8, tile1=4,
                   stride=8, pad=None) for lds in (0, LDS_BYTES - 64)]
    g0 = np.repeat(np.stack([r[0] for r in rows]), 32, axis=0)
    g1 = np.repeat(np.stack([r[1] for r in rows]), 32, axis=0)
    ctx = _ctx(2, 0)
    copy = tdm_copy(ctx, g0, g1, np.zeros(4, np.int32), np.zeros(8, np.int32), True)
    with pytest.raises(EmuMemoryError, match=f"TDM tile at LDS offset {LDS_BYTES - 64} "):
        copy.move()


def test_batched_tdm_multicast_refusal_names_the_mask():
    g0, g1 = _words(pred=True, lds=0, gaddr=BASE, esize_log2=0, tdim0=4, tdim1=1, tile0=4, tile1=1,
                    stride=4, pad=None)
    g1 = g1.copy()
    g1[0] |= 0b110  # workgroups 1 and 2 of the cluster besides this one (0)
    with pytest.raises(NotImplementedError, match=r"mask 0x0006 names cluster workgroup\(s\) \[1, 2\]"):
        tdm_copy(_ctx(1, 0), g0, g1, np.zeros(4, np.int32), np.zeros(8, np.int32), True)


def test_shared_footprint_is_one_array_for_equal_tiles():
    # the happens-before engine looks a footprint up once per distinct array object
    g0, g1 = _words(pred=True, lds=64, gaddr=BASE, esize_log2=1, tdim0=4, tdim1=2, tile0=4, tile1=2,
                    stride=4, pad=None)
    fps = decode_batch(types.SimpleNamespace(L=96), g0, g1, np.zeros(4), np.zeros(8)).footprints()
    assert fps[0] is fps[1] is fps[2]
    np.testing.assert_array_equal(fps[0], decode(g0, g1).lds_bytes())


def test_wmma_reuses_an_operand_only_while_its_bytes_are_unchanged():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 16)).astype(np.float16)
    b = rng.standard_normal((32, 16)).astype(np.float16)
    c = np.zeros((32, 8), np.float32)
    first = W.wmma(a, b, c, np.float16, np.float16, 32)
    np.testing.assert_array_equal(W.wmma(a, b, c, np.float16, np.float16, 32), first)
    a[0, 0] = -a[0, 0]  # the same array object, mutated in place
    want = W._accumulate(_fancy_matrix(a, np.float16, 32), _fancy_matrix(b, np.float16, 32), c)
    np.testing.assert_array_equal(W.wmma(a, b, c, np.float16, np.float16, 32), want)
    a[0, 0] = np.float16(0.0)
    W.wmma(a, b, c, np.float16, np.float16, 32)
    a[0, 0] = np.float16(-0.0)  # equal as floats, not as bytes
    mats, _per_wave = W._operand(a, np.float16, 32)  # (distinct matrices, index per wave)
    np.testing.assert_array_equal(np.signbit(mats), np.signbit(_fancy_matrix(a, np.float16, 32)))
