"""Global memory gathers and scatters whole lanes (one index per lane over a view of
overlapping `nbytes`-byte elements) and touches exactly the bytes a per-byte gather/scatter
does: any region alignment, any access width, aligned and unaligned offsets, lanes that
overlap or repeat (stores land in lane order, the last lane's bytes win)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ldssan.runtime.emu import memory as M
from ldssan.runtime.emu.memory import GlobalMemory

_SIZE = 512


def _region(buf: np.ndarray, start: int) -> tuple[GlobalMemory, int]:
    g = GlobalMemory()
    base = buf[start:].ctypes.data
    g.add(base, _SIZE - start - 7)  # an odd size: the last elements end short of a word
    return g, base


@st.composite
def _access(draw):
    start = draw(st.integers(0, 15))
    nb = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32]))
    align = draw(st.sampled_from([1, 2, 4, 8, 16]))
    limit = _SIZE - start - 7 - nb
    offs = draw(st.lists(st.integers(0, limit // align), min_size=1, max_size=40))
    return start, nb, align, [o * align for o in offs]


@settings(max_examples=200, deadline=None)
@given(_access(), st.integers(0, 2**32 - 1))
def test_lane_gathers_and_scatters_equal_the_per_byte_ones(access, seed):
    start, nb, align, offs = access
    rng = np.random.default_rng(seed)
    buf = rng.integers(0, 256, _SIZE, dtype=np.uint8)
    want = buf.copy()
    g, base = _region(buf, start)
    off = np.asarray(offs, dtype=np.int64)
    addr = base + off

    got = g.read(addr, np.dtype(np.uint8), nb)
    np.testing.assert_array_equal(got, want[start + off[:, None] + np.arange(nb)])

    data = rng.integers(0, 256, (len(off), nb), dtype=np.uint8)
    g.track()
    g.write(addr, data)
    written = np.zeros(_SIZE - start - 7, dtype=bool)
    for lane in range(len(off)):  # sequential: overlapping and repeated lanes, last one wins
        want[start + off[lane]: start + off[lane] + nb] = data[lane]
        written[off[lane]: off[lane] + nb] = True
    np.testing.assert_array_equal(buf, want)
    np.testing.assert_array_equal(g.written[base], written)  # the memo's written-byte mask
    g.release_masks()


def test_a_reused_written_mask_starts_cleared():
    """Masks go back to a pool after a tracked call; the next call's mask holds only its
    own stores, not the previous call's."""
    buf = np.zeros(_SIZE, dtype=np.uint8)
    g, base = _region(buf, 0)
    g.track()
    g.write(base + np.arange(0, 64, 4, dtype=np.int64), np.ones((16, 4), np.uint8))
    first = g.written[base]
    g.release_masks()
    assert g.written == {}
    g.track()
    g.write(base + np.array([100], dtype=np.int64), np.ones((1, 2), np.uint8))
    again = g.written[base]
    assert again is first  # reused: the memory is already the process's
    want = np.zeros(_SIZE - 7, dtype=bool)
    want[100:102] = True
    np.testing.assert_array_equal(again, want)
    g.release_masks()


def test_typed_reads_view_the_lane_bytes_as_elements():
    buf = np.arange(256, dtype=np.uint8)
    g, base = _region(buf, 3)
    addr = base + np.array([0, 8, 5, 100], dtype=np.int64)
    got = g.read(addr, np.dtype(np.uint16), 3)
    want = np.stack([buf[3 + a - base: 3 + a - base + 6].view(np.uint16) for a in addr])
    assert got.shape == (4, 3) and got.dtype == np.uint16
    np.testing.assert_array_equal(got, want)


def test_one_index_per_lane_at_the_widest_common_alignment():
    buf = np.zeros(_SIZE, dtype=np.uint8)
    g, base = _region(buf, 0)
    r = g.find(base)
    aligned = np.array([0, 16, 48], dtype=np.int64) + (-base % 8)
    view, idx = M._lane_spans(r, aligned, 16)
    assert idx.shape == (3,) and view.dtype.itemsize == 16 and view.strides == (8,)
    view, idx = M._lane_spans(r, aligned + 2, 16)
    assert idx.shape == (3,) and view.strides == (2,)
