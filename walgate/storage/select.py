"""SELECT statements: scan a table or supertable's WAL, then project (a plain query) or hand over to DuckDB.

A query reads every data entry of the source's vnodes through a
:class:`~walgate.storage.topics.TopicEvaluator` compiled like a topic's ``AS SELECT`` on the query's WHERE clause,
so a query's WHERE and a topic's mean the same thing. A plain query (:attr:`Query.plain
<walgate.storage.query.Query.plain>`: a select list, WHERE, LIMIT) is projected by that evaluator and stops reading
at LIMIT; anything else (aggregates, windows, grouping, ordering) runs in DuckDB over the scanned rows, with
``tbname`` added (:mod:`walgate.storage.query`). The answer is TDengine-REST shaped: ``column_meta`` rows
``(name, type, length)`` and JSON-ready rows (timestamps as RFC 3339 UTC strings, FLOATs at their shortest form).

A query is prepared where the engine lives (:meth:`Selects.prepare`: compiled, and bound to a snapshot of each
vnode's WAL and the supertable's tag table) and run anywhere (:meth:`PreparedSelect.run`): the gateway runs it in a
query worker process, so a long query holds neither the engine's thread nor its process's GIL.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.cancel import Cancel
from walgate.storage.entry import decode_entry
from walgate.storage.errors import InvalidValue, LimitExceeded, Unsupported
from walgate.storage.lanes import Relane, covers, database_keys
from walgate.storage.query import Query
from walgate.storage.result import Result
from walgate.storage.schema import Column, ColumnType
from walgate.storage.select_merge import decode, encode, union
from walgate.storage.select_partial import is_partial, split
from walgate.storage.sql import ast
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.topics import Records, TopicEvaluator
from walgate.storage.values import TIMESTAMP_RANGE, format_timestamp
from walgate.storage.wal import KIND_DATA, WalSnapshot

__all__ = ["PreparedSelect", "Selects"]

_JSON_CHUNK = 65_536  # rows converted to JSON-ready lists between two cancel checks


class Selects:
    """Runs SELECT statements over the store's vnodes (read-only)."""

    def __init__(self, store: Store, views: TopicViews) -> None:
        self.store = store
        self.views = views

    def select(self, s: ast.Select, session: str | None) -> Result:
        """The rows of ``s`` (see the module docstring), read on this thread; ``session`` is the current database."""
        prepared = self.prepare(s, session)
        damaged: list[tuple[int, int]] = []
        try:
            return prepared.run(damaged=damaged)
        finally:
            self.recheck(prepared.db, damaged)

    def prepare(self, s: ast.Select, session: str | None, here_only: bool = False,
                scan: bool = False, now_ns: int | None = None, vgroups: Collection[int] | None = None) -> PreparedSelect:
        """``s`` compiled and bound to what its source's vnodes serve now, to be run on any thread or process
        (:class:`PreparedSelect`); call with the whole storage lane or holding every vnode of its database, which
        it reads alone (:class:`~walgate.storage.lanes.Relane` otherwise, before it reads anything). ``here_only``
        (cluster mode: this node's part of a SELECT whose database is spread over nodes, merged by the node asked):
        over the vnodes placed on this node
        alone (``vgroups``: exactly those the node asked assigned here, :meth:`Store.vnodes_here
        <walgate.storage.store.Store.vnodes_here>`), and either a plain query (:attr:`Query.plain <walgate.storage.query.Query.plain>`), whose rows are
        the concatenation of every vnode's, or with ``scan`` the scanned rows the node asked merges
        (:meth:`PreparedSelect.scan_rows`); any other is refused (:class:`Unsupported`). ``now`` / ``today()`` in
        the query are read at ``now_ns`` (ns since the epoch; None: the engine's clock now): a node's part of a merged
        SELECT is given the instant the node asked fixed, so every node cuts ``WHERE ts > now - 1h`` at the same one."""
        db = self.store.resolve_db(s.source.db, session)
        if not covers(database_keys((db.name,), self.store.catalog.databases)):
            raise Relane(f"a SELECT over {db.name} does not hold every vnode of its database")
        native = next((t.name for t in self.store.catalog.topics.values() if t.kind == "kafka" and t.db == db.name),
                      None)
        if native is not None:  # its cleaner rewrites segments under their names: no snapshot holds (wal.py)
            raise Unsupported(f"{db.name} holds Kafka-native topic {native}: read it with a Kafka client")
        q = Query(s, db.precision, self.store.clock.time_ns() if now_ns is None else now_ns)  # ``now``: given, or now
        if here_only and not q.plain and not scan:
            raise Unsupported(f"Database {db.name} is spread over several nodes: this node's part of a SELECT with "
                              "aggregates, windows, grouping, ORDER BY or OFFSET is its scanned rows")
        ev = self.views.compile(db, "select", s.source.name, False, s.items if q.plain else None, q.where)
        sources = []
        # never a partial answer: NotHere when a vgroup is elsewhere, unless this node's part is asked for
        vnodes = self.store.vnodes_here(db, vgroups) if here_only else self.store.all_vnodes(db)
        for vnode in vnodes:
            tags = {ev.source: self.store.tag_tables(vnode)(ev.source, None)} if ev.stable is not None else {}
            sources.append((vnode.wal.snapshot(), tags))
        return PreparedSelect(db.name, s, q, ev, tuple(sources), tuple(v.index for v in vnodes),
                              scan=scan and not q.plain)

    def recheck(self, db: str, damaged: list[tuple[int, int]]) -> None:
        """Report the damage a run of a query over ``db`` found: ``(vnode index, version)`` (see
        :meth:`Wal.recheck <walgate.storage.wal.Wal.recheck>`)."""
        by_index = {v.index: v for v in self.store.vnodes.get(db, [])}
        for index, version in damaged:
            if index in by_index:
                by_index[index].wal.recheck([version])


