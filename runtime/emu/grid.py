"""The workgroups of a launch's grid, drawn lazily (a grid may hold 2**31 - 1 of them), and
the cluster ids each wave sees (see plan.py's docstring)."""

from __future__ import annotations

import itertools

import numpy as np


def workgroups(extent):
    """The (x, y, z) ids of a grid (or of a cluster's members), x fastest, one at a time."""
    for z in range(extent[2]):
        for y in range(extent[1]):
            for x in range(extent[0]):
                yield (x, y, z)


def cluster_groups(grid: tuple[int, int, int], dims: tuple[int, int, int]):
    """The workgroups of each cluster of the grid, clusters and members in x-fastest order
    (one cluster at a time: a grid may hold 2**31 of them)."""
    n_clusters = tuple(g // c for g, c in zip(grid, dims))
    members = list(workgroups(dims))
    for cl in workgroups(n_clusters):
        yield [tuple(k * c + m for k, c, m in zip(cl, dims, member)) for member in members]


def chunks(items, n: int):
    """Lists of `n` consecutive items (the last may be shorter), drawn lazily."""
    items = iter(items)
    while True:
        part = list(itertools.islice(items, n))
        if not part:
            return
        yield part


def threads_of(block, groups) -> int:
    """Threads of `groups` workgroups of `block` threads."""
    return block[0] * block[1] * block[2] * len(groups)


def place_in_cluster(w, dims: tuple[int, int, int] | None, cluster: int | None) -> None:
    """Cluster ids of the workgroup(s) of `w`, a WaveCtx or LockstepCtx (plan.py's
    docstring); batched waves (never a cluster launch) keep `cwg` scalar: 0 for every
    workgroup."""
    w.cluster = cluster
    c = dims or (1, 1, 1)
    w.cdim = tuple(np.int64(x) for x in c)
    if dims is None:  # clusters of one: the cluster id is the workgroup id (no division per lane)
        w.cid = tuple(w.bid)
        w.cwg = tuple(np.int64(0) for _ in c)
        return
    w.cid = tuple(b // x for b, x in zip(w.bid, c))
    w.cwg = tuple(b % x for b, x in zip(w.bid, c))
