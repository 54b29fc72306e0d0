"""scoped_items puts back exactly what a mapping held, also when the block raises."""

import pytest

from ldssan.scoped import scoped_items


def test_set_keys_are_restored_and_new_keys_removed():
    m = {"a": 1, "b": None}
    with scoped_items(m, {"a": 2, "b": 3, "c": 4}):
        assert m == {"a": 2, "b": 3, "c": 4}
    assert m == {"a": 1, "b": None}  # a key that held None keeps it; an absent key goes


def test_restored_when_the_block_raises():
    m = {"a": 1}
    with pytest.raises(RuntimeError), scoped_items(m, {"a": 5, "z": 0}):
        raise RuntimeError
    assert m == {"a": 1}
