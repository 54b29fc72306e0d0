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


def test_wave_geometry_is_built_once_per_shape_and_read_only():
    from ldssan.runtime.emu.memory import LocalMemory
    from ldssan.runtime.emu.wave import WaveCtx

    class Budget:
        left, check_at = 10**9, 0

    def ctx(groups, wave=1):
        return WaveCtx(wave=wave, n_waves=4, groups=groups, block=(96, 1, 1), grid=(8, 1, 1), lds=LocalMemory(64, len(groups)),
                       gmem=None, lds_offsets={}, batched=True, budget=Budget())

    a, b = ctx([(0, 0, 0), (1, 0, 0)]), ctx([(6, 0, 0), (7, 0, 0)])
    assert a.mask is b.mask and a.tid[0] is b.tid[0]  # shared across batches of one shape
    assert b.bid[0].tolist() == [6] * WAVE + [7] * WAVE  # the workgroup ids stay per batch
    assert not a.mask.flags.writeable and not a.tid[0].flags.writeable
    # wave 3 of a 96-thread block has no thread: its lanes are inactive
    c = ctx([(0, 0, 0)], wave=3)
    assert not c.mask.any() and not c.mask_full and c.tid[0][0] == 0
