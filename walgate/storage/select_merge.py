"""A SELECT over a database spread over several nodes, merged on the node asked (cluster mode; docs/cluster.md
"SQL across nodes").

A plain query (:func:`~walgate.storage.query.plain`) is answered by each node holding vgroups of the database over
its own vnodes and the answers concatenated (:func:`walgate.gateway.sql_forward.merge_rows`). A grouped query whose
partial aggregates merge exactly is split by :mod:`walgate.storage.select_partial` (each node ships a row per group
and window). Every other query (other aggregates, FILL, HAVING, ORDER BY, OFFSET) is merged by *shipping rows*: each
node scans its own vnodes with the query's WHERE, as it would for itself, and sends the node asked those rows (every
column of the source plus ``tbname``, and each row's vnode index, Arrow IPC: :func:`encode`), cut to the first OFFSET + LIMIT rows in the query's
ORDER BY when that is all the answer can need (:meth:`Query.rows_needed <walgate.storage.query.Query.rows_needed>`);
the node asked runs the query in DuckDB over the union of every node's rows in vnode order (:func:`union`), exactly
as a single node runs it over the rows of all its vnodes. So the answer is the one a single node holding every row gives, for
every function walgate supports (PERCENTILE-like functions included), rows that tie on every ORDER BY term aside
(their order, and which of them LIMIT keeps, may differ: SQL leaves it unspecified), at the price of moving the rows
that pass WHERE: every node's part, their sum as the node asked reads them
(:class:`~walgate.gateway.sql_forward.PartsBudget`) and the merge's rows are bounded by ``sql.max.bytes`` (the
statement memory limit, as Arrow bytes), past which the query is refused with
:class:`~walgate.storage.errors.LimitExceeded`.
Partial results travel the same way (:func:`encode`, with the sending node's first vnode index).

Each node reads only the vgroups it serves reads of (of a replicated database, those it leads now), so a merged
SELECT over a replicated database one of whose vgroups it reads has no leader is refused before any node is asked
(:func:`check_led`) rather than answered without that vgroup's rows.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from walgate.replication.partition import NO_LEADER
from walgate.storage.catalog import DatabaseDef
from walgate.storage.errors import InvalidValue, NoLeader, StorageUnavailable
from walgate.storage.vnode import vnode_of

__all__ = ["ARROW_STREAM", "check_led", "decode", "encode", "union"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
"""The media type of a node's scanned rows (Arrow's IPC streaming format)."""
_VGROUP = "__wg_vgroup"  # the column of each shipped row's vnode index (a name queries may not use: query.py)


def check_led(db: DatabaseDef, leader_of: Callable[[int], int | None], table: str | None = None) -> None:
    """Raise :class:`NoLeader` naming the first vgroup of ``db`` the statement reads, when it is replicated, that has
    no leader now (``leader_of(vgroup)``: its partition state's leader, :data:`~walgate.replication.partition.NO_LEADER`,
    or None without a state): every vgroup, or with ``table`` (a normal table or subtable the statement reads alone)
    that table's only, as TDengine sends such a query to its vgroup alone (rv4 R6)."""
    if not db.any_replicated:
        return
    for vgroup in range(db.vgroups) if table is None else (vnode_of(db.name, table, db.vgroups),):
        if db.replicated(vgroup) and leader_of(vgroup) in (None, NO_LEADER):
            raise NoLeader(f"Sync leader is unreachable: vgroup {vgroup} of database {db.name} has no leader now "
                           "(its replicas are electing one); retry the statement")


def encode(rows: pa.Table, vgroups: pa.Array) -> bytes:
    """``rows``, each from the vnode of index ``vgroups[i]``, in Arrow's IPC streaming format (what :func:`decode`
    reads back, schema and types kept)."""
    table = rows.append_column(_VGROUP, vgroups)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


