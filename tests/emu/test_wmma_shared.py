"""Virtual gfx1250 WMMA over a lockstep chunk whose waves share fragments (as a GEMM's do):
the batched result equals each wave run alone, bit for bit, and numpy's float64 product."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ldssan.runtime.emu.rt.wmma import CD_M, CD_N, layout_ab, wmma

E4M3 = ml_dtypes.float8_e4m3fn


def _fragments(mat: np.ndarray, K: int) -> np.ndarray:
    """Per-lane A/B fragments (32, K/2) of a 16xK matrix, in the gfx1250 layout."""
    rows, ks = layout_ab(K, mat.dtype.itemsize * 8)
    return mat[rows, ks]


def _chunk(dtype, K: int, n_a: int, n_b: int, waves: int, nan: bool = False, seed: int = 0):
    """A chunk of `waves` waves: wave w multiplies A matrix w % n_a by B matrix w // n_a % n_b
    (fragments as i32 words, value-major like generated code keeps vectors)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n_a, 16, K)).astype(dtype)
    B = rng.standard_normal((n_b, 16, K)).astype(dtype)
    if nan:
        A[0, 3, 5] = np.nan
    C = (rng.standard_normal((waves, 16, 16)) * 4).astype(np.float32)
    ia, ib = np.arange(waves) % n_a, np.arange(waves) // n_a % n_b

    def words(mats, idx):
        lanes = np.concatenate([_fragments(mats[i], K) for i in idx])
        return np.ascontiguousarray(lanes.view(np.int32).T).T  # value-major

    c = np.concatenate([C[w][CD_M, CD_N] for w in range(waves)])
    return words(A, ia), words(B, ib), c, (A, B, C, ia, ib)


def _alone(a, b, c, dtype, K):
    """Each wave's WMMA run by itself (no other wave to share with)."""
    return np.concatenate([wmma(a[w:w + 32], b[w:w + 32], c[w:w + 32], dtype, dtype, K)
                           for w in range(0, len(a), 32)])


@pytest.mark.parametrize("dtype, K", [(E4M3, 128), (E4M3, 64), (ml_dtypes.float8_e5m2, 128),
                                      (np.int8, 64), (ml_dtypes.bfloat16, 32)])
@pytest.mark.parametrize("n_a, n_b", [(4, 8), (8, 2), (1, 1), (32, 1)])
def test_shared_fragments_equal_each_wave_alone(dtype, K, n_a, n_b):
    a, b, c, _ = _chunk(dtype, K, n_a, n_b, 32)
    if dtype is np.int8:
        a, b = a & 0x3F3F3F3F, b & 0x3F3F3F3F  # small integers, C stays exact
    got = wmma(a, b, c, dtype, dtype, K)
    np.testing.assert_array_equal(got.view(np.uint32), _alone(a, b, c, dtype, K).view(np.uint32))


def test_shared_fp8_matches_numpy():
    a, b, c, (A, B, C, ia, ib) = _chunk(E4M3, 128, 4, 8, 32, seed=1)
    d = wmma(a, b, c, E4M3, E4M3, 128)
    for w in range(32):
        want = A[ia[w]].astype(np.float64) @ B[ib[w]].astype(np.float64).T + C[w]
        got = np.zeros((16, 16), np.float32)
        got[CD_M, CD_N] = d[w * 32:(w + 1) * 32]
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_a_nan_in_a_shared_fragment_gives_the_per_wave_result():
    a, b, c, _ = _chunk(E4M3, 128, 4, 8, 32, nan=True, seed=2)
    got = wmma(a, b, c, E4M3, E4M3, 128)
    assert np.isnan(got).any()
    np.testing.assert_array_equal(got.view(np.uint32), _alone(a, b, c, E4M3, 128).view(np.uint32))


def test_a_fragment_changed_in_place_is_decoded_again():
    a, b, c, (A, B, C, ia, ib) = _chunk(E4M3, 128, 4, 8, 32, seed=3)
    first = wmma(a, b, c, E4M3, E4M3, 128)
    a[:32] = 0  # same array object, new bytes: wave 0 now multiplies zeros
    second = wmma(a, b, c, E4M3, E4M3, 128)
    np.testing.assert_array_equal(second[:32], c[:32])
    np.testing.assert_array_equal(second[32:], first[32:])
