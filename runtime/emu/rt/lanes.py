"""Value shapes and exec masks: broadcasting uniform values, per-lane select, and the merges
that divergent `scf.if` and loops need; aggregates (LLVM structs/arrays) as tuples."""

from __future__ import annotations

import numpy as np


def lanes(x, L: int):
    """Broadcast a uniform value to per-lane shape: scalar -> (L,), vector (n,) -> (L, n)."""
    if isinstance(x, tuple):
        return tuple(lanes(e, L) for e in x)
    a = np.asarray(x)
    if a.ndim == 0:
        return np.full(L, a, dtype=a.dtype)
    return np.broadcast_to(a, (L,) + a.shape).copy()


def _cond(c, x):
    c = np.asarray(c)
    while c.ndim < x.ndim:
        c = c[..., None]
    return c


def select(c, a, b):
    """Per-lane select that broadcasts a per-lane condition over vector lanes."""
    if isinstance(a, tuple):
        return tuple(select(c, x, y) for x, y in zip(a, b))
    a = np.asarray(a)
    return np.where(_cond(c, a), a, b).astype(a.dtype, copy=False)


def narrow(m, outer):
    """A branch or loop mask under `outer`: `outer` itself while no lane has left it (the
    sanitizer's hooks take their whole-wave paths on that identity; lockstep code only).
    `m` is `outer & something`, so equal counts of active lanes mean equal masks."""
    return outer if np.count_nonzero(m) == np.count_nonzero(outer) else m


def merge(c, then, other):
    """Result of a divergent scf.if: `then` where c, else `other` (None = side not run)."""
    if then is None:
        return other
    if other is None:
        return then
    return select(c, then, other)


def fold(x, ufunc, acc=None):
    """An ordered reduction of the vector axis: `((acc . x0) . x1) . ...` with every step
    rounded in the element type -- LLVM's `vector.reduce.fadd/fmul` without `reassoc`, which
    `vector.reduction` lowers to. (numpy's `sum` adds pairwise: other roundings for 8 or more
    elements, and slower on a short last axis.)"""
    x = np.asarray(x)
    r = x[..., 0] if acc is None else ufunc(acc, x[..., 0])
    for j in range(1, x.shape[-1]):
        r = ufunc(r, x[..., j])
    return r


def keep(active, new, old):
    """Loop-carried value under a loop mask: lanes still looping take `new`."""
    if old is None:
        return new
    return select(active, new, old)


def tuple_set(agg: tuple, path: list[int], value) -> tuple:
    """llvm.insertvalue: a copy of the aggregate `agg` with the member at `path` replaced.

    Aggregates are (nested) tuples, immutable, so other SSA values holding `agg` keep it."""
    if not isinstance(agg, tuple):
        raise TypeError(f"insertvalue into a non-aggregate value of type {type(agg).__name__}")
    i, rest = path[0], path[1:]
    if not 0 <= i < len(agg):
        raise IndexError(f"insertvalue position {i} outside an aggregate of {len(agg)} members")
    member = tuple_set(agg[i], rest, value) if rest else value
    return agg[:i] + (member,) + agg[i + 1:]
