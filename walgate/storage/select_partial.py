"""Partial aggregates: a grouped SELECT split into what each node computes over its own rows and what the node asked
computes over every node's partial results, so that the nodes ship a row per group and window, not their rows
(cluster mode; :mod:`walgate.storage.select_merge` ships rows for every query this module does not split).

A query is split (:func:`split`) only when the merge is exact, to the last bit:

* its aggregates are COUNT (any argument), MIN and MAX (any), SPREAD of a number column (the difference of the
  exact MAX and MIN, each cast to DOUBLE as one node casts them), FIRST, LAST and LAST_ROW (any argument: each
  node's value with its timestamp, the value of the least, or greatest, timestamp taken; rows of one group on two
  nodes tying on that timestamp answer one of the tied values, unspecified, as one node's choice between tied rows
  is), SUM and AVG of an integer column of 32 bits or fewer
  (a sum of integers does not depend on the order it is added in; of floating-point values it does, so those ship
  rows; a node's partial sum of 64-bit integers may pass 2^63 where the whole sum does not, and one node's AVG of
  them is a DOUBLE average, so those ship rows too; an AVG whose integer sum passes 2^53 is the one exception:
  divided here from the exact sum, on one node from a rounded one);
* every other part of the select list, HAVING and ORDER BY is made of the grouping keys (GROUP BY / PARTITION BY
  expressions, as written), the window columns ``_wstart``, ``_wend``, ``_wduration``, literals, ORDER BY's
  aliases and positions, and aggregates (an ORDER BY term is resolved as one node resolves it: a position, then an
  output written the same or named so, even when a grouping key has that name);
* it has no FILL (its rows depend on the whole time range).

Each node runs :attr:`Split.part`: per key and window (PARTITION BY the keys, the query's INTERVAL, its WHERE) the keys
as ``_mk<i>``, the window as ``_mws``, ``_mwe``, ``_mwd`` and its partial aggregates as ``_mp<j>`` (COUNT, SUM, MIN,
MAX; AVG as its SUM and COUNT; FIRST, LAST, LAST_ROW and the timestamp of each: ``_first_ts``, ``_last_ts``,
``_last_row_ts``, internal aggregates only these queries run: :mod:`walgate.storage.query`). The node asked runs
:attr:`Split.final` over the union of every node's partial rows: the same select list, HAVING, ORDER BY, LIMIT and
OFFSET, its keys and window columns read from the partial columns (grouped by them, PARTITION BY kept, so LIMIT per
partition and the default order, keys then window start, are the query's) and each aggregate from its partials: COUNT
and SUM as SUM, MIN as MIN, MAX as MAX, AVG as SUM(sum) / SUM(count), SPREAD as CAST(MAX(max) AS DOUBLE) - CAST(MIN(min)
AS DOUBLE), FIRST as ``_first_of(first, its timestamp)`` (the non-NULL value of the least timestamp), LAST as
``_last_of`` (of the greatest), LAST_ROW as ``_last_row_of`` (the value, NULL too, of the greatest). Names are the
query's (each item is aliased with its own name); types too: a SUM of BIGINT partial counts or sums is BIGINT, MIN/MAX
keep the type, ``/`` is DOUBLE, NULL for a zero count.
Without grouping keys or INTERVAL every node answers one row even over no rows (COUNT 0), as the merge needs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, get_args

import pyarrow as pa

from walgate.storage.cancel import Cancel
from walgate.storage.errors import InvalidValue
from walgate.storage.query import PARTIAL_AGGREGATES, Query, column_name
from walgate.storage.schema import TYPE_NAMES, Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.sql.parser import AGGREGATES

__all__ = ["PART_TIME", "Split", "is_partial", "split"]

PART_TIME = "_mws"
"""The partial results' window start column (also their first, timestamp, column: a zero without INTERVAL)."""
_WINDOW = {"_wstart": PART_TIME, "_wend": "_mwe", "_wduration": "_mwd"}
_SUMMED = {"TINYINT", "SMALLINT", "INT", "TINYINT UNSIGNED", "SMALLINT UNSIGNED", "INT UNSIGNED", "BOOL"}
"""The column types whose SUM and AVG are split: a node's partial sum fits its BIGINT (module docstring)."""
_SPREAD = _SUMMED | {"BIGINT", "BIGINT UNSIGNED", "FLOAT", "DOUBLE"}
"""The column types whose SPREAD is split: numbers (a TIMESTAMP's SPREAD ships rows)."""
_DOUBLE = ast.ColumnTypeRef("DOUBLE")
_EXPR_TYPES = get_args(ast.Expr)
_PARTIAL_NAME = re.compile("_m[kp][0-9]+|_mw[sed]")  # the partial columns' names (module docstring)
_TYPES = b"walgate.partial"  # the Arrow schema metadata of partial results: their columns' TDengine types (JSON)


