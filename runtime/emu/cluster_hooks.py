"""The hook adapter of a wave in a cluster launch: its workgroup's engine, as
`hooks.ShadowHooks`, plus the cluster's cross-workgroup checker (`shadow.peers`), which
sees the TDM multicast copies, TENSORcnt waits, barriers -1/-3 and LDS accesses it needs.

`attach` (the session, when it binds a batch) builds one checker per cluster on the
cluster's `multicast.ClusterLds` and returns its `finish`, to run after the cluster's run.
"""

from __future__ import annotations

import numpy as np

from ..shadow import AccessKind, CopyKind, Counter
from ..shadow.peers import ClusterChecker
from .hooks import _ARRIVALS, ShadowHooks
from .multicast import flat_id, peers
from .tdm import decode_batch, lds_footprint


def attach(waves, grid, ring, launch: int):
    """The checker's finish when `waves` (one workgroup's) start the checker of their
    cluster, else None (not a multi-workgroup cluster launch, or already attached)."""
    link = getattr(waves[0], "mcast", None)
    if link is None or link.size < 2 or link.checker is not None:
        return None
    gx, gy, _gz = grid
    gids = {}
    for i, ws in link.waves.items():
        x, y, z = (int(np.asarray(b).reshape(-1)[0]) for b in ws[0].bid)
        gids[i] = x + gx * (y + gy * z)
    link.checker = ClusterChecker(gids, ring, launch)
    return link.checker.finish


class ClusterHooks(ShadowHooks):
    """`ShadowHooks` that also tell the cluster's checker (module docstring)."""

    __slots__ = ("checker", "me", "link")

    def __init__(self, engine, ctx):
        super().__init__(engine, ctx)
        self.link = ctx.mcast
        self.checker = ctx.mcast.checker
        self.me = flat_id(ctx)

    def ds(self, site, ptr, nbytes, kind, mask):
        super().ds(site, ptr, nbytes, kind, mask)
        self._lanes(site, ptr, nbytes, mask, write=int(kind) != AccessKind.READ)

    def dma(self, site, ptr, nbytes, kind, mask):
        super().dma(site, ptr, nbytes, kind, mask)
        if int(kind) == CopyKind.FROM_LDS:  # a copy into LDS vs a peer's copy: not checked (peers.py)
            self._lanes(site, ptr, nbytes, mask)

    def _lanes(self, site, ptr, nbytes, mask, write: bool = False) -> None:
        """A per-lane access of `nbytes` at each active lane's LDS address, to the checker."""
        lanes = np.flatnonzero(np.broadcast_to(np.asarray(mask, bool), (32,)))
        if lanes.size:
            addr = np.broadcast_to(np.asarray(ptr, np.int64), (32,))[lanes]
            offsets = (addr[:, None] + np.arange(int(nbytes))).reshape(-1)
            self.checker.access(self.me, self.wave, site, offsets, np.repeat(lanes, int(nbytes)), write=write)

    def tdm(self, site, g0, g1, g2, g3, kind, mask):
        super().tdm(site, g0, g1, g2, g3, kind, mask)
        store = int(kind) == CopyKind.FROM_LDS
        offsets = lds_footprint(self.ctx, g0, g1, g2, g3, store=store)[0]
        if store:
            self.checker.access(self.me, self.wave, site, offsets, None)
            self.checker.tensor_op(self.me, self.wave, site, {})
            return
        descs = decode_batch(self.ctx, g0, g1, g2, g3)
        try:
            targets = peers(self.ctx, descs.mcast_mask)
        except NotImplementedError:
            return  # the TDM op itself, right after this hook, refuses the mask naming its line
        # a multicast load's identity (merged requests, shadow/peers.py): its descriptor, and
        # its early-timeout bit (group 1 word 0 bit 21: rendezvous or re-broadcast)
        tile = descs.row(0) if targets else None
        early = bool(int(np.asarray(g1).reshape(-1)[0]) >> 21 & 1)
        self.checker.tensor_op(self.me, self.wave, site, {p: offsets for p in targets}, own=offsets, tile=tile, early=early)
        for p in targets:  # the peer's own engine: these bytes are written (no LDS030 on them)
            self.link.waves[p][0].san.engine.peer_written(offsets)

    def wait(self, site, counter, n, mask):
        super().wait(site, counter, n, mask)
        if counter == Counter.TENSOR:
            self.checker.tensor_wait(self.me, self.wave, n & 0xFFFF)

    def barrier(self, site, form, bid, mask):
        super().barrier(site, form, bid, mask)
        if form in _ARRIVALS:
            self.checker.signal(self.me, self.wave, int(bid))
        else:
            self.checker.wait(self.me, self.wave, int(bid))

