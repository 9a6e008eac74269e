"""Kafka's RecordBatch (magic 2): header, CRC-32C, records, timestamps, building. No I/O.

Theory of operation
-------------------
Since Kafka 0.11 (Produce v3+, Fetch v4+) a partition's data travels as a
concatenation of RecordBatch v2 *batches*; storage keeps each produced batch as
one WAL entry and serves it back byte for byte. Everything that reads or writes
the format goes through this module: the produce path (:func:`decode_batch`,
:func:`check_records`), storage (:func:`batch_header`, :func:`rebase`,
:func:`record_timestamps`) and the fetch path (:func:`encode_batch`).

Byte layout (all integers big-endian; header 61 bytes)::

    offset  field                   type    meaning
     0      base_offset             int64   offset of the first record (the broker assigns it)
     8      batch_length            int32   bytes after this field (total size - 12)
    12      partition_leader_epoch  int32   set by the broker
    16      magic                   int8    2
    17      crc                     uint32  CRC-32C (Castagnoli) of bytes 21..end
    21      attributes              int16   bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
                                            bit 3 timestamp type (1 = LogAppendTime),
                                            bit 4 transactional, bit 5 control, bit 6 delete horizon
    23      last_offset_delta       int32   offset delta of the last record
    27      base_timestamp          int64   timestamp of the first record (ms)
    35      max_timestamp           int64   largest record timestamp (LogAppendTime: the append time)
    43      producer_id             int64   -1 if not idempotent
    51      producer_epoch          int16   -1 if not idempotent
    53      base_sequence           int32   -1 if not idempotent
    57      record_count            int32   records that follow
    61      records                         compressed as a whole when the codec is not 0

    record = length:varint attributes:int8 timestamp_delta:varlong offset_delta:varint
             key_length:varint key value_length:varint value
             header_count:varint (key_length:varint key:utf8 value_length:varint value)*

Varints are zig-zag encoded (protobuf ``sint32``/``sint64``) in at most 10 bytes;
a negative key or value length means null. The record attributes are one byte,
unused (as Kafka's Java ``DefaultRecord`` reads them; aiokafka and kafka-python
read a varint there). A record's timestamp is ``base_timestamp + timestamp_delta``
(LogAppendTime: ``max_timestamp``), its offset ``base_offset + offset_delta``. The
CRC covers neither ``base_offset`` nor ``partition_leader_epoch``, so the broker
re-bases a stored batch (:func:`rebase`) without touching its records or
recomputing the CRC.

Validity, as Kafka's ``DefaultRecordBatch`` iterator checks it: :func:`decode_batch`
raises :class:`~walgate.wire.errors.CorruptRecord` when the CRC does not match and
:class:`~walgate.wire.errors.InvalidRecord` unless the codec is known, the
decompressed records stay under a bound, and the batch holds exactly
``record_count`` records, each filling its ``length`` exactly, with no byte left
over, no negative header count or header key length, UTF-8 header keys.
:func:`check_records` checks the same of the records of an uncompressed batch.

Speed: fixed-width fields are read and written with precompiled ``struct``
calls, the CRC by the ``crc32c`` package (C), and the per-record loops decode
one- and two-byte varints inline (every value within +-8191: lengths, offset
deltas, most timestamp deltas) and encode them by table. :func:`check_records`
walks records without making any object per record, for batches stored as
produced, in C (``_record_check.c``, built by setup.py where a compiler is
found; else the same walk in Python, with the same answers:
``tests/wire/test_record_check.py``): 5 ns per record, against 440 ns in Python
and 28 ns compiled by mypyc (issue 15). Against aiokafka's C extension, which
walgate used until issue 14 (a private module whose import loads asyncio),
measured in one run of ``tests/wire/bench_wire.py``: encoding 0.45-0.55x its
speed (2.8 M records/s with one header, 1.7 M with the four headers of a
rendered row), produce validation with the CRC 8.6-9.6x (88-93 M records/s; in Python
0.23x, 2.3 M), full decoding with headers 0.13x (0.7 M records/s);
:func:`record_timestamps` is faster than the full decode it replaced.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

import crc32c

from walgate.wire.compression import (
    CODEC_IDS,
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED,
    compress,
    decompress,
)
from walgate.wire.errors import CorruptRecord, InvalidRecord

_c_check_records: Callable[[bytes, bool], str | None] | None
try:  # setup.py builds it where a C compiler is found (optional): else _python_check_records, same answers
    from walgate.wire._record_check import check_records as _c_check_records
except ImportError:  # pragma: no cover - a build without the C compiler
    _c_check_records = None

__all__ = [
    "BATCH_HEADER_SIZE",
    "BATCH_PREFIX_SIZE",
    "CODEC_MASK",
    "CONTROL_ABORT",
    "CONTROL_BIT",
    "CONTROL_COMMIT",
    "LOG_APPEND_TIME_BIT",
    "TRANSACTIONAL_BIT",
    "BatchHeader",
    "DecodedBatch",
    "DecodedRecord",
    "Header",
    "batch_header",
    "batch_prefix",
    "check_records",
    "decode_batch",
    "end_txn_marker",
    "encode_batch",
    "rebase",
    "record_timestamps",
    "txn_marker",
    "with_log_append_time",
]

Header = tuple[str, bytes | None]
"""One record header: (key, value or None)."""

BATCH_HEADER_SIZE: Final = 61
BATCH_PREFIX_SIZE: Final = 16  # base offset, batch length, partition leader epoch: what the CRC does not cover
CODEC_MASK: Final = 0x07
LOG_APPEND_TIME_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40  # KIP-534: base_timestamp holds the batch's delete horizon (set by the log cleaner)
CONTROL_ABORT: Final = 0  # control record types of an EndTransactionMarker (Kafka's ControlRecordType)
CONTROL_COMMIT: Final = 1

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")  # the 61-byte header, field by field
_HEAD: Final = struct.Struct(">qiibI")  # bytes 0-20: base offset .. crc
_TAIL: Final = struct.Struct(">hiqqqhii")  # bytes 21-60: attributes .. record count (CRC-covered)
_INT16: Final = struct.Struct(">h")
_CONTROL_KEY: Final = struct.Struct(">hh")  # control record key: version 0, type
_MARKER_VALUE: Final = struct.Struct(">hi")  # EndTransactionMarker value: version 0, coordinator epoch
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT64: Final = struct.Struct(">q")
_PREFIX: Final = struct.Struct(">qii")  # base offset, batch length, partition leader epoch
_CRC_START: Final = 21
_MIN_LENGTH: Final = BATCH_HEADER_SIZE - 12  # batch_length of a batch without records
_MAX_BATCH: Final = 2**31 - 1
_U64: Final = 2**64 - 1

_ZZ1: Final = [(b >> 1) ^ -(b & 1) for b in range(128)]
"""The value of each one-byte zig-zag varint."""
_SMALL: Final = 1 << 13


def _encode_varint(value: int) -> bytes:
    """*value* (a signed 64-bit integer) as a zig-zag varint."""
    raw = ((value << 1) ^ (value >> 63)) & _U64
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_ZZ_BYTES: Final = [_encode_varint(v) for v in range(_SMALL)] + [_encode_varint(v) for v in range(-_SMALL, 0)]
"""``_ZZ_BYTES[v]`` is the varint of *v* for -8192 <= v < 8192 (one or two bytes; negative indices wrap)."""


def _varint_bytes(value: int) -> bytes:
    return _ZZ_BYTES[value] if -_SMALL <= value < _SMALL else _encode_varint(value)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at *pos* and the position after it (the multi-byte case; at most 10 bytes)."""
    raw = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= _U64
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecord(f"varint longer than 10 bytes at byte {pos}")


