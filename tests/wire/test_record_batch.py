"""walgate.wire.record_batch against independent readers, on records whose fields lie about their lengths.

Each record is written field by field from drawn values, where every length or count may be the true one or
something else, under a valid CRC: the parser must accept exactly what aiokafka's C ``DefaultRecordBatch``
accepts (the reader walgate used before issue 14) and read the same records, and :func:`check_records` (the
walk without objects that produce validation uses) must agree with :func:`decode_batch`. One difference is
deliberate and left out of the drawn records: a record attributes byte of 0x80 or more, which Kafka's Java
``DefaultRecord`` reads as one byte (as walgate does) and aiokafka and kafka-python as a varint.
"""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from aiokafka.record._crecords import DefaultRecordBatch as AioBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.wire.errors import InvalidRecord
from walgate.wire.record_batch import (
    BATCH_HEADER_SIZE,
    batch_header,
    check_records,
    decode_batch,
    encode_batch,
    rebase,
    record_timestamps,
)


def varint(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & (2**64 - 1)
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def told(draw: st.DrawFn, true: int) -> int:
    """The true length or count, mostly; sometimes another one."""
    return draw(st.sampled_from([true] * 6 + [true - 1, true + 1, -1, -2, -(2**40), 2**20]))


@st.composite
def record(draw: st.DrawFn) -> bytes:
    key = draw(st.none() | st.binary(max_size=12))
    value = draw(st.none() | st.binary(max_size=200))
    headers = draw(st.lists(st.tuples(st.binary(max_size=6), st.none() | st.binary(max_size=6)), max_size=3))
    body = bytes([draw(st.integers(0, 0x7F))])
    body += varint(draw(st.integers(-(2**40), 2**40) | st.integers(-64, 64)))
    body += varint(draw(st.integers(0, 3) | st.integers(-(2**33), 2**33)))
    for field in (key, value):
        body += varint(-1 if field is None else told(draw, len(field))) + (field or b"")
    body += varint(told(draw, len(headers)))
    for hkey, hvalue in headers:
        body += varint(told(draw, len(hkey))) + hkey
        body += varint(-1 if hvalue is None else told(draw, len(hvalue))) + (hvalue or b"")
    return varint(told(draw, len(body))) + body


@st.composite
def batch(draw: st.DrawFn) -> bytes:
    records = draw(st.lists(record(), min_size=1, max_size=5))
    count = draw(st.sampled_from([len(records)] * 6 + [len(records) - 1, len(records) + 1, 0, -1, 2**20]))
    body = b"".join(records)
    tail = struct.pack(">hiqqqhii", draw(st.sampled_from([0, 8])), len(records) - 1, 1_700_000_000_000,
                       1_700_000_000_005, -1, -1, -1, count) + body
    return struct.pack(">qiibI", 100, BATCH_HEADER_SIZE - 12 + len(body), 0, 2, crc32c.crc32c(tail)) + tail


def aiokafka_records(raw: bytes) -> list[tuple[object, ...]] | None:
    try:
        return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in AioBatch(raw)]
    except Exception:  # noqa: BLE001 - any refusal counts
        return None


@settings(max_examples=500, deadline=None)
@given(raw=batch())
def test_lying_records_are_read_as_aiokafka_reads_them(raw: bytes):
    try:
        mine: list[tuple[object, ...]] | None = [tuple(r) for r in decode_batch(raw).records]
    except InvalidRecord:
        mine = None
    assert mine == aiokafka_records(raw)
    try:
        check_records(raw)
        checked = True
    except InvalidRecord:
        checked = False
    assert checked == (mine is not None)
    if mine is not None:
        assert record_timestamps(raw) == [r[1] for r in mine]
        sequential = [r[0] for r in mine] == list(range(100, 100 + len(mine)))
        try:
            check_records(raw, sequential=True)
            assert sequential
        except InvalidRecord:
            assert not sequential


def test_record_attributes_are_one_byte_as_in_kafka():
    raw = bytearray(encode_batch(0, [1], [b"k"], [b"v"]))
    raw[62] = 0x80  # the record's attributes (unused by Kafka): not a varint
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    [r] = decode_batch(bytes(raw)).records
    assert (r.key, r.value) == (b"k", b"v")
    check_records(bytes(raw), sequential=True)


@pytest.mark.parametrize("count", [1, 70, 9000])
def test_multi_byte_varints_round_trip(count: int):
    timestamps = [i * 1_000_003 for i in range(count)]
    values = [b"v" * (i % 9000) for i in range(count)]
    raw = encode_batch(7, timestamps, [None] * count, values, offset_deltas=[3 * i for i in range(count)])
    records = decode_batch(raw).records
    assert [(r.offset, r.timestamp, r.value) for r in records] == [
        (7 + 3 * i, timestamps[i], values[i]) for i in range(count)]
    assert record_timestamps(raw) == timestamps
    check_records(raw)
    with pytest.raises(InvalidRecord) if count > 1 else contextlib.nullcontext():
        check_records(raw, sequential=True)


def test_header_and_rebase():
    raw = encode_batch(0, [5, 9], [b"a", None], [b"x", b"y"], partition_leader_epoch=4, producer_id=77,
                       producer_epoch=2, base_sequence=10)
    header = batch_header(raw)
    assert (header.base_offset, header.length, header.partition_leader_epoch, header.magic) == (0, len(raw) - 12, 4, 2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.record_count) == (77, 2, 10, 2)
    assert (header.base_timestamp, header.max_timestamp, header.last_offset_delta) == (5, 9, 1)
    moved = rebase(raw, 500, 0)
    assert batch_header(moved)[:3] == (500, len(raw) - 12, 0) and moved[16:] == raw[16:]
    with pytest.raises(InvalidRecord):
        batch_header(raw[:60])
