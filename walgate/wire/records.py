"""Record data of any magic: produced and fetched partition data as batches.

A partition's records travel as a concatenation of *batches*. Since Kafka 0.11
every batch is a RecordBatch v2 (:mod:`walgate.wire.record_batch` owns that
format); older clients wrote message sets of magic 0/1 *messages*. Both start
with the same 17 bytes -- offset, size, 4 bytes, magic -- so the magic byte at
offset 16 tells them apart. :func:`decode_batches` splits a buffer into batches
of either kind; :func:`validate_produced` applies Kafka's ``LogValidator`` rules
to what a producer sent.

Legacy message (magic 0 and 1; all integers big-endian)::

     0 offset       int64    magic 1 inner messages: relative (0..n-1)
     8 message_size int32    bytes after this field
    12 crc          uint32   CRC-32 (zlib) of bytes 16..end
    16 magic        int8
    17 attributes   int8     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), 3 timestamp type
    18 timestamp    int64    magic 1 only
       key          bytes    int32 length, -1 = null
       value        bytes    int32 length, -1 = null

A compressed message is a *wrapper*: its value is a compressed message set of
inner messages. For magic 1 the wrapper's offset is the absolute offset of the
last inner message and inner offsets are relative (kept relative when the wrapper
offset is smaller, i.e. not assigned yet, as producers send it); for magic 0 inner
offsets are absolute. Each top-level message decodes to one :class:`DecodedBatch`,
as in Kafka's ``AbstractLegacyRecordBatch``.

Any byte string either decodes or raises :class:`CorruptRecord` (CRC mismatch:
Kafka's CORRUPT_MESSAGE) or :class:`InvalidRecord` (anything else: INVALID_RECORD).
"""

from __future__ import annotations

import struct
import zlib
from typing import Final, NamedTuple

from walgate.wire.compression import CODEC_NAMES, DEFAULT_MAX_DECOMPRESSED, decompress
from walgate.wire.errors import CorruptRecord, InvalidRecord, RecordTooLarge
from walgate.wire.record_batch import (
    CODEC_MASK,
    LOG_APPEND_TIME_BIT,
    DecodedBatch,
    DecodedRecord,
    batch_header,
    check_records,
    decode_batch,
)

__all__ = ["decode_batches", "validate_produced"]

_LENGTH_AND_MAGIC: Final = struct.Struct(">qi4xb")
_LEGACY: Final = struct.Struct(">qiIbb")
_LEGACY_TIMESTAMP: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")


def validate_produced(
    data: bytes | bytearray | memoryview, max_batch_bytes: int, *, with_records: bool = True
) -> list[DecodedBatch]:
    """The batches of a Produce request's partition, checked as Kafka's ``LogValidator`` does.

    Every batch must be a RecordBatch v2 (Produce v3+) whose CRC matches
    (:class:`CorruptRecord`), whose records parse and match its count and
    offset deltas, that is not a control batch (only the broker writes
    those), whose producer id is set if it is transactional, and holds at least one record
    (:class:`InvalidRecord`); a batch above *max_batch_bytes* raises
    :class:`RecordTooLarge`. Without *with_records*, uncompressed batches are
    checked the same way but their ``records`` are left empty: a batch stored
    as produced needs no per-record objects (:func:`~walgate.wire.record_batch.check_records`).
    """
    batches = decode_batches(data, with_records=with_records)
    if not batches:
        raise InvalidRecord("the produce request holds no record batch")
    for b in batches:
        if b.magic != 2:
            raise InvalidRecord(f"Produce v3+ carries record batches of magic 2, not {b.magic}")
        if b.is_control:
            raise InvalidRecord("clients are not allowed to write control records")
        if b.is_transactional and b.producer_id < 0:
            raise InvalidRecord("a transactional record batch needs a producer id")
        count = len(b.records) if b.records or b.compression else batch_header(b.raw).record_count
        if not count or b.last_offset_delta != count - 1:
            raise InvalidRecord(f"batch with {count} records and last offset delta {b.last_offset_delta}")
        if b.records or b.compression:
            if any(r.offset - b.base_offset != i for i, r in enumerate(b.records)):
                raise InvalidRecord("record offset deltas must be 0, 1, 2, ...")
        else:
            check_records(b.raw, sequential=True)
        if len(b.raw) > max_batch_bytes:
            raise RecordTooLarge(f"a record batch of {len(b.raw)} bytes is above max.message.bytes {max_batch_bytes}")
    return batches