@dataclass(frozen=True)
class Split:
    """A query split in two: ``part`` runs on each node over its rows, ``final`` on the node asked over every node's
    ``part`` results (module docstring)."""

    part: ast.Select
    final: ast.Select

    def partials(self, precision: str, columns: Mapping[str, Column], tags: Collection[str], schema: pa.Schema,
                 tables: Iterable[pa.Table], cancel: Cancel | None = None) -> pa.Table:
        """:attr:`part` over a node's scanned rows (as :meth:`Query.run <walgate.storage.query.Query.run>` takes
        them): its partial results, named, with their TDengine types in the schema's metadata."""
        meta, table = Query(self.part, precision, 0, partial=True).run(columns, tags, schema, tables, cancel)
        table = table.rename_columns([name for name, _, _ in meta])
        return table.replace_schema_metadata({_TYPES: json.dumps(meta)})

    def answer(self, precision: str, partials: pa.Table,
               cancel: Cancel | None = None) -> tuple[list[tuple[str, str, int]], pa.Table]:
        """:attr:`final` over every node's :meth:`partials` (one table): the query's column_meta and rows."""
        if not is_partial(partials):
            raise InvalidValue("a node's part of a merged query is rows where partial aggregates were expected "
                               "(nodes of different versions?)")
        types = _declared(partials)
        if PART_TIME not in types:  # no INTERVAL: a timestamp column first, as a source has
            types = {PART_TIME: ColumnType("TIMESTAMP")} | types
            partials = partials.add_column(0, PART_TIME, pa.nulls(partials.num_rows, pa.timestamp("ms")))
        names = [PART_TIME] + [n for n in types if n != PART_TIME]
        columns = {n: Column(n, types[n]) for n in names}
        schema = pa.schema([pa.field(n, types[n].arrow(precision)) for n in names])
        try:
            rows = partials.select(names).cast(schema)
        except pa.ArrowException as exc:
            raise InvalidValue(f"a node's partial aggregates of a merged query are not of the types they declare: "
                               f"{exc}") from None
        rows = rows.append_column("tbname", pa.nulls(partials.num_rows, pa.string()))
        return Query(self.final, precision, 0, partial=True).run(columns, [], schema, [rows], cancel)


def _declared(partials: pa.Table) -> dict[str, ColumnType]:
    """The TDengine type of each column of ``partials`` (:meth:`Split.partials`: the schema's metadata, written by
    another node); InvalidValue unless it is JSON of one ``[name, type, size]`` per column, in their order, names
    distinct and of the partial columns' form (``_mk<i>``, ``_mp<j>``, ``_mws``, ``_mwe``, ``_mwd``: never ``tbname``,
    which the merge adds), each type one walgate knows."""
    try:
        meta = json.loads((partials.schema.metadata or {})[_TYPES])
    except ValueError:  # (UnicodeDecodeError is one)
        meta = None
    if not (isinstance(meta, list) and all(isinstance(m, list) and len(m) == 3 and isinstance(m[0], str)
                                           and m[1] in TYPE_NAMES and isinstance(m[2], int) for m in meta)
            and [m[0] for m in meta] == partials.column_names and len(set(partials.column_names)) == len(meta)
            and all(_PARTIAL_NAME.fullmatch(m[0]) for m in meta)):
        raise InvalidValue("a node's partial aggregates of a merged query do not declare their columns' types")
    return {name: ColumnType(t, size if t in ("VARCHAR", "NCHAR", "JSON") else None) for name, t, size in meta}


def _map(expr: ast.Expr, fn: Callable[[ast.Expr], ast.Expr | None]) -> ast.Expr:
    """``expr`` with each sub-expression for which ``fn`` answers a replacement replaced (outermost first)."""
    found = fn(expr)
    if found is not None:
        return found
    changes: dict[str, Any] = {}
    for f in fields(expr):
        value = getattr(expr, f.name)
        if isinstance(value, tuple) and value and all(isinstance(v, _EXPR_TYPES) for v in value):
            changes[f.name] = tuple(_map(v, fn) for v in value)
        elif isinstance(value, _EXPR_TYPES):
            changes[f.name] = _map(value, fn)
    return replace(expr, **changes) if changes else expr


def is_partial(table: pa.Table) -> bool:
    """Whether ``table`` is partial results (:meth:`Split.partials`), not rows."""
    return _TYPES in (table.schema.metadata or {})


def _aggregate(expr: ast.Expr) -> bool:
    return isinstance(expr, ast.Call) and expr.name in AGGREGATES


