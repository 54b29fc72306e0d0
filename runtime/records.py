"""Violation records: the fixed 32-byte format both executors write, and the bounded ring.

Record layout (little-endian, 32 bytes; docs/architecture.md, "The event path"):

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
With `verbatim` set (a sanitizer session's ring) it deduplicates as it records, so one bug
repeated by every lane, wave and unrolled copy does not fill it: per (rule, cause, site, other_site) the first `verbatim` records are kept
as they come, and after that only a record that shows something new (a wave, lane, other
wave, other lane, workgroup or launch not seen for that key, or a smaller LDS011 count);
the rest are folded into `folded[key] = [instances, lowest offset, highest offset]`, which
lives in the process (the byte form carries the kept records only). The sets a report
gives (waves, lanes, workgroups, ...) are therefore exact; instance counts add `folded`.
A ring copied back as bytes (`Ring.from_bytes`) is validated before anything is decoded:
a buffer that does not hold exactly what its header claims is a `RecordFormatError`.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, fields

import numpy as np

from ldssan.passes.ir.errors import UsageError

NO_SITE = 0xFFFFFFFF
NO_WAVE = 0xFFFF
NO_LANE = 0xFF

RECORD_BYTES = 32
# Storage is allocated as records arrive (doubling), so a large capacity costs nothing
# until it is used; this is the first allocation.
_FIRST_ALLOC = 256


class RecordFormatError(UsageError, ValueError):
    """A record buffer that is not a well-formed ring: names what is wrong."""


class Rule(enum.IntEnum):
    """Stable rule codes; the number is the code's digits (LDS001 -> 1)."""

    RAW_UNPUBLISHED = 1  # LDS001
    WAR_REUSE = 2  # LDS002
    WAW = 3  # LDS003
    WAW_SAME_VALUE = 4  # LDS004: as LDS003, both stores wrote identical bytes (severity warning)
    DMA_READ_BEFORE_WAIT = 10  # LDS010
    WAIT_TOO_WEAK = 11  # LDS011
    DMA_OVERLAP = 12  # LDS012
    DMA_NEVER_WAITED = 13  # LDS013
    CLUSTER_COPY_UNORDERED = 14  # LDS014: a cluster peer's TDM multicast vs this workgroup's access
    BARRIER_DIVERGENCE = 20  # LDS020
    UNINIT_READ = 30  # LDS030
    OOB = 31  # LDS031
    # Static fence-pairing findings (passes/lint.py): never in a ring, severity "warning".
    MISSING_RELEASE = 40  # LDS040
    MISSING_ACQUIRE = 41  # LDS041
    # ISA-level counter findings on the linked code object (ldssan/isa/): never in a ring.
    ISA_STORE_UNWAITED_AT_SIGNAL = 50  # LDS050
    ISA_WAIT_BELOW_INTENT = 51  # LDS051
    ISA_USE_BEFORE_WAIT = 52  # LDS052

    @property
    def code(self) -> str:
        return f"LDS{int(self):03d}"


# Rules whose findings are warnings: shown and counted, never what fails a launch.
WARNING_RULES = frozenset({Rule.WAW_SAME_VALUE})


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
    COPY_WAITED_UNPUBLISHED = 12  # LDS001: the issuer's wait completed the copy; no barrier after it
    PEER_COPY_AFTER_ACCESS = 13  # LDS014: the peer's copy was issued in a later cluster phase than the access

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


# For a sanitizer session's ring (`Ring(n, verbatim=VERBATIM_PER_KEY)`): records kept as
# they come per (rule, cause, site, other_site) before only records that show something new
# are kept. A few examples suffice: the sets a report gives come from the new-info rule.
VERBATIM_PER_KEY = 4


class _KeySeen:
    """What one dedup key's records have shown so far."""

    __slots__ = ("n", "sets", "extra")

    def __init__(self):
        self.n = 0
        self.sets: tuple[set, ...] = (set(), set(), set(), set(), set(), set())
        self.extra: int | None = None

    def admit(self, rec: "Record", verbatim: int) -> bool:
        """Note the record; True if it is to be kept (within `verbatim`, or new)."""
        self.n += 1
        new = self.n <= verbatim
        for seen, value in zip(self.sets, (rec.wave, rec.lane, rec.other_wave, rec.other_lane,
                                           rec.workgroup, rec.launch)):
            if value not in seen:
                seen.add(value)
                new = True
        if rec.rule == Rule.WAIT_TOO_WEAK and (self.extra is None or rec.extra < self.extra):
            self.extra = rec.extra  # the report gives the smallest sufficient count
            new = True
        return new


