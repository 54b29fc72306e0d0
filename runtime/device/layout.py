"""Where the device runtime keeps its state: the per-workgroup shadow (in LDS after the
kernel's own LDS, or in a global scratch slot per workgroup) and the process's record
buffer (global memory). DESIGN.md explains the choices; this module is the one place the
word offsets are defined, for the IR generator (`hooks_ir.py`), the linker and the host.

All shadow fields are 32-bit words. Sizes, with W waves per workgroup, S sites in the
module and B bytes of kernel LDS (static + dynamic; G = ceil(B / GRANULE) granules):

    words = W * wave_words + PHASE_SLOTS * 2 + W * S + G * (2 + W) * ENTRY_WORDS
    wave_words = WAVE_WORDS, or COPY_WAVE_WORDS when the module issues async/TDM copies
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
ENDED = SIG_LASTWAIT + PHASE_SLOTS  # 1 once the wave reached its end (s_endpgm)
WAVE_WORDS = 16
assert ENDED < WAVE_WORDS

# Copy counters (modules with async/TDM copies): per counter j (0 = ASYNC, 1 = TENSOR) a
# block of CTR_WORDS at WAVE_WORDS + j * CTR_WORDS, then the ds counts at signals / end.
C_SEQ, C_DONE, C_LASTWAIT, C_END_DONE = 0, 1, 2, 3
C_SIG_DONE = 4  # PHASE_SLOTS words, as SIG_DONE
C_SIG_LASTWAIT = C_SIG_DONE + PHASE_SLOTS
C_NCOMP = C_SIG_LASTWAIT + PHASE_SLOTS  # completions recorded so far
COMP_SLOTS = 8  # the newest completions kept: (done after the wait, seg there, SEQ there)
C_COMP = C_NCOMP + 1
FLIGHT = 32  # the sites of the newest FLIGHT copies (for LDS013): slot seq % FLIGHT
C_SITES = C_COMP + 3 * COMP_SLOTS
C_SEQ0 = C_SITES + FLIGHT  # SEQ when the wave's current half-phase began
C_DONE0 = C_SEQ0 + 1  # DONE then
CTR_WORDS = C_DONE0 + 1
COPY_COUNTERS = 2
SIG_DS = WAVE_WORDS + COPY_COUNTERS * CTR_WORDS  # PHASE_SLOTS words: SEQ at the signal of phase k
END_DS = SIG_DS + PHASE_SLOTS  # SEQ at the wave's end
# Records already written for one access (a copy's footprint spans many granules and the
# host writes one record per access and key): a direct-mapped cache of DEDUP keys of 4 words
# (rule | cause << 8 | other wave << 16, site, other site, the access's seq | counter << 28).
DEDUP = 8
DEDUP_AT = END_DS + 1
# 1: a record is waiting on this wave's next half-phase boundary (an R_SEG_CLOSE record
# there; settle.py)
SEG_FLAG = DEDUP_AT + 4 * DEDUP
COPY_WAVE_WORDS = SEG_FLAG + 1

# Access kinds in an entry's WHO word: the op (abi.DsKind numbering: 1 read, 2 write,
# 3 atomic) at bit 16, the counter at bit 20 (0 ds, 1 async, 2 tensor), then flags:
# F_UNINIT the access read the granule never written (its LDS030 may be retracted),
# F_SERVED a read whose granule's last write happened before it (MODEL.md §6a fact 1),
# F_HELD a write named in a §6a pair (a later ordered read of a later half-phase consumes it).
WHO_OP, WHO_CTR = 16, 20
F_UNINIT, F_SERVED, F_HELD = 1 << 24, 1 << 25, 1 << 26

# Records the host settles (settle.py) before decoding: flags in a record's cause word, the
# access's counter sequence (low 16 bits) in `extra`, and three internal rules that never
# reach a report.
CAUSE_MASK = 0xFF
CAUSE_PENDING = 1 << 15  # an LDS010 that becomes LDS001 if its copy completes in its half-phase
CAUSE_LATER = 1 << 12  # COPY_NOT_WAITED unless the copy's wave completed it by its next signal or end
CAUSE_6A = 1 << 14  # a served read raced by a write in its half-phase (the RAW form)
CAUSE_READ_COPY = 1 << 13  # the read of that pair is a FROM_LDS copy (LDS012 in the WAR form)
CAUSE_CTR_SHIFT = 8  # the copy's counter (1 async, 2 tensor) of a CAUSE_PENDING / CAUSE_LATER record
R_RETRACT = 0xFC  # site, wave, extra: that read's LDS030 was raced by a write
R_SEG_CLOSE = 0xFD  # wave, cause = counter: its copies (site, other_site] completed in their
# half-phase, other_site = its DONE there, lane = 1 at a signal or the end (0: a returned wait)
R_CONSUMED = 0xFE  # other_site, other_wave, extra: that write was read, ordered, in a later half-phase
INTERNAL_RULES = (R_RETRACT, R_SEG_CLOSE, R_CONSUMED)

# Global-scratch placement: a launch descriptor DESC_BYTES before the ring, written by
# the host before every launch (`emulated.py`; on hardware the launcher): the slot array's
# address (u64), grid x and y (workgroups), B (kernel LDS bytes at this launch, dynamic
# included), the words of one slot, the number of slots.
DESC = struct.Struct("<QIIIII4x")
DESC_BYTES = DESC.size
D_SLOTS, D_GRID_X, D_GRID_Y, D_LDS, D_SLOT_WORDS, D_NSLOTS = 0, 8, 12, 16, 20, 24
assert DESC_BYTES == 32

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
# Where the hooks find the buffer: an address baked into the IR, or -- in a build bound to
# none (compile-only, standalone code objects) -- the u64 module global RING_GLOBAL, which
# the host writes after loading the code object.
RING_UNBOUND = 0
RING_GLOBAL = "__ldssan_ring"


@dataclass(frozen=True)
class ShadowLayout:
    """Word offsets of one gpu.module's shadow (the same for all its kernels)."""

    waves: int  # W: waves per workgroup (the largest known block size / 32)
    sites: int  # S: sites in the module's site table
    lds_bytes: int  # B: the kernel LDS the shadow covers (static globals; global: at link)
    copies: bool = False  # the module issues async/TDM copies: the copy counters' words
    scratch: bool = False  # in a global scratch slot per workgroup (B known at launch)

    @property
    def wave_words(self) -> int:
        return COPY_WAVE_WORDS if self.copies else WAVE_WORDS

    @property
    def granules(self) -> int:
        return -(-self.lds_bytes // GRANULE)

    @property
    def phase_base(self) -> int:
        return self.waves * self.wave_words

    @property
    def use_base(self) -> int:
        return self.phase_base + PHASE_SLOTS * 2

    @property
    def granule_base(self) -> int:
        return self.use_base + self.waves * self.sites

    @property
    def slots_per_granule(self) -> int:
        # the last writer, the write it superseded (§6a), then one read slot per wave
        return 2 + self.waves

    @property
    def words(self) -> int:
        return self.words_for(self.lds_bytes)

    def words_for(self, lds_bytes: int) -> int:
        """Shadow words for B = lds_bytes (a scratch slot is sized at each launch, to whole
        16 bytes: the prologue zeroes it 16 bytes a store)."""
        words = self.granule_base + -(-lds_bytes // GRANULE) * self.slots_per_granule * ENTRY_WORDS
        return -(-words // 4) * 4 if self.scratch else words

    @property
    def bytes(self) -> int:
        return 4 * self.words

    def to_dict(self) -> dict:
        return {"waves": self.waves, "sites": self.sites, "lds_bytes": self.lds_bytes,
                "granule": GRANULE, "shadow_bytes": self.bytes, "copies": self.copies,
                "where": "global scratch" if self.scratch else "lds"}
