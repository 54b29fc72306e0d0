"""Set some keys of a mapping for the length of a block, then put back exactly what was there
(absent keys removed again): `os.environ` around a compile-only capture, `sys.modules` around
a mutant's test run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import Any


@contextlib.contextmanager
def scoped_items(mapping: MutableMapping, values: dict[Any, Any]) -> Iterator[None]:
    missing = object()
    saved = {k: mapping.get(k, missing) for k in values}
    try:
        mapping.update(values)
        yield
    finally:
        for k, old in saved.items():
            if old is missing:
                mapping.pop(k, None)
            else:
                mapping[k] = old
