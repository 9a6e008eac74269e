"""The files of a WAL segment: the byte layout of entries, indexes and seals, and one segment in memory.

Entry layout (little endian; a 36-byte header, then the body)::

    0  u32 header_crc   CRC32C of bytes 4..36
    4  u32 body_len
    8  u32 body_crc     CRC32C of the body
    12 u8  kind         1 = data, 2 = meta, 3 = Kafka record batch
    13 u8  flags        bit 0: "more entries of this batch follow"
    14 u16 reserved     0
    16 u64 version      first version of the entry
    24 u32 count        versions spanned (>= 1)
    28 i64 max_ts       largest row timestamp (database precision)

Index record (24 bytes): ``u64 version, u64 file_position, i64 running_max_ts``
where running_max_ts is the maximum of max_ts over every entry of the vnode up
to and including this one (a monotonic column, kept in memory and on disk and
restored by an undo, so "first entry whose max_ts >= T" could be a binary
search; topics answer timestamp lookups from their offset index, which keeps
the same column per topic-partition). When a segment is sealed (the next one starts)
its index is written whole to ``<first_version:020d>.idx``, followed by a
32-byte seal: ``u64 0xFFFF_FFFF_FFFF_FFFF, i64 end_version, i64 log_size, u32
CRC32C of everything before it, 4 zero bytes``; ``end_version`` is the next
segment's first version. The active segment has no index file (one left by an
earlier release or a failed roll is ignored): it is scanned at every open.
"""

from __future__ import annotations

import errno
import os
import re
import struct
import sys
from array import array
from pathlib import Path

import crc32c

from walgate.storage.filecache import FileCache

__all__ = ["APPEND", "FLAG_MORE", "HEADER", "HEADER_SIZE", "INDEX_SIZE", "KINDS", "KIND_DATA", "KIND_KAFKA",
           "KIND_META", "SEAL", "SEAL_MARK", "SEAL_SIZE", "SEGMENT_NAME", "SWAP_NAME", "TS_MIN", "Header", "Segment",
           "decode_header", "describe", "encode_entry", "pack_index", "sealed_index", "unpack_index"]

KIND_DATA = 1
KIND_META = 2
KIND_KAFKA = 3  # a Kafka RecordBatch v2 as produced (base offset = its Kafka offset); count = its records
KINDS = (KIND_DATA, KIND_META, KIND_KAFKA)
FLAG_MORE = 1

HEADER = struct.Struct("<IIIBBHQIq")
HEADER_SIZE = HEADER.size  # 36
INDEX_SIZE = struct.calcsize("<QQq")  # 24
SEAL = struct.Struct("<QqqI4x")
SEAL_SIZE = SEAL.size  # 32
SEAL_MARK = 0xFFFF_FFFF_FFFF_FFFF
TS_MIN = -(1 << 63)

APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT  # how the active segment's log is written
SEGMENT_NAME = re.compile(r"(\d{20})\.(log|idx)")
SWAP_NAME = re.compile(r"(\d{20})\.(\d{20})\.swap")  # the log cleaner's merge of the segments [first, end)

Header = tuple[int, int, int, int, int, int, int]
"""A decoded entry header: (body_len, body_crc, kind, flags, version, count, max_ts)."""


class Segment:
    """One segment: its first version, the in-memory copy of its index, its size, and which entries' bodies this
    process has checked: ``checked`` is None when all of them were (scanned at open, or appended in this process),
    else a bitmap (bit ``i`` for entry ``i``, one bit an entry) of a sealed segment trusted without reading it."""

    __slots__ = ("first", "path", "index_path", "versions", "positions", "running_max", "size", "checked")

    def __init__(self, directory: Path, first: int) -> None:
        self.first = first
        self.path = directory / f"{first:020d}.log"
        self.index_path = directory / f"{first:020d}.idx"
        self.versions = array("q")
        self.positions = array("q")
        self.running_max = array("q")
        self.size = 0
        self.checked: bytearray | None = None

    def forget_files(self, files: FileCache) -> None:
        """Drop this segment's descriptors from ``files`` (they close once no region uses them)."""
        files.discard(self.path, os.O_RDONLY, APPEND)


def encode_entry(kind: int, flags: int, version: int, count: int, max_ts: int, body: bytes) -> bytes:
    rest = HEADER.pack(0, len(body), crc32c.crc32c(body), kind, flags, 0, version, count, max_ts)[4:]
    return struct.pack("<I", crc32c.crc32c(rest)) + rest + body


def decode_header(buf: bytes | memoryview) -> Header | None:
    """The header at the start of ``buf`` (at least ``HEADER_SIZE`` bytes), or None if its CRC fails."""
    header_crc, body_len, body_crc, kind, flags, _, version, count, max_ts = HEADER.unpack_from(buf)
    if crc32c.crc32c(buf[4:HEADER_SIZE]) != header_crc:
        return None
    return body_len, body_crc, kind, flags, version, count, max_ts


def pack_index(versions: array[int], positions: array[int], maxes: array[int]) -> bytes:
    records = array("q", bytes(len(versions) * INDEX_SIZE))
    records[0::3], records[1::3], records[2::3] = versions, positions, maxes
    if sys.byteorder == "big":
        records.byteswap()
    return records.tobytes()


def unpack_index(raw: bytes) -> tuple[array[int], array[int], array[int]]:
    records = array("q", raw)
    if sys.byteorder == "big":
        records.byteswap()
    return records[0::3], records[1::3], records[2::3]


def sealed_index(seg: Segment, end_version: int) -> bytes:
    """The index file of ``seg``, sealed: its records, then the seal recording ``end_version`` and its log size."""
    records = pack_index(seg.versions, seg.positions, seg.running_max)
    head = SEAL.pack(SEAL_MARK, end_version, seg.size, 0)[:24]
    return records + SEAL.pack(SEAL_MARK, end_version, seg.size, crc32c.crc32c(head, crc32c.crc32c(records)))


def describe(exc: OSError) -> str:
    """An OSError as the WAL's log lines and errors name it: ``ENOSPC: No space left on device``."""
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"{name}: {exc.strerror or exc}"
