"""Topic records as Kafka records: keys, JSON values, ms timestamps and headers.

The JSON value of a row is built column by column with pyarrow compute (no
per-row Python for numbers and timestamps), which is what lets one process
serve hundreds of thousands of records per second:

* the object holds the topic's columns in order, as ``{"name":value,...}``;
* the Kafka timestamp is the row's ``ts`` in ms, or 0 for a row before 1970 (Kafka record timestamps
  cannot be negative; the value still holds the real ``ts``);
* TIMESTAMP columns are RFC 3339 UTC strings with the database precision's
  fraction (``"2018-10-03T06:38:05.000Z"``, 6 digits for us, 9 for ns); a
  timestamp outside years 0001-9999 (refused on ingest, but a data dir written
  before may hold one) is written as
  :func:`~walgate.storage.values.format_timestamp` shows it, never as Arrow's
  ``<value out of range>``;
* FLOAT/DOUBLE use the shortest decimal form that round-trips their own
  width (a FLOAT 10.3 is ``10.3``, not ``10.300000190734863``); NaN and
  infinities, which JSON cannot carry, become ``null``;
* BOOL is ``true``/``false``; integers are JSON integers; strings are JSON
  strings (escaped by orjson when a column holds a character that needs it);
  NULL is ``null``.

Keys are the subtable (or normal table) name. Headers: ``db``, ``stable``
(empty for a normal table), ``table`` and ``version`` (the row's WAL version);
a meta record carries ``meta`` = the operation (``create_table``,
``drop_table``, ``alter_stable``, ``drop_stable``) and its value is the
operation as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.topics import Records
from walgate.storage.values import TIMESTAMP_RANGE, format_timestamp

__all__ = ["KafkaRows", "render", "json_objects"]

_MS_DIVISOR = {"ms": 1, "us": 1_000, "ns": 1_000_000}
_NEEDS_ESCAPE = r'["\\\x00-\x1f\x7f]'


@dataclass(frozen=True)
class KafkaRows:
    """Column-wise Kafka records of one WAL entry, in offset order."""

    keys: list[bytes]
    values: list[bytes]
    timestamps: list[int]  # ms since the epoch
    headers: list[list[tuple[str, bytes]]]

    def __len__(self) -> int:
        return len(self.keys)


def render(records: list[Records], db: str, precision: str) -> KafkaRows:
    """Render the records one entry yields (see the module docstring)."""
    keys: list[bytes] = []
    values: list[bytes] = []
    timestamps: list[int] = []
    headers: list[list[tuple[str, bytes]]] = []
    db_b = db.encode()
    div = _MS_DIVISOR[precision]
    for rec in records:
        # Kafka record timestamps are ms since the epoch and never negative: a row before 1970 is stamped 0 (its
        # real ts is in the value)
        ms = pc.max_element_wise(rec.timestamps, 0)
        timestamps += (pc.divide(ms, div) if div != 1 else ms).to_pylist()  # integer division, exact at >= 0
        names = pc.cast(rec.keys, pa.binary()).to_pylist()
        keys += names
        versions = rec.versions.to_pylist()
        if rec.meta is not None:
            values.append(orjson.dumps(rec.meta))
            op = str(rec.meta.get("op", "")).encode()
            headers.append([("db", db_b), ("stable", str(rec.meta.get("stable") or "").encode()),
                            ("table", names[0] or b""), ("version", str(versions[0]).encode()), ("meta", op)])
            continue
        assert rec.values is not None
        values += json_objects(rec.values)
        stable = rec.source.encode() if rec.is_stable else b""
        headers += [
            [("db", db_b), ("stable", stable), ("table", name), ("version", str(v).encode())]
            for name, v in zip(names, versions)
        ]
    return KafkaRows(keys, values, timestamps, headers)


def json_objects(table: pa.Table) -> list[bytes]:
    """Each row of ``table`` as a JSON object (UTF-8 bytes), built column-wise."""
    n = table.num_rows
    if n == 0:
        return []
    parts: list[pa.Array | str] = []
    for i, (name, col) in enumerate(zip(table.column_names, table.columns)):
        prefix = ("{" if i == 0 else ",") + orjson.dumps(name).decode() + ":"
        parts += [prefix, _json_text(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)]
    parts.append("}")
    joined = pc.binary_join_element_wise(*parts, "")
    rendered: list[bytes] = pc.cast(joined, pa.binary()).to_pylist()
    return rendered


def _json_text(col: pa.Array) -> pa.Array:
    """The JSON text of every value of ``col`` (a string array without nulls)."""
    t = col.type
    if pa.types.is_timestamp(t):
        ticks = pc.cast(col, pa.int64())
        extremes = pc.min_max(ticks)
        low, high = TIMESTAMP_RANGE[t.unit]
        first, last = extremes["min"].as_py(), extremes["max"].as_py()
        if first is None or low <= first and last <= high:
            text = pc.binary_join_element_wise('"', pc.utf8_replace_slice(pc.cast(col, pa.string()), 10, 11, "T"), 'Z"', "")
        else:  # a year outside 0001-9999 (written before they were refused): Arrow would show "<value out of range>"
            shown = [None if v is None else f'"{format_timestamp(v, t.unit)}"' for v in ticks.to_pylist()]
            text = pa.array(shown, pa.string())
    elif pa.types.is_floating(t):
        finite = pc.is_finite(col)
        text = pc.if_else(finite, pc.cast(col, pa.string()), pa.scalar(None, pa.string()))
    elif pa.types.is_boolean(t) or pa.types.is_integer(t):
        text = pc.cast(col, pa.string())
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
            text = pa.array([None if v is None else orjson.dumps(v).decode() for v in col.to_pylist()], pa.string())
        else:
            text = pc.binary_join_element_wise('"', col, '"', "")
    elif pa.types.is_null(t):
        text = pa.nulls(len(col), pa.string())
    else:  # anything else (binary, decimals from expressions): orjson decides
        text = pa.array([None if v is None else orjson.dumps(v, default=str).decode() for v in col.to_pylist()], pa.string())
    return pc.fill_null(text, "null")