@dataclass(frozen=True)
class PreparedSelect:
    """A SELECT bound to what its database served when it was prepared: each vnode's WAL snapshot
    (:class:`~walgate.storage.wal.WalSnapshot`) and the tag table of the supertable it reads, its evaluator and plan.
    :meth:`run` reads nothing else, so it runs on any thread, or in another process (it pickles; the evaluator is
    compiled again there), while the engine goes on writing: it answers what was visible when the query started, as
    TDengine's queries do."""

    db: str
    select: ast.Select
    query: Query
    evaluator: TopicEvaluator
    sources: tuple[tuple[WalSnapshot, Mapping[str, pa.Table]], ...]  # per vnode: snapshot, tag table by stable
    vgroups: tuple[int, ...]  # each source's vnode index
    scan: bool = False  # answer the scanned rows (scan_rows), not the query's: this node's part of a merged query
    remote: tuple[bytes, ...] = ()  # every node's part (select_merge.encode): when given, run answers over them alone

    def run(self, cancel: Cancel | None = None, max_bytes: int | None = None,
            damaged: list[tuple[int, int]] | None = None) -> Result:
        """The rows (see the module docstring); with :attr:`remote`, those of the query over every node's part
        (:attr:`sources` unread). ``cancel`` stops the scan between WAL entries and interrupts DuckDB
        (:class:`QueryCancelled`); more than ``max_bytes`` of scanned rows (Arrow bytes) is refused with
        :class:`LimitExceeded` before DuckDB runs; ``(vnode index, version)`` of each damaged entry skipped is
        appended to ``damaged``, for :meth:`Selects.recheck` where the engine lives."""
        s, ev = self.select, self.evaluator
        scanned = _Budget(max_bytes)
        schema = ev.output_schema()
        found = damaged if damaged is not None else []
        if self.remote:
            return self._merge(cancel, scanned)
        if not self.query.plain:
            tags = [t.name for t in ev.stable.tags] if ev.stable is not None else []
            tables = [scanned.take(r.values.append_column("tbname", r.keys))
                      for _, r in self._scan(cancel, found) if r.values is not None]
            meta, table = self.query.run(ev.known, tags, schema, tables, cancel)
            return Result(meta, _json_rows(table, cancel))
        rows: list[list[Any]] = []
        for _, recs in self._scan(cancel, found):
            assert recs.values is not None
            rows += _json_rows(scanned.take(recs.values))
            if s.limit is not None and len(rows) >= s.limit:
                del rows[s.limit :]
                break
        return Result([_column_meta(f, ev.known.get(f.name)) for f in schema], rows)

    def _merge(self, cancel: Cancel | None, scanned: _Budget) -> Result:
        """The query over :attr:`remote`, every node's part (this node's included), as :meth:`run` answers it."""
        ev = self.evaluator
        merged = union([scanned.take(decode(blob)) for blob in self.remote])
        if (partial := split(self.select, ev.known)) is not None:  # the nodes' partial aggregates
            meta, table = partial.answer(self.query.precision, merged, cancel)
            return Result(meta, _json_rows(table, cancel))
        if is_partial(merged):
            raise InvalidValue("a node's part of a merged query is partial aggregates where rows were expected "
                               "(nodes of different versions?)")
        schema = ev.output_schema()
        if [(f.name, f.type) for f in merged.schema] != [(f.name, f.type) for f in schema] + [("tbname", pa.string())]:
            raise InvalidValue("the nodes' rows of a merged query are not of its source's columns (nodes of different "
                               "versions?)")
        tags = [t.name for t in ev.stable.tags] if ev.stable is not None else []
        meta, table = self.query.run(ev.known, tags, schema, [merged], cancel)
        return Result(meta, _json_rows(table, cancel))

    def scan_rows(self, cancel: Cancel | None = None, max_bytes: int | None = None,
                  damaged: list[tuple[int, int]] | None = None) -> bytes:
        """This node's part of a query merged across nodes (:mod:`walgate.storage.select_merge`): the rows its
        vnodes' scan keeps (WHERE), every column of the source plus ``tbname``, cut to the query's
        :meth:`~walgate.storage.query.Query.rows_needed`, each with its vnode's index, as an Arrow IPC stream
        (:func:`~walgate.storage.select_merge.encode`). ``cancel``, ``max_bytes`` and ``damaged`` as :meth:`run`'s."""
        scanned = _Budget(max_bytes)
        tables, vgroups = [], []
        for vgroup, r in self._scan(cancel, damaged if damaged is not None else []):
            if r.values is not None:
                tables.append(scanned.take(r.values.append_column("tbname", r.keys)))
                vgroups.append(pa.repeat(pa.scalar(vgroup, pa.int32()), r.values.num_rows))
        ev = self.evaluator
        if (partial := split(self.select, ev.known)) is not None:  # partial aggregates, not rows
            tags = [t.name for t in ev.stable.tags] if ev.stable is not None else []
            rows = partial.partials(self.query.precision, ev.known, tags, ev.output_schema(), tables, cancel)
            first = min(self.vgroups, default=0)
            return encode(rows, pa.repeat(pa.scalar(first, pa.int32()), rows.num_rows))
        rows, kept = self.query.cut(ev.known, ev.output_schema(), tables, cancel)
        of_rows = pa.concat_arrays(vgroups) if vgroups else pa.array([], pa.int32())
        return encode(rows, of_rows if kept is None else of_rows.take(kept))

    def _scan(self, cancel: Cancel | None, damaged: list[tuple[int, int]]) -> Iterator[tuple[int, Records]]:
        """Each vnode's records, with its index, in the order of :attr:`sources` (that of the vnode indexes)."""
        for index, (snapshot, tags) in zip(self.vgroups, self.sources, strict=True):
            versions: list[int] = []
            try:
                for entry in snapshot.entries(versions):
                    if cancel is not None:
                        cancel.check()
                    if entry.kind == KIND_DATA:
                        for records in self.evaluator.evaluate(decode_entry(entry), lambda source, _: tags[source]):
                            yield index, records
            finally:  # also when LIMIT or a cancel ends the scan early
                damaged += [(index, v) for v in versions]