def decode_batches(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    with_records: bool = True,
) -> list[DecodedBatch]:
    """Every batch in *data* (magic 2 batches and magic 0/1 messages, in order).

    Without *with_records*, the ``records`` of uncompressed magic 2 batches are
    left empty (and not checked): see :func:`validate_produced`.

    Raises :class:`CorruptRecord` when a CRC does not match (if *verify_crc*)
    and :class:`InvalidRecord` for anything else: truncation, bad lengths or
    varints, unknown magic or codec, records not filling their batch, a
    record count that does not match, decompressed data above *max_decompressed*.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    batches = []
    pos = 0
    size = len(buf)
    while pos < size:
        if size - pos < 17:
            raise InvalidRecord(f"{size - pos} trailing bytes are not a batch")
        _, length, magic = _LENGTH_AND_MAGIC.unpack_from(buf, pos)
        end = pos + 12 + length
        if length < 5 or end > size:
            raise InvalidRecord(f"batch at byte {pos} has length {length}, {size - pos - 12} bytes follow")
        if magic == 2:
            raw = buf if pos == 0 and end == size else buf[pos:end]
            batches.append(decode_batch(raw, verify_crc=verify_crc, max_decompressed=max_decompressed,
                                        with_records=with_records))
        elif magic in (0, 1):
            batches.append(_decode_legacy_batch(buf, pos, end, verify_crc, max_decompressed))
        else:
            raise InvalidRecord(f"unknown magic {magic} at byte {pos}")
        pos = end
    return batches


# --------------------------------------------------------------------------- legacy message sets


class _LegacyMessage(NamedTuple):
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _legacy_message(buf: bytes, pos: int, end: int, verify_crc: bool) -> _LegacyMessage:
    offset, _, crc, magic, attributes = _LEGACY.unpack_from(buf, pos)
    if verify_crc and zlib.crc32(memoryview(buf)[pos + 16 : end]) != crc:
        raise CorruptRecord(f"message at offset {offset}: CRC mismatch")
    at = pos + 18
    timestamp = -1
    if magic == 1:
        if at + 8 > end:
            raise InvalidRecord(f"message at offset {offset} is truncated")
        (timestamp,) = _LEGACY_TIMESTAMP.unpack_from(buf, at)
        at += 8
    key, at = _legacy_bytes(buf, at, end)
    value, at = _legacy_bytes(buf, at, end)
    if at != end:
        raise InvalidRecord(f"message at offset {offset} ends at byte {at}, its size says {end}")
    return _LegacyMessage(offset, magic, attributes, timestamp, key, value)


def _legacy_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise InvalidRecord("truncated legacy message")
    (length,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        if length != -1:
            raise InvalidRecord(f"legacy message length {length}")
        return None, pos
    if pos + length > end:
        raise InvalidRecord(f"legacy message field of {length} bytes overruns its message")
    return buf[pos : pos + length], pos + length


def _decode_legacy_batch(buf: bytes, pos: int, end: int, verify_crc: bool, max_decompressed: int) -> DecodedBatch:
    if end - pos < 26:
        raise InvalidRecord(f"legacy message of {end - pos} bytes is too short")
    message = _legacy_message(buf, pos, end, verify_crc)
    codec = message.attributes & CODEC_MASK
    timestamp_type = 1 if (message.magic == 1 and message.attributes & LOG_APPEND_TIME_BIT) else 0
    if codec == 0:
        inner = [message]
        name = None
    else:
        name = CODEC_NAMES.get(codec)
        if name is None or name == "zstd":
            raise InvalidRecord(f"message at offset {message.offset}: unknown codec {codec}")
        if name == "lz4" and message.magic == 0:
            raise InvalidRecord("magic 0 lz4 messages (KAFKA-3160 framing) are not supported")
        if message.value is None:
            raise InvalidRecord(f"compressed message at offset {message.offset} has no value")
        inner = _legacy_inner(decompress(name, message.value, max_decompressed), verify_crc, message)
    records = [
        DecodedRecord(m.offset, message.timestamp if timestamp_type else m.timestamp, m.key, m.value, [])
        for m in inner
    ]
    timestamps = [r.timestamp for r in records]
    return DecodedBatch(
        records[0].offset, -1, message.magic, message.attributes, name, timestamp_type,
        records[-1].offset - records[0].offset, timestamps[0], max(timestamps), -1, -1, -1, False, False,
        records, buf[pos:end],
    )


def _legacy_inner(data: bytes, verify_crc: bool, wrapper: _LegacyMessage) -> list[_LegacyMessage]:
    messages = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 26:
            raise InvalidRecord("truncated message inside a compressed message")
        (length,) = _INT32.unpack_from(data, pos + 8)
        end = pos + 12 + length
        if length < 14 or end > len(data):
            raise InvalidRecord(f"inner message length {length}")
        inner = _legacy_message(data, pos, end, verify_crc)
        if inner.attributes & CODEC_MASK:
            raise InvalidRecord("compressed message nested in a compressed message")
        messages.append(inner)
        pos = end
    if not messages:
        raise InvalidRecord(f"compressed message at offset {wrapper.offset} holds no messages")
    if wrapper.magic == 1:
        # As Kafka's AbstractLegacyRecordBatch: a wrapper written by a producer (offset 0, not yet
        # assigned) makes the base negative, and the relative inner offsets are kept.
        base = wrapper.offset - messages[-1].offset
        if base >= 0:
            messages = [m._replace(offset=m.offset + base) for m in messages]
    return messages
