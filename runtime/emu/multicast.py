"""TDM multicast inside a cluster launch: which workgroups' LDS a TDM load writes.

A TDM load's workgroup mask (D# group 1 bits 15:0; bit i = the cluster's workgroup of flat
id i, x fastest) names the workgroups whose LDS receive the tile (docs/memory-model.md,
"TDM multicast in a cluster"). Mask 0 loads into the issuing workgroup only. The copy moves
the same tile into every named workgroup's LDS when the issuing wave's copy completes
(`rt.copies.TdmCopy`); its completion is the issuing wave's TENSORcnt.

Refused by name (public text does not say what the hardware does): a mask naming a
workgroup outside the cluster, and a nonzero mask that leaves out the issuing workgroup.

The launcher calls `bind` once per cluster of a resident run, before the waves start: the
cluster's `ClusterLds` is `ctx.mcast` of each of its waves (absent outside cluster launches).
"""

from __future__ import annotations

import numpy as np


class ClusterLds:
    """The workgroups of one cluster: LDS and waves by flat id within the cluster; the
    sanitizer attaches its cross-workgroup checker as `checker` (None in plain runs)."""

    __slots__ = ("lds", "waves", "size", "checker")

    def __init__(self, lds: dict, waves: dict, size: int):
        self.lds = lds
        self.waves = waves
        self.size = size
        self.checker = None


def flat_id(ctx) -> int:
    """The flat id of the (one) workgroup of `ctx` within its cluster, x fastest."""
    cx, cy, _cz = (int(c) for c in ctx.cdim)
    wx, wy, wz = (int(np.asarray(c).reshape(-1)[0]) for c in ctx.cwg)
    return wx + cx * (wy + cy * wz)


def bind(teams, size: int) -> ClusterLds:
    """Link the teams (waves, [group], lds) of one cluster: every wave gets `ctx.mcast`."""
    lds, waves = {}, {}
    for team_waves, _groups, mem in teams:
        i = flat_id(team_waves[0])
        lds[i] = mem
        waves[i] = team_waves
    link = ClusterLds(lds, waves, size)
    for team_waves in waves.values():
        for w in team_waves:
            w.mcast = link
    return link


def peers(ctx, masks: np.ndarray) -> list[int]:
    """The flat ids of the workgroups other than the issuer's that a TDM load with workgroup
    masks `masks` (one per workgroup of the wave's batch) writes; a mask public text does
    not define is a NotImplementedError naming it (the emitter adds the op and its line)."""
    masks = np.asarray(masks).reshape(-1)
    if not masks.any():
        return []
    link = getattr(ctx, "mcast", None)
    size = 1 if link is None else link.size
    own = 1 if link is None else 1 << flat_id(ctx)
    if link is None and len(masks) > 1:  # a batch: each workgroup its own cluster of one
        own = 1
    mask = int(masks[np.flatnonzero(masks)[0]])
    outside = [i for i in range(16) if mask >> i & 1 and i >= size]
    if outside or (link is not None and len(masks) > 1):
        named = [i for i in range(16) if mask >> i & 1 and 1 << i != own]
        raise NotImplementedError(
            f"TDM multicast: the load's workgroup mask 0x{mask:04x} names cluster workgroup(s) {named} "
            f"besides this one (bit {own.bit_length() - 1}), but its cluster holds {size} workgroup(s): "
            "a mask bit outside the cluster is not modeled (launch with cluster=... covering the "
            "mask): unsupported, please report")
    if not mask & own:
        raise NotImplementedError(
            f"TDM multicast: the load's workgroup mask 0x{mask:04x} leaves out the issuing workgroup "
            f"(bit {own.bit_length() - 1}); whether its own LDS then receives the tile is not "
            "documented publicly, so this is not modeled (include the issuer's bit, as FlyDSL's "
            "compute_mcast_masks does): unsupported, please report")
    return [i for i in range(size) if mask >> i & 1 and 1 << i != own]
