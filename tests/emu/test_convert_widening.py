"""bf16 -> f32 widening (`rt.convert.fconv`) by bit shift equals ml_dtypes' cast for every
bf16 bit pattern (NaN payloads and signed zeros included), per lane and uniform."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ldssan.runtime.emu.rt.convert import fconv


def test_every_bf16_pattern_widens_to_the_ml_dtypes_f32():
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    got = fconv(x.reshape(-1, 8), np.dtype(np.float32))
    assert got.dtype == np.float32 and got.shape == (1 << 13, 8)
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint32), x.astype(np.float32).view(np.uint32))


def test_uniform_and_strided_bf16_widen_alike():
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).reshape(256, 256)
    strided = x[:, ::3]
    np.testing.assert_array_equal(fconv(strided, np.dtype(np.float32)).view(np.uint32),
                                  strided.astype(np.float32).view(np.uint32))
    one = np.asarray(x[3, 7])
    got = np.asarray(fconv(one, np.dtype(np.float32)))
    assert got.shape == () and got.dtype == np.float32 and got == x[3, 7].astype(np.float32)