def decode(blob: bytes) -> pa.Table:
    """The rows :func:`encode` wrote to ``blob`` (with their vnode indexes); InvalidValue when it is not an Arrow
    IPC stream of them: not Arrow, cut short, a type Arrow cannot read, offsets or lengths outside their buffers,
    strings or column names that are not UTF-8. Validated whole before anything reads a value: Arrow trusts a
    stream's offsets, so a flipped byte read unchecked reads outside the stream (the process crashes). A compressed
    stream (never :func:`encode`'s) is refused before it is read: its buffers would be allocated at the sizes it
    declares, whatever the bytes."""
    try:
        for message in pa.ipc.MessageReader.open_stream(blob):  # (each a slice of ``blob``: nothing allocated)
            if _compressed(message.metadata.to_pybytes()):
                raise InvalidValue("a node's rows of a merged query are a compressed Arrow stream")
        table = pa.ipc.open_stream(blob).read_all()
        table.validate(full=True)
        names = table.column_names  # (field names are not validated: UnicodeDecodeError here)
    except (pa.ArrowException, OSError, UnicodeDecodeError, struct.error, IndexError) as exc:
        raise InvalidValue(f"a node's rows of a merged query are not an Arrow stream: {exc}") from None
    if _VGROUP not in names:
        raise InvalidValue("a node's rows of a merged query do not say their vnodes")
    return table


def _compressed(metadata: bytes) -> bool:
    """Whether an Arrow IPC message's ``metadata`` (a ``Message`` flatbuffer: Arrow's format/Message.fbs) is of a
    record or dictionary batch whose body is compressed (its ``RecordBatch.compression`` set). Raises struct.error or
    IndexError for metadata cut short.

    A flatbuffer table at offset ``t`` starts with the int32 distance back to its vtable: uint16 vtable size, table
    size, then each field's uint16 offset in the table (0 or past the vtable: absent); a field holding a table holds
    the uint32 distance to it. ``Message``: field 1 the header's type (a byte: 2 DictionaryBatch, 3 RecordBatch),
    2 the header; ``DictionaryBatch``: 1 its ``RecordBatch``; ``RecordBatch``: 3 ``compression``."""
    def field(table: int, i: int) -> int:
        vtable = table - struct.unpack_from("<i", metadata, table)[0]
        size = struct.unpack_from("<H", metadata, vtable)[0]
        return struct.unpack_from("<H", metadata, vtable + 4 + 2 * i)[0] if 4 + 2 * i < size else 0

    def table_at(table: int, i: int) -> int | None:
        at = field(table, i)
        return None if at == 0 else table + at + struct.unpack_from("<I", metadata, table + at)[0]

    root = struct.unpack_from("<I", metadata)[0]
    kind = metadata[root + field(root, 1)] if field(root, 1) else 0
    header = table_at(root, 2)
    if kind == 2 and header is not None:
        header = table_at(header, 1)
    return kind in (2, 3) and header is not None and field(header, 3) != 0


def union(parts: list[pa.Table]) -> pa.Table:
    """Every node's rows (:func:`decode`d ``parts``, one or more) as one table, in the order a single node scans them: by vnode
    index, each vnode's rows in their order (a stable sort), so that DuckDB folds them in the same order and even
    floating-point sums come out the same to the last bit. Parts of different columns (an ALTER STABLE applied on
    one node and not yet on another, or partial aggregates of other types: the schemas' metadata) are refused with
    :class:`StorageUnavailable`: the statement may be retried."""
    differ = next((p.schema for p in parts if not p.schema.equals(parts[0].schema, check_metadata=True)), None)
    if differ is not None:
        raise StorageUnavailable("the nodes' parts of a merged query have different columns (a schema change is "
                                 f"reaching the nodes): retry the statement ({_columns(parts[0].schema)}; "
                                 f"{_columns(differ)})")
    table = pa.concat_tables(parts)
    table = table.take(pc.sort_indices(table.column(_VGROUP)))  # Arrow's sort_indices is stable
    return table.drop_columns([_VGROUP])


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)
