"""FlyDSL's BlockRadixSort, BlockMergeSort and BlockTopK (flydsl.extension.coop) on the
virtual gfx1250, sanitized under several scheduler policies: exact against torch's stable
sort, zero violations. Keys have many duplicates, so stability is checked through the
payload (each key's original blocked position)."""

from __future__ import annotations

import pytest
import torch

import flydsl.expr as fx

from .harness import (TORCH_OF, assert_equal, block_launcher, check_clean, read_blocked, sample,
                      to_striped, type_id, write_blocked)

C = fx.coop


def _positions(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int32)


def _stable_order(keys: torch.Tensor, descending: bool) -> torch.Tensor:
    return torch.sort(keys, stable=True, descending=descending).indices


def check_sort(primitive, dtype, block: int, items: int, algorithm, *, descending=False,
               pairs=True, striped=False) -> None:
    """Sort a blocked tile (keys, or keys with their positions as payload); `striped` asks
    for the sorted tile in striped ownership (radix sort only)."""
    key_spec = (dtype, fx.Int32) if pairs else dtype

    def body(tid, Keys, Vals, OutKeys, OutVals):
        sort = primitive[key_spec, block, items, algorithm]
        storage = fx.SharedAllocator().allocate(sort.SharedStorage).peek()
        keys = read_blocked(Keys, tid, items, dtype)
        kwargs = dict(storage=storage, descending=descending)
        if striped:
            kwargs["blocked_to_striped"] = True
        if pairs:
            out_keys, out_vals = sort(keys, read_blocked(Vals, tid, items), **kwargs)
            write_blocked(OutVals, tid, items, out_vals)
        else:
            out_keys = sort(keys, **kwargs)
        write_blocked(OutKeys, tid, items, out_keys)

    n = block * items
    keys = sample(dtype, n, seed=n + items, low=-20, high=20)
    order = _stable_order(keys, descending)
    want_keys, want_vals = keys[order], order.to(torch.int32)
    if striped:  # sorted position t + i*block belongs to thread t, item i
        want_keys, want_vals = to_striped(want_keys, block, items), to_striped(want_vals, block, items)

    def expect(outs, policy):
        assert_equal(outs[0], want_keys, policy)
        if pairs:
            assert_equal(outs[1], want_vals, policy)

    check_clean(block_launcher(block, body), [keys, _positions(n)],
                [torch.zeros_like(keys), torch.zeros(n, dtype=torch.int32)], expect)


def check_topk(dtype, block: int, items: int, algorithm, k: int, largest: bool) -> None:
    def body(tid, Keys, Vals, OutKeys, OutVals):
        topk = C.BlockTopK[(dtype, fx.Int32), block, items, algorithm]
        storage = fx.SharedAllocator().allocate(topk.SharedStorage).peek()
        keys, vals, valid = topk(read_blocked(Keys, tid, items, dtype), k, read_blocked(Vals, tid, items),
                                 storage=storage, largest=largest)
        # Only the first k flattened outputs are specified: write the rest as -1.
        write_blocked(OutKeys, tid, items, [valid[i].select(keys[i], dtype(-1)) for i in range(items)])
        write_blocked(OutVals, tid, items, [valid[i].select(vals[i], fx.Int32(-1)) for i in range(items)])

    n = block * items
    keys = sample(dtype, n, seed=7 * n + k, low=0, high=30)
    chosen = _stable_order(keys, descending=largest)[:k]  # ties go to the earlier position
    if algorithm is C.BlockTopKAlgorithm.AIR:  # AIR keeps the selection in input order
        chosen = chosen.sort().values
    want_keys = torch.full_like(keys, -1)
    want_vals = torch.full((n,), -1, dtype=torch.int32)
    want_keys[:k], want_vals[:k] = keys[chosen], chosen.to(torch.int32)

    def expect(outs, policy):
        assert_equal(outs[0], want_keys, policy)
        assert_equal(outs[1], want_vals, policy)

    check_clean(block_launcher(block, body), [keys, _positions(n)],
                [torch.zeros_like(keys), torch.zeros(n, dtype=torch.int32)], expect)


@pytest.mark.parametrize("algorithm", list(C.BlockRadixSortAlgorithm), ids=lambda a: a.name)
def test_block_radix_sort_pairs(algorithm):
    check_sort(C.BlockRadixSort, fx.Int32, 64, 2, algorithm)


def test_block_radix_sort_float_keys_descending_striped():
    check_sort(C.BlockRadixSort, fx.Float32, 64, 2, C.BlockRadixSortAlgorithm.RADIX_DIGIT,
               descending=True, pairs=False, striped=True)


def test_block_merge_sort_pairs_descending():
    check_sort(C.BlockMergeSort, fx.Int32, 64, 3, C.BlockMergeSortAlgorithm.MERGE, descending=True)


@pytest.mark.parametrize("algorithm, largest", [(C.BlockTopKAlgorithm.MERGE, True),
                                                (C.BlockTopKAlgorithm.AIR, False)],
                         ids=["MERGE-largest", "AIR-smallest"])
def test_block_topk_pairs(algorithm, largest):
    check_topk(fx.Int32, 64, 2, algorithm, k=11, largest=largest)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TORCH_OF), ids=type_id)
@pytest.mark.parametrize("block, items", [(32, 1), (128, 4)])
@pytest.mark.parametrize("algorithm", list(C.BlockRadixSortAlgorithm), ids=lambda a: a.name)
def test_block_radix_sort_sweep(algorithm, block, items, dtype):
    check_sort(C.BlockRadixSort, dtype, block, items, algorithm, descending=block > 32)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", list(TORCH_OF), ids=type_id)
@pytest.mark.parametrize("block, items", [(16, 2), (128, 3)])
def test_block_merge_sort_sweep(block, items, dtype):
    check_sort(C.BlockMergeSort, dtype, block, items, C.BlockMergeSortAlgorithm.MERGE)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [fx.Int32, fx.Float32, fx.Int64], ids=type_id)
@pytest.mark.parametrize("algorithm", list(C.BlockTopKAlgorithm), ids=lambda a: a.name)
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_block_topk_sweep(largest, algorithm, dtype):
    check_topk(dtype, 128, 3, algorithm, k=37, largest=largest)
