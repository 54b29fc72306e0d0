"""Violation records: the fixed 32-byte format both executors write, and the bounded ring.

Record layout (little-endian, 32 bytes; see ARCHITECTURE.md "Violation record"):

| field       | type | meaning                                                        |
|-------------|------|----------------------------------------------------------------|
| rule        | u16  | `Rule` code (LDS001 -> 1, LDS010 -> 10, ...)                   |
| cause       | u16  | `Cause` sub-case, 0 when the rule has none                     |
| site        | u32  | site id of *this* access (the one that detected the conflict)  |
| other_site  | u32  | site id of the *other* access, NO_SITE when there is none      |
| lds_offset  | u32  | first conflicting LDS byte offset in the workgroup's LDS       |
| wave        | u16  | wave (within the workgroup) of this access                     |
| other_wave  | u16  | wave of the other access, NO_WAVE when there is none           |
| lane        | u8   | lane of this access (NO_LANE for wave-level ops)               |
| other_lane  | u8   | lane of the other access                                       |
| extra       | u16  | rule specific: LDS011 the wait count that would suffice, ...   |
| workgroup   | u32  | linear workgroup id                                            |
| launch      | u32  | launch counter of the process                                  |

The ring keeps a header (capacity, written, dropped): overflow is counted, never silent.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

NO_SITE = 0xFFFFFFFF
NO_WAVE = 0xFFFF
NO_LANE = 0xFF

RECORD_BYTES = 32


class Rule(enum.IntEnum):
    """Stable rule codes; the number is the code's digits (LDS001 -> 1)."""

    RAW_UNPUBLISHED = 1  # LDS001
    WAR_REUSE = 2  # LDS002
    WAW = 3  # LDS003
    DMA_READ_BEFORE_WAIT = 10  # LDS010
    WAIT_TOO_WEAK = 11  # LDS011
    DMA_OVERLAP = 12  # LDS012
    DMA_NEVER_WAITED = 13  # LDS013
    BARRIER_DIVERGENCE = 20  # LDS020
    UNINIT_READ = 30  # LDS030
    OOB = 31  # LDS031

    @property
    def code(self) -> str:
        return f"LDS{int(self):03d}"


class Cause(enum.IntEnum):
    """Why an access was not ordered; refines a rule (0 = no sub-case)."""

    NONE = 0
    NO_BARRIER = 1  # no barrier phase separates the two accesses
    UNPUBLISHED_DS_STORE = 2  # the writer's ds op was not dscnt-complete at its signal
    BARE_BARRIER = 3  # a raw signal/wait (no fence, no wait) was the only separation
    SIGNAL_WAIT_WINDOW = 4  # an access sits between the wave's signal and its wait
    COPY_NOT_WAITED = 5  # async/TDM copy with no covering wait before the access
    COPY_WAITED_NOT_PUBLISHED = 6  # the issuer waited, but after its signal (or never signalled)
    UNPUBLISHED_READ = 7  # WAR: the reader's ds_load was not complete when it signalled
    WAVE_END = 8  # LDS013: wave ended with copies outstanding
    ASYNCMARK_UNMARKED = 9  # LDS013: wait.asyncmark relied on for ops after the last mark
    BARRIER_MISMATCH = 10  # LDS020: waves ran different barrier sequences
    BARRIER_DIVERGENT_LANES = 11  # LDS020: barrier reached with a partial exec mask

    @property
    def text(self) -> str:
        return self.name.lower().replace("_", " ")


_STRUCT = struct.Struct("<HHIIIHHBBHII")
assert _STRUCT.size == RECORD_BYTES

RECORD_DTYPE = np.dtype(
    [
        ("rule", "<u2"),
        ("cause", "<u2"),
        ("site", "<u4"),
        ("other_site", "<u4"),
        ("lds_offset", "<u4"),
        ("wave", "<u2"),
        ("other_wave", "<u2"),
        ("lane", "u1"),
        ("other_lane", "u1"),
        ("extra", "<u2"),
        ("workgroup", "<u4"),
        ("launch", "<u4"),
    ]
)
assert RECORD_DTYPE.itemsize == RECORD_BYTES


@dataclass(frozen=True, slots=True)
class Record:
    rule: int
    cause: int
    site: int
    other_site: int = NO_SITE
    lds_offset: int = 0
    wave: int = NO_WAVE
    other_wave: int = NO_WAVE
    lane: int = NO_LANE
    other_lane: int = NO_LANE
    extra: int = 0
    workgroup: int = 0
    launch: int = 0

    def pack(self) -> bytes:
        return _STRUCT.pack(
            self.rule, self.cause, self.site, self.other_site, self.lds_offset, self.wave,
            self.other_wave, self.lane, self.other_lane, self.extra, self.workgroup, self.launch,
        )

    @classmethod
    def unpack(cls, raw: bytes) -> "Record":
        return cls(*_STRUCT.unpack(raw))


class Ring:
    """Bounded buffer of 32-byte records with a (capacity, written, dropped) header.

    `written` counts every record offered; the first `capacity` are kept, the rest are
    counted in `dropped`, the way a device-side buffer with an atomic cursor behaves.
    """

    HEADER = struct.Struct("<QQQ")

    def __init__(self, capacity: int = 4096):
        if capacity <= 0:
            raise ValueError(f"ring capacity must be positive, got {capacity}")
        self.capacity = capacity
        self._data = np.zeros(capacity, dtype=RECORD_DTYPE)
        self.written = 0

    @property
    def dropped(self) -> int:
        return max(0, self.written - self.capacity)

    def __len__(self) -> int:
        return min(self.written, self.capacity)

    def push(self, rec: Record) -> None:
        if self.written < self.capacity:
            self._data[self.written] = (
                rec.rule, rec.cause, rec.site, rec.other_site, rec.lds_offset, rec.wave,
                rec.other_wave, rec.lane, rec.other_lane, rec.extra, rec.workgroup, rec.launch,
            )
        self.written += 1

    def records(self) -> list[Record]:
        return [Record(*(int(x) for x in row)) for row in self._data[: len(self)].tolist()]

    def to_bytes(self) -> bytes:
        """Header + kept records, the layout a device buffer is copied back in."""
        head = self.HEADER.pack(self.capacity, self.written, self.dropped)
        return head + self._data[: len(self)].tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes) -> "Ring":
        capacity, written, _dropped = cls.HEADER.unpack_from(raw, 0)
        ring = cls(capacity)
        body = np.frombuffer(raw, dtype=RECORD_DTYPE, offset=cls.HEADER.size)
        ring._data[: len(body)] = body
        ring.written = written
        return ring

    def clear(self) -> None:
        self.written = 0