def split(select: ast.Select, columns: Mapping[str, Column]) -> Split | None:
    """``select`` split into partial aggregates (``columns``: the source's columns and tags by name), or None when
    it is not a grouped query whose merge is exact (module docstring): its rows are shipped then."""
    s = select
    items = [i for i in s.items if i.expr is not None]
    if (len(items) < len(s.items) or (s.fill is not None and s.fill.mode != "NONE")
            or (s.interval is not None and s.group_by)):  # (the last is refused: the query says why)
        return None
    exprs = [i.expr for i in items if i.expr is not None]
    exprs += ([s.having] if s.having is not None else []) + [o.expr for o in s.order_by]
    named = [*exprs, *s.group_by, *s.partition_by, *([s.where] if s.where is not None else [])]
    if any(isinstance(n, ast.Call) and n.name in PARTIAL_AGGREGATES for e in named for n in ast.walk(e)):
        return None  # a user's statement never runs the partial forms: shipped rows, refused as on one node (rv7 R7-3)
    calls = [n for e in exprs for n in ast.walk(e) if _aggregate(n)]
    if not calls and not s.group_by and s.interval is None:
        return None  # not grouped: a query of rows
    keys = list(s.partition_by) + list(s.group_by)
    aliases = {i.alias or column_name(i.expr) for i in items if i.expr is not None}
    partials: dict[ast.Expr, str] = {}  # a partial aggregate: its column
    part_items = [ast.SelectItem(k, f"_mk{i}") for i, k in enumerate(keys)]
    if s.interval is not None:
        part_items += [ast.SelectItem(ast.Col(name), column) for name, column in _WINDOW.items()]

    def partial(call: ast.Call) -> ast.Col:
        if call not in partials:
            partials[call] = f"_mp{len(partials)}"
            part_items.append(ast.SelectItem(call, partials[call]))
        return ast.Col(partials[call])

    def merged(call: ast.Call) -> ast.Expr | None:
        """The final form of an aggregate; None when its merge is not exact."""
        if any(_aggregate(n) for a in call.args for n in ast.walk(a)):
            return None
        if call.name in ("count", "min", "max"):
            return ast.Call("sum" if call.name == "count" else call.name, (partial(call),))
        if call.name in ("first", "last", "last_row") and len(call.args) == 1:  # each node's, with its timestamp
            return ast.Call(f"_{call.name}_of", (partial(call), partial(ast.Call(f"_{call.name}_ts", call.args))))
        if call.name not in ("sum", "avg", "spread") or len(call.args) != 1:
            return None
        arg = call.args[0]
        if call.name == "spread":  # one node's CAST(max AS DOUBLE) - CAST(min AS DOUBLE), from the exact max and min
            if not (isinstance(arg, ast.Col) and arg.name in columns and columns[arg.name].type.name in _SPREAD):
                return None
            return ast.Binary("-", *(ast.Cast(ast.Call(f, (partial(ast.Call(f, call.args)),)), _DOUBLE)
                                     for f in ("max", "min")))
        if not (isinstance(arg, ast.Col) and arg.name in columns and columns[arg.name].type.name in _SUMMED):
            return None
        total = ast.Call("sum", (partial(ast.Call("sum", call.args)),))
        if call.name == "sum":
            return total
        return ast.Binary("/", total, ast.Call("sum", (partial(ast.Call("count", call.args)),)))

    exact = True

    def final(expr: ast.Expr, order: bool = False) -> ast.Expr:
        def at(node: ast.Expr) -> ast.Expr | None:
            nonlocal exact
            if node in keys:
                return ast.Col(f"_mk{keys.index(node)}")
            if isinstance(node, ast.Call) and _aggregate(node):
                found = merged(node)
                exact = exact and found is not None
                return found or node
            if isinstance(node, ast.Col):
                if node.name in _WINDOW and s.interval is not None:
                    return ast.Col(_WINDOW[node.name])
                exact = exact and order and node.name in aliases
            return None
        return _map(expr, at)

    final_items = tuple(ast.SelectItem(final(i.expr), i.alias or column_name(i.expr)) for i in items
                        if i.expr is not None)

    def ordered(expr: ast.Expr) -> ast.Expr:
        """An ORDER BY term resolved as :meth:`Query._order <walgate.storage.query.Query._order>` resolves it: a
        position stays one; an output written the same or named so is that output's final expression (before a
        grouping key of that name); anything else is read from the partial columns."""
        if isinstance(expr, ast.Lit) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
            return expr
        for item, out in zip(items, final_items, strict=True):
            if item.expr == expr or (isinstance(expr, ast.Col) and out.alias == expr.name):
                assert out.expr is not None
                return out.expr
        return final(expr, order=True)

    having = final(s.having) if s.having is not None else None
    order_by = tuple(replace(o, expr=ordered(o.expr)) for o in s.order_by)
    if not exact:
        return None
    part = ast.Select(tuple(part_items), s.source, None, partition_by=tuple(keys) if s.interval else (),
                      interval=s.interval, group_by=() if s.interval else tuple(keys))
    window_keys = [ast.Col(c) for c in _WINDOW.values()] if s.interval is not None else []
    final_select = ast.Select(final_items, s.source, None, s.limit, s.offset,
                              partition_by=tuple(ast.Col(f"_mk{i}") for i in range(len(s.partition_by))),
                              group_by=tuple(ast.Col(f"_mk{i}") for i in range(len(s.partition_by), len(keys)))
                              + tuple(window_keys), having=having, order_by=order_by)
    return Split(part, final_select)
