"""Bodies of WAL entries: data blocks as Arrow IPC, meta operations as JSON.

A data entry holds the rows one request wrote to one vnode, as blocks: one
block per supertable (rows of all its subtables, told apart by the ``tbname``
column) or per normal table. Each block is an Arrow IPC stream whose schema
is ``tbname: string`` followed by the table's columns *at write time*, so
entries stay readable after ALTER (a missing column reads as NULL). Row ``r``
of the entry (counting across blocks in order) has WAL version
``entry.version + r``.

Layout (little endian)::

    u16 nblocks
    per block: u8 is_stable, u16 name_len, name (utf-8), u32 ipc_len, ipc

A meta entry's body is one JSON object (``{"op": "create_table", ...}``). A
Kafka entry's body is one RecordBatch v2, kept as produced.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from walgate.storage.wal import KIND_DATA, KIND_KAFKA, WalEntry

__all__ = ["Block", "DecodedEntry", "encode_blocks", "decode_entry", "encode_meta"]

_U16 = struct.Struct("<H")
_BLOCK_HEAD = struct.Struct("<BH")
_U32 = struct.Struct("<I")
_I64 = struct.Struct(">q")  # a Kafka batch's base offset (big endian, its first 8 bytes)


@dataclass(frozen=True)
class Block:
    source: str  # the supertable or normal table the rows belong to
    is_stable: bool
    batch: pa.RecordBatch  # tbname, ts, columns...


@dataclass(frozen=True)
class DecodedEntry:
    version: int
    kind: int
    blocks: tuple[Block, ...] = ()
    meta: dict[str, Any] | None = None
    kafka_records: int = 0  # KIND_KAFKA: the batch's record count
    max_ts: int = 0  # KIND_KAFKA: the batch's max timestamp (ms)
    kafka_base: int = -1  # KIND_KAFKA read from the WAL: the base offset the stored batch carries

    @property
    def rows(self) -> int:
        return sum(b.batch.num_rows for b in self.blocks)


def encode_blocks(blocks: list[Block]) -> bytes:
    out = [_U16.pack(len(blocks))]
    for b in blocks:
        name = b.source.encode()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, b.batch.schema) as writer:
            writer.write_batch(b.batch)
        ipc = sink.getvalue()
        out += [_BLOCK_HEAD.pack(int(b.is_stable), len(name)), name, _U32.pack(ipc.size), ipc.to_pybytes()]
    return b"".join(out)


def encode_meta(meta: dict[str, Any]) -> bytes:
    return orjson.dumps(meta)


def decode_entry(entry: WalEntry) -> DecodedEntry:
    if entry.kind == KIND_KAFKA:
        return DecodedEntry(entry.version, entry.kind, kafka_records=entry.count, max_ts=entry.max_ts,
                            kafka_base=_I64.unpack_from(entry.body, 0)[0])
    if entry.kind != KIND_DATA:
        return DecodedEntry(entry.version, entry.kind, meta=orjson.loads(entry.body))
    body = memoryview(entry.body)
    (n,) = _U16.unpack_from(body, 0)
    pos = 2
    blocks = []
    for _ in range(n):
        is_stable, name_len = _BLOCK_HEAD.unpack_from(body, pos)
        pos += _BLOCK_HEAD.size
        name = bytes(body[pos : pos + name_len]).decode()
        pos += name_len
        (ipc_len,) = _U32.unpack_from(body, pos)
        pos += 4
        reader = pa.ipc.open_stream(pa.py_buffer(body[pos : pos + ipc_len]))
        blocks.append(Block(name, bool(is_stable), reader.read_next_batch()))
        pos += ipc_len
    return DecodedEntry(entry.version, entry.kind, tuple(blocks))
