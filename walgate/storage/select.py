"""SELECT statements: scan a table or supertable's WAL, then project (a plain query) or hand over to DuckDB.

A query reads every data entry of the source's vnodes through a
:class:`~walgate.storage.topics.TopicEvaluator` compiled like a topic's ``AS SELECT`` on the query's WHERE clause,
so a query's WHERE and a topic's mean the same thing. A plain query (:attr:`Query.plain
<walgate.storage.query.Query.plain>`: a select list, WHERE, LIMIT) is projected by that evaluator and stops reading
at LIMIT; anything else (aggregates, windows, grouping, ordering) runs in DuckDB over the scanned rows, with
``tbname`` added (:mod:`walgate.storage.query`). The answer is TDengine-REST shaped: ``column_meta`` rows
``(name, type, length)`` and JSON-ready rows (timestamps as RFC 3339 UTC strings, FLOATs at their shortest form).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.catalog import DatabaseDef
from walgate.storage.entry import decode_entry
from walgate.storage.query import Query
from walgate.storage.result import Result
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.topics import Records, TopicEvaluator
from walgate.storage.values import format_timestamp
from walgate.storage.wal import KIND_DATA

__all__ = ["Selects"]


class Selects:
    """Runs SELECT statements over the store's vnodes (read-only)."""

    def __init__(self, store: Store, views: TopicViews) -> None:
        self.store = store
        self.views = views

    def select(self, s: ast.Select, session: str | None) -> Result:
        """The rows of ``s`` (see the module docstring); ``session`` is the current database."""
        db = self.store.resolve_db(s.source.db, session)
        q = Query(s, db.precision, time.time_ns())
        ev = self.views.compile(db, "select", s.source.name, False, s.items if q.plain else None, q.where)
        schema = ev.output_schema()
        if not q.plain:
            tags = [t.name for t in ev.stable.tags] if ev.stable is not None else []
            scanned = (r.values.append_column("tbname", r.keys) for r in self._scan(db, ev) if r.values is not None)
            meta, table = q.run(ev.known, tags, schema, scanned)
            return Result(meta, _json_rows(table))
        rows: list[list[Any]] = []
        for recs in self._scan(db, ev):
            assert recs.values is not None
            rows += _json_rows(recs.values)
            if s.limit is not None and len(rows) >= s.limit:
                del rows[s.limit :]
                break
        return Result([_column_meta(f, ev.known.get(f.name)) for f in schema], rows)

    def _scan(self, db: DatabaseDef, ev: TopicEvaluator) -> Iterator[Records]:
        for vnode in self.store.vnodes[db.name]:
            tag_tables = self.store.tag_tables(vnode)
            for entry in vnode.wal.read_from(vnode.wal.first_version):
                if entry.kind == KIND_DATA:
                    yield from ev.evaluate(decode_entry(entry), tag_tables)


def _column_meta(f: pa.Field, known: Column | None) -> tuple[str, str, int]:
    """TDengine column_meta ``[name, type, length]`` of a result column."""
    if known is not None and _type_name(known.type.arrow()) == _type_name(f.type):
        return f.name, known.type.name, known.type.size
    name = _type_name(f.type)
    return f.name, name, ColumnType(name).size


def _json_rows(table: pa.Table) -> list[list[Any]]:
    """Rows as JSON-ready lists: timestamps as RFC 3339 UTC strings, FLOATs at their shortest decimal form."""
    cols = []
    for col, f in zip(table.columns, table.schema):
        if pa.types.is_timestamp(f.type):
            ticks = pc.cast(col, pa.int64()).to_pylist()
            cols.append([None if v is None else format_timestamp(v, f.type.unit) for v in ticks])
        elif pa.types.is_float32(f.type):
            cols.append(pc.cast(pc.cast(col, pa.string()), pa.float64()).to_pylist())
        else:
            cols.append(col.to_pylist())
    return [list(r) for r in zip(*cols)] if cols else []


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    return {
        pa.bool_(): "BOOL", pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
        pa.uint8(): "TINYINT UNSIGNED", pa.uint16(): "SMALLINT UNSIGNED", pa.uint32(): "INT UNSIGNED",
        pa.uint64(): "BIGINT UNSIGNED", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
    }.get(t, "VARCHAR")