class BatchHeader(NamedTuple):
    """The 61-byte header of a RecordBatch v2, fields in byte order (see the module doc)."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


class DecodedRecord(NamedTuple):
    """One record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


@dataclass(slots=True)
class DecodedBatch:
    """One batch (or one top-level legacy message) and its records; ``raw`` is its bytes."""

    base_offset: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    compression: str | None
    timestamp_type: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    records: list[DecodedRecord]
    raw: bytes


# --------------------------------------------------------------------------- header


def batch_header(batch: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at *pos* of *batch*; raises :class:`InvalidRecord` if fewer than 61 bytes follow.

    Only the header's size is checked: not the magic, the length or the CRC."""
    if len(batch) - pos < BATCH_HEADER_SIZE:
        raise InvalidRecord(f"{len(batch) - pos} bytes are shorter than a record batch header")
    return BatchHeader._make(_HEADER.unpack_from(batch, pos))


def batch_prefix(batch: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(base offset, batch length, partition leader epoch): the first :data:`BATCH_PREFIX_SIZE` bytes of *batch*,
    which its CRC does not cover; raises :class:`InvalidRecord` if fewer bytes are given."""
    if len(batch) < BATCH_PREFIX_SIZE:
        raise InvalidRecord(f"a record batch prefix is {BATCH_PREFIX_SIZE} bytes, got {len(batch)}")
    base, length, epoch = _PREFIX.unpack_from(batch, 0)
    return base, length, epoch


def rebase(batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """*batch* with its base offset and partition leader epoch set; the CRC (which covers neither) stays valid."""
    view = memoryview(batch)
    return _PREFIX.pack(base_offset, _INT32.unpack_from(view, 8)[0], leader_epoch) + view[16:]


def with_log_append_time(batch: bytes | bytearray | memoryview, now_ms: int) -> bytes:
    """*batch* marked LogAppendTime with *now_ms* as its max timestamp; CRC recomputed.

    As Kafka's broker does for topics with ``message.timestamp.type=LogAppendTime``:
    every record's timestamp reads as the batch's max timestamp.
    """
    out = bytearray(batch)
    (attributes,) = _INT16.unpack_from(out, _CRC_START)
    _INT16.pack_into(out, _CRC_START, attributes | LOG_APPEND_TIME_BIT)
    _INT64.pack_into(out, 35, now_ms)
    _UINT32.pack_into(out, 17, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


# --------------------------------------------------------------------------- records


def _records(buf: bytes, pos: int, end: int, count: int, base_offset: int, base_ts: int,
             append_time: int | None) -> list[DecodedRecord]:
    """The *count* records in ``buf[pos:end]`` (uncompressed), checked as the module doc says.

    Varints of one and two bytes are decoded inline (the loop runs once per record)."""
    zz = _ZZ1
    varint = _varint
    record = DecodedRecord
    out: list[DecodedRecord] = []
    append = out.append
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = varint(buf, pos)
            stop = pos + length
            if length < 6 or stop > end:
                raise InvalidRecord(f"record of {length} bytes at byte {pos} overruns its batch")
            pos += 1  # attributes: unused
            b = buf[pos]
            if b < 0x80:
                ts_delta = zz[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                ts_delta, pos = varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = varint(buf, pos)
            b = buf[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                n = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                n, pos = varint(buf, pos)
            if n < 0:
                key = None
            elif pos + n > stop:
                raise InvalidRecord(f"record key of {n} bytes overruns its record")
            else:
                key = buf[pos : pos + n]
                pos += n
            b = buf[pos]
            if b < 0x80:
                n = zz[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                n = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                n, pos = varint(buf, pos)
            if n < 0:
                value = None
            elif pos + n > stop:
                raise InvalidRecord(f"record value of {n} bytes overruns its record")
            else:
                value = buf[pos : pos + n]
                pos += n
            if buf[pos] == 0:
                headers: list[Header] = []
                pos += 1
            else:
                headers, pos = _headers(buf, pos, stop)
            if pos != stop:
                raise InvalidRecord(f"record ends at byte {pos}, its length says {stop}")
            append(record(base_offset + offset_delta, base_ts + ts_delta if append_time is None else append_time,
                          key, value, headers))
    except IndexError:
        raise InvalidRecord(f"{count} records overrun byte {end} of their batch") from None
    if pos != end:
        raise InvalidRecord(f"{end - pos} bytes left after {count} records")
    return out


def _headers(buf: bytes, pos: int, stop: int) -> tuple[list[Header], int]:
    """The headers of the record ending at *stop*, starting with their count at *pos*."""
    zz = _ZZ1
    varint = _varint
    b = buf[pos]
    if b < 0x80:
        count = zz[b]
        pos += 1
    elif buf[pos + 1] < 0x80:
        raw = (b & 0x7F) | (buf[pos + 1] << 7)
        count = (raw >> 1) ^ -(raw & 1)
        pos += 2
    else:
        count, pos = varint(buf, pos)
    if count < 0 or 2 * count > stop - pos:  # a header takes at least 2 bytes
        raise InvalidRecord(f"record header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        elif buf[pos + 1] < 0x80:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            n = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            n, pos = varint(buf, pos)
        if n < 0 or pos + n > stop:
            raise InvalidRecord(f"record header key length {n}")
        try:
            key = buf[pos : pos + n].decode()
        except UnicodeDecodeError:
            raise InvalidRecord("record header key is not UTF-8") from None
        pos += n
        b = buf[pos]
        if b < 0x80:
            n = zz[b]
            pos += 1
        elif buf[pos + 1] < 0x80:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            n = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            n, pos = varint(buf, pos)
        if n < 0:
            headers.append((key, None))
        elif pos + n > stop:
            raise InvalidRecord(f"record header value of {n} bytes overruns its record")
        else:
            headers.append((key, buf[pos : pos + n]))
            pos += n
    return headers, pos


def check_records(batch: bytes, *, sequential: bool = False) -> None:
    """Check the records of *batch* (one whole uncompressed RecordBatch v2) as :func:`decode_batch` would.

    With *sequential*, their offset deltas must also be 0, 1, 2, ... (as producers
    write them). No object is made per record: timestamps are skipped and keys and
    values jumped over. Raises :class:`InvalidRecord`. Runs in C
    (``walgate/wire/_record_check.c``) where setup.py could build it, else the
    same walk in Python (:func:`_python_check_records`, same answers and messages).
    """
    if _c_check_records is None:
        _python_check_records(batch, sequential)
        return
    message = _c_check_records(batch, sequential)
    if message is not None:
        raise InvalidRecord(message)


def _python_check_records(batch: bytes, sequential: bool) -> None:
    """:func:`check_records` in Python: every read of *batch* past its end is an IndexError, i.e. an overrun."""
    if len(batch) < BATCH_HEADER_SIZE:
        raise InvalidRecord(f"record batch of {len(batch)} bytes is shorter than its header")
    if batch[22] & CODEC_MASK:  # the low byte of the attributes
        raise InvalidRecord("check_records reads uncompressed batches")
    (count,) = _INT32.unpack_from(batch, 57)
    zz = _ZZ1
    varint = _varint
    pos = BATCH_HEADER_SIZE
    end = len(batch)
    try:
        for i in range(count):
            b = batch[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            elif batch[pos + 1] < 0x80:
                raw = (b & 0x7F) | (batch[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = varint(batch, pos)
            stop = pos + length
            if length < 6 or stop > end:
                raise InvalidRecord(f"record of {length} bytes at byte {pos} overruns its batch")
            pos += 1  # attributes
            start = pos  # the timestamp delta: skipped
            while batch[pos] > 0x7F:
                pos += 1
            pos += 1
            if pos - start > 10:
                raise InvalidRecord(f"varint longer than 10 bytes at byte {start}")
            b = batch[pos]
            if b < 0x80:
                offset_delta = zz[b]
                pos += 1
            elif batch[pos + 1] < 0x80:
                raw = (b & 0x7F) | (batch[pos + 1] << 7)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                offset_delta, pos = varint(batch, pos)
            if sequential and offset_delta != i:
                raise InvalidRecord("record offset deltas must be 0, 1, 2, ...")
            b = batch[pos]
            if b < 0x80:
                pos += 1 if b & 1 else 1 + (b >> 1)
            elif batch[pos + 1] < 0x80:
                raw = (b & 0x7F) | (batch[pos + 1] << 7)
                pos += 2 if raw & 1 else 2 + (raw >> 1)
            else:
                n, pos = varint(batch, pos)
                if n > 0:
                    pos += n
            b = batch[pos]
            if b < 0x80:
                pos += 1 if b & 1 else 1 + (b >> 1)
            elif batch[pos + 1] < 0x80:
                raw = (b & 0x7F) | (batch[pos + 1] << 7)
                pos += 2 if raw & 1 else 2 + (raw >> 1)
            else:
                n, pos = varint(batch, pos)
                if n > 0:
                    pos += n
            if batch[pos] == 0:
                pos += 1
            else:
                pos = _headers(batch, pos, stop)[1]
            if pos != stop:
                raise InvalidRecord(f"record ends at byte {pos}, its length says {stop}")
    except IndexError:
        raise InvalidRecord(f"{count} records overrun byte {end} of their batch") from None
    if pos != end:
        raise InvalidRecord(f"{end - pos} bytes left after {count} records")


def record_timestamps(batch: bytes | bytearray | memoryview) -> list[int]:
    """The timestamp (ms) of every record of *batch* (one whole RecordBatch v2), as consumers read them.

    LogAppendTime batches: the max timestamp, for every record. Compressed batches
    are decompressed. The CRC is not checked and record fields after the timestamp
    are skipped, not checked (for batches validated when produced); raises
    :class:`InvalidRecord` for a batch whose header or record lengths do not parse.
    """
    header = batch_header(batch)
    if header.magic != 2:
        raise InvalidRecord(f"record_timestamps reads RecordBatch v2, not magic {header.magic}")
    count = header.record_count
    if header.attributes & LOG_APPEND_TIME_BIT:
        return [header.max_timestamp] * count
    buf = bytes(batch)
    codec = header.attributes & CODEC_MASK
    pos = BATCH_HEADER_SIZE
    if codec:
        buf = _decompressed(buf, header, DEFAULT_MAX_DECOMPRESSED)
        pos = 0
    zz = _ZZ1
    varint = _varint
    base = header.base_timestamp
    out: list[int] = []
    append = out.append
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                length = zz[b]
                pos += 1
            else:
                length, pos = varint(buf, pos)
            stop = pos + length
            if length < 6:
                raise InvalidRecord(f"record length {length} at byte {pos}")
            b = buf[pos + 1]
            if b < 0x80:
                append(base + zz[b])
            else:
                append(base + varint(buf, pos + 1)[0])
            pos = stop
    except IndexError:
        raise InvalidRecord(f"records of {count} end beyond byte {len(buf)}") from None
    if pos != len(buf):
        raise InvalidRecord(f"record lengths add up to {pos} bytes, not {len(buf)}")
    return out


# --------------------------------------------------------------------------- decoding


def _decompressed(raw: bytes, header: BatchHeader, max_decompressed: int) -> bytes:
    name = CODEC_NAMES.get(header.attributes & CODEC_MASK)
    if name is None:
        raise InvalidRecord(f"record batch at offset {header.base_offset}: unknown codec {header.attributes & 7}")
    return decompress(name, memoryview(raw)[BATCH_HEADER_SIZE:], max_decompressed)


def decode_batch(
    raw: bytes,
    *,
    verify_crc: bool = True,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    with_records: bool = True,
) -> DecodedBatch:
    """The RecordBatch v2 *raw* (exactly one whole batch, its ``batch_length`` checked by the caller) decoded.

    Without *with_records*, an uncompressed batch's ``records`` are left empty and
    not checked (:func:`check_records` does that without objects); compressed ones
    are always decoded. Raises :class:`CorruptRecord` when the CRC does not match
    (if *verify_crc*) and :class:`InvalidRecord` for anything else wrong (see the
    module doc), including decompressed records above *max_decompressed* bytes.
    """
    if len(raw) < BATCH_HEADER_SIZE:
        raise InvalidRecord(f"record batch of {len(raw)} bytes is shorter than its header")
    header = BatchHeader._make(_HEADER.unpack_from(raw, 0))
    base_offset, attributes, count = header.base_offset, header.attributes, header.record_count
    if verify_crc and crc32c.crc32c(memoryview(raw)[_CRC_START:]) != header.crc:
        raise CorruptRecord(f"record batch at offset {base_offset}: CRC mismatch")
    codec = attributes & CODEC_MASK
    append_time = header.max_timestamp if attributes & LOG_APPEND_TIME_BIT else None
    records: list[DecodedRecord] = []
    if codec:
        plain = _decompressed(raw, header, max_decompressed)
        if count < 0 or count > len(plain):
            raise InvalidRecord(f"record batch at offset {base_offset}: record count {count}")
        records = _records(plain, 0, len(plain), count, base_offset, header.base_timestamp, append_time)
    else:
        if count < 0 or count > len(raw) - BATCH_HEADER_SIZE:
            raise InvalidRecord(f"record batch at offset {base_offset}: record count {count}")
        if with_records:
            records = _records(raw, BATCH_HEADER_SIZE, len(raw), count, base_offset, header.base_timestamp,
                               append_time)
    return DecodedBatch(
        base_offset, header.partition_leader_epoch, header.magic, attributes, CODEC_NAMES.get(codec),
        1 if append_time is not None else 0, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, bool(attributes & TRANSACTIONAL_BIT),
        bool(attributes & CONTROL_BIT), records, raw,
    )


# --------------------------------------------------------------------------- building


_KEYS: dict[str, bytes] = {}  # header key -> its encoding (length varint + UTF-8), for the few keys in use
_KEYS_MAX: Final = 256


def _header_key(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"record header keys are str, not {type(key).__name__}")
    raw = key.encode()
    encoded = _varint_bytes(len(raw)) + raw
    if len(_KEYS) < _KEYS_MAX:
        _KEYS[key] = encoded
    return encoded


def encode_batch(
    base_offset: int,
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]] | None = None,
    *,
    compression: str | None = None,
    offset_deltas: Sequence[int] | None = None,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One complete RecordBatch v2 holding ``len(values)`` records.

    Record *i* has offset ``base_offset + offset_deltas[i]`` (default: *i*),
    timestamp ``timestamps[i]`` (ms; ``base_timestamp`` is the first record's,
    ``max_timestamp`` the largest), key, value and headers. Keys, values and
    header values are bytes-like or None; timestamps (>= 0, as Kafka requires)
    and offset deltas ``int``. The bytes are those kafka-python's and aiokafka's
    ``DefaultRecordBatchBuilder`` write (``tests/wire/test_records.py``).
    *compression* is None or a codec of :mod:`walgate.wire.compression`.
    With *delete_horizon_ms* (KIP-534, as Kafka's log cleaner writes it) the
    delete-horizon attribute is set and ``base_timestamp`` is that horizon, the
    records' timestamp deltas relative to it.
    Raises ``ValueError`` for an empty batch, sequences of different lengths,
    a negative timestamp, an unknown codec or a batch above 2 GiB, ``TypeError``
    for values of the wrong type.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a record batch holds at least one record")
    if len(timestamps) != count or len(keys) != count or (headers is not None and len(headers) != count):
        raise ValueError("timestamps, keys, values and headers must have the same length")
    if offset_deltas is not None and len(offset_deltas) != count:
        raise ValueError("offset_deltas must have one entry per record")
    if compression is not None and compression not in CODEC_IDS:
        raise ValueError(f"unknown codec {compression!r}")
    if min(timestamps) < 0:
        raise ValueError("record timestamps must be >= 0")  # as Kafka's ProducerRecord
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    base_ts = timestamps[0] if delete_horizon_ms is None else delete_horizon_ms
    small = _ZZ_BYTES
    big = _encode_varint
    encoded_keys = _KEYS
    join = b"".join
    parts: list[bytes] = []
    add = parts.append
    for i in range(count):
        delta = timestamps[i] - base_ts
        d = i if offset_deltas is None else offset_deltas[i]
        body = [b"\x00", small[delta] if -8192 <= delta < 8192 else big(delta), small[d] if -8192 <= d < 8192 else big(d)]
        key = keys[i]
        if key is None:
            body.append(b"\x01")
        else:
            n = len(key)
            body.append(small[n] if n < 8192 else big(n))
            body.append(key)
        value = values[i]
        if value is None:
            body.append(b"\x01")
        else:
            n = len(value)
            body.append(small[n] if n < 8192 else big(n))
            body.append(value)
        record_headers = None if headers is None else headers[i]
        if not record_headers:
            body.append(b"\x00")
        else:
            n = len(record_headers)
            body.append(small[n] if n < 8192 else big(n))
            for header_key, header_value in record_headers:
                encoded = encoded_keys.get(header_key)
                if encoded is None:
                    encoded = _header_key(header_key)
                body.append(encoded)
                if header_value is None:
                    body.append(b"\x01")
                else:
                    n = len(header_value)
                    body.append(small[n] if n < 8192 else big(n))
                    body.append(header_value)
        record = join(body)
        n = len(record)
        add(small[n] if n < 8192 else big(n))
        add(record)
    records = b"".join(parts)
    attributes = (
        (CODEC_IDS[compression] if compression is not None else 0)
        | (LOG_APPEND_TIME_BIT if timestamp_type else 0)
        | (TRANSACTIONAL_BIT if is_transactional else 0)
        | (CONTROL_BIT if is_control else 0)
        | (DELETE_HORIZON_BIT if delete_horizon_ms is not None else 0)
    )
    if compression is not None:
        records = compress(compression, records)
    if len(records) > _MAX_BATCH - _MIN_LENGTH:
        raise ValueError("record batch larger than 2 GiB")
    last_delta = count - 1 if offset_deltas is None else offset_deltas[-1]
    tail = _TAIL.pack(attributes, last_delta, base_ts, max(timestamps), producer_id, producer_epoch, base_sequence,
                      count)
    crc = crc32c.crc32c(records, crc32c.crc32c(tail))
    head = _HEAD.pack(base_offset, _MIN_LENGTH + len(records), partition_leader_epoch, 2, crc)
    return b"".join((head, tail, records))


# --------------------------------------------------------------------------- transaction markers


def end_txn_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int, *,
                   base_offset: int = 0, offset_delta: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """Kafka's EndTransactionMarker: a control batch (transactional, no sequence) of one record at
    ``base_offset + offset_delta`` whose key is (version 0, type :data:`CONTROL_COMMIT` or :data:`CONTROL_ABORT`)
    and value (version 0, *coordinator_epoch*)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    return encode_batch(base_offset, [timestamp], [key], [_MARKER_VALUE.pack(0, coordinator_epoch)],
                        offset_deltas=[offset_delta], producer_id=producer_id, producer_epoch=producer_epoch,
                        partition_leader_epoch=partition_leader_epoch, is_transactional=True, is_control=True)


def txn_marker(batch: bytes) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the EndTransactionMarker in control batch *batch*; None when its first
    record is not one (no record, another control type, a short key or value), as Kafka's ProducerAppendInfo skips
    a control batch without records. Raises :class:`InvalidRecord` for records that do not parse."""
    records = decode_batch(batch, verify_crc=False).records
    if not records:
        return None
    key, value = records[0].key or b"", records[0].value or b""
    if len(key) < _CONTROL_KEY.size or len(value) < _MARKER_VALUE.size:
        return None
    kind = _CONTROL_KEY.unpack_from(key)[1]
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    return kind, _MARKER_VALUE.unpack_from(value)[1]
