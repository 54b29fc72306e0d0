"""Where the device runtime keeps its state: the per-workgroup shadow (in LDS, after the
kernel's own LDS) and the process's record buffer (global memory). DESIGN.md explains the
choices; this module is the one place the word offsets are defined, for the IR generator
(`hooks_ir.py`), the linker and the host read-back.

All shadow fields are 32-bit words. Sizes, with W waves per workgroup, S sites in the
module and B bytes of kernel LDS (G = ceil(B / GRANULE) granules):

    words = W * WAVE_WORDS + PHASE_SLOTS * 2 + W * S + G * (1 + W) * ENTRY_WORDS
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

GRANULE = 4  # bytes per shadow row: one LDS bank word (DESIGN.md, "Granularity")

# Per-wave block (WAVE_WORDS words at wave * WAVE_WORDS).
SEQ, DONE, LASTWAIT, NSIG, NWAIT, LASTSIG = 0, 1, 2, 3, 4, 5
PHASE_SLOTS = 4  # barrier snapshots kept per wave: a wave is never 3 phases ahead of another
SIG_DONE = 6  # PHASE_SLOTS words: DONE at the wave's signal of phase k (slot k % PHASE_SLOTS)
SIG_LASTWAIT = SIG_DONE + PHASE_SLOTS  # LASTWAIT at that signal
WAVE_WORDS = 16
assert SIG_LASTWAIT + PHASE_SLOTS <= WAVE_WORDS

# One access entry (ENTRY_WORDS words). SITE holds site + 1 so that 0 means "empty".
E_SITE, E_SEQ, E_SEG, E_WHO = 0, 1, 2, 3  # WHO = wave | lane << 8 | kind << 16
ENTRY_WORDS = 4

# A record's `workgroup` as the device writes it: block id x | y << 16 | z << 26 (x < 2^16,
# y < 2^10, z < 2^6); the read-back turns it into the linear id with the launch's grid.
WG_Y_SHIFT, WG_Z_SHIFT = 16, 26
WG_LIMITS = (1 << 16, 1 << 10, 1 << 6)


def linear_workgroup(packed: int, grid: tuple[int, int, int] | None) -> int:
    x, y, z = packed & 0xFFFF, (packed >> WG_Y_SHIFT) & 0x3FF, packed >> WG_Z_SHIFT
    if y == 0 and z == 0:
        return x
    if grid is None:
        raise ValueError("ldssan device runtime: a record from a 2-D/3-D grid, and the launch's grid is unknown")
    return x + grid[0] * (y + grid[1] * z)


# Record buffer in global memory: the ring header of `runtime.records.Ring` (capacity,
# written, dropped as u64), the launch id (u32), then 32-byte records.
RING_HEADER = struct.Struct("<QQQII")
CAPACITY_AT, WRITTEN_AT, DROPPED_AT, LAUNCH_AT = 0, 8, 16, 24
RECORDS_AT = RING_HEADER.size
assert RECORDS_AT == 32


@dataclass(frozen=True)
class ShadowLayout:
    """Word offsets of one gpu.module's shadow (the same for all its kernels)."""

    waves: int  # W: waves per workgroup (the largest known block size / 32)
    sites: int  # S: sites in the module's site table
    lds_bytes: int  # B: the kernel LDS the shadow covers (static globals)

    @property
    def granules(self) -> int:
        return -(-self.lds_bytes // GRANULE)

    @property
    def phase_base(self) -> int:
        return self.waves * WAVE_WORDS

    @property
    def use_base(self) -> int:
        return self.phase_base + PHASE_SLOTS * 2

    @property
    def granule_base(self) -> int:
        return self.use_base + self.waves * self.sites

    @property
    def slots_per_granule(self) -> int:
        return 1 + self.waves  # the last writer, then one read slot per wave

    @property
    def words(self) -> int:
        return self.granule_base + self.granules * self.slots_per_granule * ENTRY_WORDS

    @property
    def bytes(self) -> int:
        return 4 * self.words

    def to_dict(self) -> dict:
        return {"waves": self.waves, "sites": self.sites, "lds_bytes": self.lds_bytes,
                "granule": GRANULE, "shadow_bytes": self.bytes}