class Ring:
    """Bounded buffer of 32-byte records with a (capacity, written, dropped) header.

    `written` counts every record stored or dropped (folded duplicates are in `folded`,
    `merged` counts them); the first `capacity` are kept, the rest are counted in
    `dropped`, the way a device-side buffer with an atomic cursor behaves.
    `verbatim=None` (the default) keeps every record, as a device buffer would; a
    sanitizer session passes `VERBATIM_PER_KEY` to deduplicate.
    """

    HEADER = struct.Struct("<QQQ")

    def __init__(self, capacity: int = 4096, *, verbatim: int | None = None):
        if capacity <= 0:
            raise ValueError(f"ring capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.verbatim = verbatim
        self._data = np.zeros(min(capacity, _FIRST_ALLOC), dtype=RECORD_DTYPE)
        self.written = 0
        self._seen: dict[tuple[int, int, int, int], _KeySeen] = {}
        self.folded: dict[tuple[int, int, int, int], list[int]] = {}

    @property
    def merged(self) -> int:
        """Records folded into an earlier one of their key (not stored, not dropped)."""
        return sum(f[0] for f in self.folded.values())

    @property
    def dropped(self) -> int:
        return max(0, self.written - self.capacity)

    def __len__(self) -> int:
        return min(self.written, self.capacity)

    def push(self, rec: Record) -> None:
        if self.verbatim is not None:
            key = (rec.rule, rec.cause, rec.site, rec.other_site)
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = _KeySeen()
            if not seen.admit(rec, self.verbatim):
                f = self.folded.get(key)
                if f is None:
                    self.folded[key] = [1, rec.lds_offset, rec.lds_offset]
                else:
                    f[0] += 1
                    f[1], f[2] = min(f[1], rec.lds_offset), max(f[2], rec.lds_offset)
                return
        n = self.written
        if n < self.capacity:
            if n == len(self._data):
                self._grow()
            self._data[n] = (
                rec.rule, rec.cause, rec.site, rec.other_site, rec.lds_offset, rec.wave,
                rec.other_wave, rec.lane, rec.other_lane, rec.extra, rec.workgroup, rec.launch,
            )
        self.written = n + 1

    def _grow(self) -> None:
        size = min(self.capacity, max(_FIRST_ALLOC, 2 * len(self._data)))
        data = np.zeros(size, dtype=RECORD_DTYPE)
        data[: len(self._data)] = self._data
        self._data = data

    def relabelled(self, launch: int) -> "Ring":
        """A copy of this finished ring whose records are those of launch `launch` (a
        memoized call replayed as a new launch: runtime/emu/memo.py)."""
        out = Ring(self.capacity, verbatim=self.verbatim)
        out._data = self._data.copy()
        out._data["launch"][: len(self)] = launch
        out.written = self.written
        out.folded = {k: list(v) for k, v in self.folded.items()}
        return out

    @property
    def nbytes(self) -> int:
        return self._data.nbytes + 64 * len(self.folded)

    def records(self) -> list[Record]:
        # tolist() gives Python ints, in Record's field order (asserted at the end of the module)
        return [Record(*row) for row in self._data[: len(self)].tolist()]

    def to_bytes(self) -> bytes:
        """Header + kept records, the layout a device buffer is copied back in."""
        head = self.HEADER.pack(self.capacity, self.written, self.dropped)
        return head + self._data[: len(self)].tobytes()

    @classmethod
    def from_bytes(cls, raw: bytes | bytearray | memoryview) -> "Ring":
        """Inverse of `to_bytes`, validated: the header's capacity, written and dropped
        counts must agree with each other and with the body, which must be whole records
        with a rule number. Memory used is bounded by `len(raw)`, whatever the header says."""
        raw = bytes(raw)
        head = cls.HEADER.size
        if len(raw) < head:
            raise RecordFormatError(
                f"ldssan: ring buffer of {len(raw)} bytes is shorter than its {head}-byte header "
                "(capacity, written, dropped)")
        capacity, written, dropped = cls.HEADER.unpack_from(raw, 0)
        body = len(raw) - head
        kept = body // RECORD_BYTES
        if capacity == 0:
            raise RecordFormatError("ldssan: ring header says capacity 0 (a ring holds at least 1 record)")
        if body % RECORD_BYTES:
            raise RecordFormatError(
                f"ldssan: ring body of {body} bytes is cut mid-record: {kept} whole "
                f"{RECORD_BYTES}-byte records and {body % RECORD_BYTES} bytes left over")
        if kept > capacity:
            raise RecordFormatError(
                f"ldssan: ring body holds {kept} records, more than the header's capacity {capacity}")
        expect = min(written, capacity)
        if kept != expect:
            raise RecordFormatError(
                f"ldssan: ring header says {written} records written with capacity {capacity}, so "
                f"{expect} kept, but the body holds {kept}")
        if dropped != written - expect:
            raise RecordFormatError(
                f"ldssan: ring header's dropped count {dropped} does not match written - kept = "
                f"{written} - {expect} = {written - expect}")
        data = np.frombuffer(raw, dtype=RECORD_DTYPE, count=kept, offset=head).copy()
        zero = np.flatnonzero(data["rule"] == 0)
        if zero.size:
            raise RecordFormatError(
                f"ldssan: ring record {int(zero[0])} has rule number 0, which no rule has "
                "(a zero-filled or corrupt buffer)")
        ring = cls(1, verbatim=None)  # a copied-back buffer is what it is: no folding
        ring.capacity, ring._data, ring.written = capacity, data, written
        return ring

    def clear(self) -> None:
        self.written = 0
        self._seen.clear()
        self.folded.clear()


# Ring.records builds a Record from a row as is: the two must list the same fields in order
assert RECORD_DTYPE.names == tuple(f.name for f in fields(Record))
