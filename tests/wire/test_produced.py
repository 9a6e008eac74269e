"""Validation of produced record batches (Kafka's LogValidator rules) and LogAppendTime stamping."""

from __future__ import annotations

import crc32c
import pytest
from aiokafka.record._crecords import DefaultRecordBatch as AioBatch
from aiokafka.record._crecords import LegacyRecordBatchBuilder as AioLegacyBuilder

from walgate.wire.errors import CorruptRecord, InvalidRecord, RecordTooLarge
from walgate.wire.record_batch import (
    batch_header,
    encode_batch,
    record_timestamps,
    with_log_append_time,
)
from walgate.wire.records import decode_batches, validate_produced


def batch(n: int = 3, **kw) -> bytes:
    return encode_batch(0, [100 + i for i in range(n)], [None] * n, [b"v%d" % i for i in range(n)], **kw)


def with_bad_record_bytes() -> bytes:
    """A batch whose records do not parse (the first record claims 63 bytes, 27 follow) under a valid CRC."""
    data = bytearray(batch())
    data[61] = 0xFE  # the first record's length varint: 0xFE 0x00 = zigzag 63
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


@pytest.mark.parametrize("with_records", [True, False])
def test_valid_batches_of_every_codec_pass(with_records: bool):
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        data = batch(compression=codec) + batch(2, compression=codec)
        got = validate_produced(data, 1 << 20, with_records=with_records)
        if with_records or codec:
            assert [len(b.records) for b in got] == [3, 2]
        else:
            assert [b.records for b in got] == [[], []]  # checked, not kept
        assert b"".join(b.raw for b in got) == data  # stored as produced


def test_corrupt_crc_is_corrupt_message():
    data = bytearray(batch())
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        validate_produced(bytes(data), 1 << 20)


@pytest.mark.parametrize("data, why", [
    (b"", "no batch"),
    (batch()[:-3], "truncated"),
    (batch(is_transactional=True), "transactional without a producer id"),
    (batch(is_control=True), "control"),
    (batch(offset_deltas=[0, 2, 3]), "offset deltas"),
    (with_bad_record_bytes(), "records that do not parse"),
])
@pytest.mark.parametrize("with_records", [True, False])
def test_invalid_batches_are_invalid_record(data: bytes, why: str, with_records: bool):
    with pytest.raises(InvalidRecord):
        validate_produced(data, 1 << 20, with_records=with_records)


def test_transactional_batches_of_a_producer_pass():
    data = batch(is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=0)
    assert validate_produced(data, 1 << 20)[0].is_transactional


def test_legacy_message_sets_are_refused_on_produce_v3():
    builder = AioLegacyBuilder(1, 0, 1 << 20)
    builder.append(0, 100, None, b"v")
    with pytest.raises(InvalidRecord, match="magic"):
        validate_produced(bytes(builder.build()), 1 << 20)


def test_a_batch_above_max_message_bytes():
    data = batch(50)
    with pytest.raises(RecordTooLarge):
        validate_produced(data, len(data) - 1)
    assert validate_produced(data, len(data))


def test_log_append_time_restamps_and_keeps_the_crc_valid():
    stamped = with_log_append_time(batch(compression="lz4"), 5_000)
    header = batch_header(stamped)
    assert header.attributes & 0x08 and header.max_timestamp == 5_000
    assert crc32c.crc32c(stamped[21:]) == header.crc
    assert AioBatch(stamped).validate_crc()
    assert record_timestamps(stamped) == [5_000] * 3
    assert [r.value for b in decode_batches(stamped) for r in b.records] == [b"v0", b"v1", b"v2"]
