"""Tensor data mover (TDM) descriptors: decoding and footprints (the copy itself is
`rt.copies.TdmCopy`; the happens-before hooks use the footprints).

2-D descriptor layout (FlyDSL 0.5.0's encoder, `expr/rocdl/tdm_ops.py`):

| group/word | bits    | field                                                     |
|------------|---------|-----------------------------------------------------------|
| g0[0]      | 0       | pred (0: the op moves nothing, but still counts)          |
| g0[1]      | 31:0    | LDS byte address                                          |
| g0[2..3]   | 29:0 hi | global byte address (48 bits); g0[3] 31:30 = type (2)     |
| g1[0]      | 15:0    | workgroup multicast mask                                  |
|            | 17:16   | data size, log2(bytes per element)                        |
|            | 20      | pad enable                                                |
|            | 24:22   | pad interval, log2(dwords) - 1                            |
|            | 31:25   | pad amount, dwords - 1                                    |
| g1[1..2]   |         | tensor dim0 (innermost extent): g1[1] 31:16 lo, g1[2] 15:0 hi |
| g1[2..3]   |         | tensor dim1: g1[2] 31:16 lo, g1[3] 15:0 hi                |
| g1[3]      | 31:16   | tile dim0                                                 |
| g1[4]      | 15:0    | tile dim1                                                 |
| g1[5..6]   | 47:0    | dim1 stride, in elements (g1[6] 15:0 holds bits 47:32)    |

A load reads the tile box from global memory; elements outside the tensor dims are
zero-filled; in LDS the tile is dense row-major, with `pad amount` bytes skipped after
every `pad interval` bytes (padding bytes are not written). A store moves the dense tile
from LDS to global memory, dropping out-of-bounds elements.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True)
class Tdm2D:
    pred: bool
    lds_addr: int
    global_addr: int
    elem_bytes: int
    pad_interval: int  # bytes, 0 = no padding
    pad_amount: int  # bytes
    tensor_dim0: int
    tensor_dim1: int
    tile_dim0: int
    tile_dim1: int
    stride1: int  # elements between rows
    mcast_mask: int

    def element_grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(global element offsets, LDS byte offsets, in-bounds mask) of the tile, row-major."""
        return _grid(self.tile_dim0, self.tile_dim1, self.stride1, self.tensor_dim0, self.tensor_dim1,
                     self.elem_bytes, self.pad_interval, self.pad_amount, self.lds_addr)

    def lds_bytes(self) -> np.ndarray:
        """Every LDS byte offset the tile covers (padding excluded)."""
        if not self.pred:
            return np.zeros(0, np.int64)
        return _footprint(self.tile_dim0, self.tile_dim1, self.elem_bytes, self.pad_interval,
                          self.pad_amount, self.lds_addr)


# Kernels issue the same few descriptors over and over (per stage and slot): cache the
# index arithmetic. Results are read-only.
@functools.lru_cache(maxsize=4096)
def _grid(tile0, tile1, stride1, tdim0, tdim1, eb, pad_interval, pad_amount, lds_addr):
    r = np.arange(tile1, dtype=np.int64)[:, None]
    c = np.arange(tile0, dtype=np.int64)[None, :]
    g = (r * stride1 + c).reshape(-1)
    inb = ((r < tdim1) & (c < tdim0)).reshape(-1)
    lin = (r * tile0 + c).reshape(-1) * eb
    if pad_interval:
        lin = lin + (lin // pad_interval) * pad_amount
    out = (g, lds_addr + lin, inb)
    for a in out:
        a.flags.writeable = False
    return out


@functools.lru_cache(maxsize=4096)
def _footprint(tile0, tile1, eb, pad_interval, pad_amount, lds_addr):
    _g, lds, _inb = _grid(tile0, tile1, 0, tile0, tile1, eb, pad_interval, pad_amount, lds_addr)
    out = (lds[:, None] + np.arange(eb, dtype=np.int64)).reshape(-1)
    out.flags.writeable = False
    return out


def _words(x) -> list[int]:
    return np.asarray(x).reshape(-1).astype(np.int64).__and__(0xFFFFFFFF).tolist()


def decode(g0, g1, g2=None, g3=None) -> Tdm2D:
    """Decode one workgroup's descriptor groups (uniform (4,) / (8,) arrays)."""
    g0 = _words(g0)
    g1 = _words(g1)
    for extra in (g2, g3):
        if extra is not None and np.asarray(extra).any():
            raise NotImplementedError("ldssan-emu: TDM descriptors beyond 2-D (non-zero group 2/3) are not emulated")
    cfg = g1[0]
    if cfg >> 19 & 1:
        raise NotImplementedError("ldssan-emu: TDM iterate mode is not emulated")
    pad_en = cfg >> 20 & 1
    interval = (4 << ((cfg >> 22) & 7)) * 2 if pad_en else 0  # 2^(enc+1) dwords
    amount = 4 * (((cfg >> 25) & 0x7F) + 1) if pad_en else 0
    return Tdm2D(
        pred=bool(g0[0] & 1),
        lds_addr=g0[1],
        global_addr=g0[2] | ((g0[3] & 0x3FFFFFFF) << 32),
        elem_bytes=1 << ((cfg >> 16) & 3),
        pad_interval=interval,
        pad_amount=amount,
        tensor_dim0=(g1[1] >> 16) | ((g1[2] & 0xFFFF) << 16),
        tensor_dim1=(g1[2] >> 16) | ((g1[3] & 0xFFFF) << 16),
        tile_dim0=g1[3] >> 16,
        tile_dim1=g1[4] & 0xFFFF,
        stride1=g1[5] | ((g1[6] & 0xFFFF) << 32),
        mcast_mask=cfg & 0xFFFF,
    )


def per_group(ctx, value) -> list:
    """A descriptor group as one (n,) array per workgroup of the batch."""
    a = np.asarray(value)
    B = ctx.L // 32
    if a.ndim == 2:  # per-lane under batching: one descriptor per workgroup (its lane 0)
        return [a[g * 32] for g in range(B)]
    return [a] * B


def decode_batch(ctx, g0, g1, g2, g3) -> list[Tdm2D]:
    parts = [per_group(ctx, g) for g in (g0, g1, g2, g3)]
    return [decode(*grp) for grp in zip(*parts)]


def lds_footprint(ctx, g0, g1, g2, g3) -> list[np.ndarray]:
    """LDS byte offsets per workgroup of the batch (for the happens-before engine)."""
    return [d.lds_bytes() for d in decode_batch(ctx, g0, g1, g2, g3)]
