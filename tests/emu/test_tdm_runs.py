"""TDM loads of whole in-bounds tiles move LDS runs (a row, or the bytes between pads) with
one index each (`TdmCopy._load_runs`) and leave LDS exactly as the per-workgroup,
element-by-element move does; the run form of a tile layout follows its padding."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ldssan.runtime.emu.rt.copies import TdmCopy, tdm_copy
from ldssan.runtime.emu.tdm import _layout

from .test_batched_hot_ops import BASE, GLOBAL_BYTES, LDS_BYTES, _ctx, _words


@st.composite
def whole_tiles(draw):
    """B workgroups' descriptors of one tile shape, every tile inside its tensor and its LDS."""
    B = draw(st.integers(1, 4))
    esize_log2 = draw(st.integers(0, 3))
    eb = 1 << esize_log2
    tile0, tile1 = draw(st.integers(1, 8)), draw(st.integers(1, 6))
    stride = tile0 + draw(st.integers(0, 4))
    pad = draw(st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 1))))
    rows = []
    for _ in range(B):
        span = ((tile1 - 1) * stride + tile0) * eb
        rows.append(_words(pred=True, lds=draw(st.integers(0, 16)) * 4, gaddr=BASE + draw(st.integers(0, (GLOBAL_BYTES - span) // eb)) * eb,
                           esize_log2=esize_log2, tdim0=tile0 + draw(st.integers(0, 2)),
                           tdim1=tile1 + draw(st.integers(0, 2)), tile0=tile0, tile1=tile1, stride=stride, pad=pad))
    g0 = np.repeat(np.stack([r[0] for r in rows]), 32, axis=0)
    g1 = np.repeat(np.stack([r[1] for r in rows]), 32, axis=0)
    return B, g0, g1


def _lds_after(B, g0, g1, seed, one_by_one):
    ctx = _ctx(B, seed)
    z4, z8 = np.zeros((32 * B, 4), np.int32), np.zeros((32 * B, 8), np.int32)
    copy = tdm_copy(ctx, g0, g1, z4, z8, True)
    if one_by_one:
        for g in range(B):
            copy._load(g, copy.descs.row(g))
    elif copy.descs.row(0).tile_layout().run:
        assert copy._load_runs(np.arange(B)), "whole in-bounds tiles of equal runs take the run path"
    else:  # rows that pads cut unevenly: left to the element path, nothing written
        before = ctx.lds.data.copy()
        assert not copy._load_runs(np.arange(B))
        np.testing.assert_array_equal(ctx.lds.data, before)
        copy.move()
    return ctx.lds.data.copy()


@settings(max_examples=60, deadline=None)
@given(batch=whole_tiles(), seed=st.integers(0, 2**32 - 1))
def test_run_loads_equal_per_workgroup_loads(batch, seed):
    B, g0, g1 = batch
    assert LDS_BYTES >= 64 + 6 * 8 * 8 * 2  # every drawn tile fits its LDS
    np.testing.assert_array_equal(_lds_after(B, g0, g1, seed, False), _lds_after(B, g0, g1, seed, True))


def test_runs_are_rows_without_padding_and_pad_intervals_with_it():
    t = _layout(8, 3, 10, 2, 0, 0)  # 8 x 2-byte elements per row, dense in LDS
    assert t.run == 16 and t.run_starts.tolist() == [0, 16, 32]
    t = _layout(8, 2, 8, 2, 8, 4)  # a 4-byte pad after every 8 bytes
    assert t.run == 8 and t.run_starts.tolist() == [0, 12, 24, 36]
    t = _layout(3, 2, 3, 2, 4, 4)  # rows of 6 bytes against 4-byte intervals: unequal runs
    assert t.run == 0


def test_a_partly_out_of_bounds_tile_is_left_to_the_element_path():
    ctx = _ctx(1, 0)
    g0, g1 = _words(pred=True, lds=0, gaddr=BASE, esize_log2=0, tdim0=3, tdim1=4, tile0=4, tile1=4,
                    stride=4, pad=None)
    z4, z8 = np.zeros((32, 4), np.int32), np.zeros((32, 8), np.int32)
    copy = tdm_copy(ctx, np.repeat(g0[None], 32, 0), np.repeat(g1[None], 32, 0), z4, z8, True)
    before = ctx.lds.data.copy()
    assert isinstance(copy, TdmCopy) and not copy._load_runs(np.arange(1))
    np.testing.assert_array_equal(ctx.lds.data, before)


@settings(max_examples=60, deadline=None)
@given(B=st.integers(2, 5), shrink=st.lists(st.integers(0, 2), min_size=10, max_size=10),
       preds=st.lists(st.booleans(), min_size=5, max_size=5), same_lds=st.booleans())
def test_stored_footprints_equal_each_workgroups_stored_bytes(B, shrink, preds, same_lds):
    """A batch's store footprints (shared when every tile is whole and at one LDS address)
    are what each workgroup's descriptor alone says, tile partly outside its tensor or not."""
    from ldssan.runtime.emu.tdm import decode_words

    rows = []
    for g in range(B):
        g0, g1 = _words(pred=preds[g], lds=0 if same_lds else 16 * g, gaddr=BASE, esize_log2=1,
                        tdim0=6 - shrink[2 * g], tdim1=4 - shrink[2 * g + 1], tile0=6, tile1=4, stride=8, pad=(0, 0))
        rows.append(np.concatenate([g0, g1]).view(np.uint32).astype(np.int64))
    words = np.stack(rows)
    got = decode_words(words).stored_footprints()
    want = [decode_words(words[g:g + 1]).row(0).stored_bytes() for g in range(B)]
    assert len(got) == B
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
