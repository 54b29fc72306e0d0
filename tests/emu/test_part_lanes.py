"""A lockstep context cuts a wave's lanes out of its lane array (lane (g*W + k)*32 + l) with a
strided copy of one column of the (B, W, 32) grid (`wave.lanes_of`): the same values as the
fancy index of those lanes, scalar or vector per lane, and never a view of the input."""

from __future__ import annotations

import numpy as np
import pytest

from ldssan.runtime.emu.wave import WAVE, PartLanes, lanes_of


@pytest.mark.parametrize("B,W", [(2, 2), (3, 8), (64, 4)])
@pytest.mark.parametrize("tail", [(), (4,), (2, 3)])
def test_lanes_of_a_part_equal_the_fancy_index(B, W, tail):
    values = np.arange(B * W * WAVE * int(np.prod(tail)), dtype=np.int64).reshape((B * W * WAVE,) + tail)
    for k in range(W):
        want = values[((np.arange(B)[:, None] * W + k) * WAVE + np.arange(WAVE)).reshape(-1)]
        got = lanes_of(values, PartLanes(B, W, k))
        np.testing.assert_array_equal(got, want)
        assert not np.shares_memory(got, values)


def test_a_slice_part_is_the_slice():
    values = np.arange(4 * WAVE)
    np.testing.assert_array_equal(lanes_of(values, slice(WAVE, 2 * WAVE)), values[WAVE:2 * WAVE])