class _Budget:
    """The bytes of scanned rows a query holds, refused past a limit (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.limit, self.used = limit, 0

    def take(self, table: pa.Table) -> pa.Table:
        self.used += table.nbytes
        if self.limit is not None and self.used > self.limit:
            raise LimitExceeded(f"the query reads more than {self.limit} bytes of rows (the statement memory "
                                "limit): narrow it with a time range or a tag condition in WHERE")
        return table


def _column_meta(f: pa.Field, known: Column | None) -> tuple[str, str, int]:
    """TDengine column_meta ``[name, type, length]`` of a result column."""
    if known is not None and _type_name(known.type.arrow()) == _type_name(f.type):
        return f.name, known.type.name, known.type.size
    name = _type_name(f.type)
    return f.name, name, ColumnType(name).size


def _json_rows(table: pa.Table, cancel: Cancel | None = None) -> list[list[Any]]:
    """Rows as JSON-ready lists: timestamps as RFC 3339 UTC strings, FLOATs at their shortest decimal form;
    ``cancel`` is checked between chunks of :data:`_JSON_CHUNK` rows."""
    if table.num_rows > _JSON_CHUNK:
        rows: list[list[Any]] = []
        for start in range(0, table.num_rows, _JSON_CHUNK):
            if cancel is not None:
                cancel.check()
            rows += _json_rows(table.slice(start, _JSON_CHUNK))
        return rows
    cols = []
    for col, f in zip(table.columns, table.schema):
        if pa.types.is_timestamp(f.type):
            cols.append(_timestamps(col, f.type.unit))
        elif pa.types.is_float32(f.type):
            cols.append(pc.cast(pc.cast(col, pa.string()), pa.float64()).to_pylist())
        else:
            cols.append(col.to_pylist())
    return [list(r) for r in zip(*cols)] if cols else []


def _timestamps(col: pa.ChunkedArray, unit: str) -> list[str | None]:
    """:func:`format_timestamp` of each value: by Arrow's ``strftime`` (a kernel, which releases the GIL) when all are
    in years 0001-9999, as everything written by this version is; row by row otherwise."""
    ticks = pc.cast(col, pa.int64())
    low, high = TIMESTAMP_RANGE[unit]
    bounds = pc.min_max(ticks).as_py()
    if bounds["min"] is None or (low <= bounds["min"] and bounds["max"] <= high):
        strings: list[str | None] = pc.strftime(col, format="%Y-%m-%dT%H:%M:%SZ").to_pylist()
        return strings
    return [None if v is None else format_timestamp(v, unit) for v in ticks.to_pylist()]


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return {
        pa.bool_(): "BOOL", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
        pa.uint8(): "TINYINT UNSIGNED", pa.uint16(): "SMALLINT UNSIGNED", pa.uint32(): "INT UNSIGNED",
        pa.uint64(): "BIGINT UNSIGNED", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
    }.get(t, "VARCHAR")
