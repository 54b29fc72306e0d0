"""A violation ring copied back as bytes is validated before anything is decoded: a buffer
that does not hold exactly what its header says is a `RecordFormatError` (a ValueError)
naming what is wrong, never phantom violations, a raw struct/numpy error or a huge
allocation. Each probe below was a wrong answer or a crash before the decoder checked."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ldssan.decode import RecordFormatError, SiteTable, decode_bytes
from ldssan.runtime.records import RECORD_BYTES, Record, Ring

HEADER = Ring.HEADER.size
SITES = SiteTable.from_json([{"id": 0, "kind": "ds_read", "file": "k.py", "line": 3}])


def _head(capacity: int, written: int, dropped: int) -> bytes:
    return Ring.HEADER.pack(capacity, written, dropped)


def _ring(n: int, capacity: int = 8) -> Ring:
    ring = Ring(capacity)
    for i in range(n):
        ring.push(Record(1, 1, 0, wave=i % 4, lane=i % 32, lds_offset=4 * i))
    return ring


def test_round_trip_keeps_records_and_counts():
    ring = _ring(11, capacity=8)
    back = Ring.from_bytes(ring.to_bytes())
    assert (back.capacity, back.written, back.dropped) == (8, 11, 3)
    assert back.records() == ring.records()
    rep = decode_bytes(ring.to_bytes(), SITES)
    assert rep.records == 8 and rep.dropped == 3 and rep.violations[0].count == 8


# (probe, buffer, what the error must say)
MALFORMED = [
    ("empty buffer", b"", "shorter than its 24-byte header"),
    ("truncated header", _head(4, 0, 0)[:10], "10 bytes is shorter"),
    ("header only, records claimed", _head(4, 2, 0), "so 2 kept, but the body holds 0"),
    ("written > capacity, short body", _head(4, 9, 5) + _ring(2).to_bytes()[HEADER:], "so 4 kept, but the body holds 2"),
    ("body cut mid-record", _ring(2).to_bytes()[:-5], "cut mid-record"),
    ("capacity 0", _head(0, 0, 0), "capacity 0"),
    ("more records than capacity", _head(1, 1, 0) + _ring(3).to_bytes()[HEADER:], "more than the header's capacity 1"),
    ("dropped field ignored", _head(8, 3, 7) + _ring(3).to_bytes()[HEADER:], "dropped count 7 does not match"),
    ("zero-filled records", _head(4, 2, 0) + bytes(2 * RECORD_BYTES), "rule number 0"),
]


@pytest.mark.parametrize("raw, needle", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_ring_is_a_named_error(raw, needle):
    with pytest.raises(RecordFormatError, match=needle):
        decode_bytes(raw, SITES)
    assert issubclass(RecordFormatError, ValueError)


def test_huge_header_capacity_allocates_by_the_buffer_size():
    # capacity 2**40 with an honest small body: valid, and must not allocate 32 TiB
    raw = _head(1 << 40, 2, 0) + _ring(2).to_bytes()[HEADER:]
    tracemalloc.start()
    try:
        rep = decode_bytes(raw, SITES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rep.records == 2 and rep.capacity == 1 << 40 and rep.dropped == 0
    assert peak < 1 << 20


def test_large_ring_capacity_is_allocated_as_records_arrive():
    tracemalloc.start()
    try:
        ring = Ring(1_000_000_000)
        for _ in range(3):
            ring.push(Record(1, 1, 0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(ring) == 3 and peak < 1 << 20


def test_ring_grows_past_its_first_allocation():
    ring = _ring(1000, capacity=600)
    assert len(ring) == 600 and ring.dropped == 400
    assert ring.records()[599].lds_offset == 4 * 599


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=4 * RECORD_BYTES + HEADER + 8))
def test_fuzz_arbitrary_bytes_decode_or_name_the_fault(raw):
    try:
        rep = decode_bytes(raw, SITES)
    except RecordFormatError:
        return
    # accepted: the header and the body agree, and nothing was invented
    capacity, written, dropped = struct.unpack_from("<QQQ", raw)
    assert rep.records == (len(raw) - HEADER) // RECORD_BYTES == min(written, capacity)
    assert rep.dropped == dropped and all(v.rule != 0 for v in rep.violations)


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(0, 12), st.integers(1, 6), st.integers(0, 200), st.integers(0, 2000))
def test_fuzz_corrupted_rings_fail_closed(n, capacity, flip, cut):
    """A valid ring with one header field bumped or the tail cut either decodes to exactly
    its records or is a RecordFormatError; never another exception, never extra records."""
    good = _ring(n, capacity).to_bytes()
    raw = bytearray(good[: len(good) - cut % (len(good) + 1)])
    if len(raw) >= HEADER:
        field = flip % 3
        value = struct.unpack_from("<Q", raw, 8 * field)[0]
        struct.pack_into("<Q", raw, 8 * field, value + flip // 3)
    try:
        ring = Ring.from_bytes(bytes(raw))
    except RecordFormatError:
        return
    assert ring.records() == _ring(n, capacity).records()[: len(ring)]
