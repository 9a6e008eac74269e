"""TDengine read queries (SELECT) over the Arrow rows of one table or supertable, executed by DuckDB.

A query runs in two stages:

1. **Scan** (the engine): the source's WAL entries are read with a
   :class:`~walgate.storage.topics.TopicEvaluator` built on :attr:`Query.where`, so WHERE filters rows vectorised
   with exactly the semantics of a topic's condition. :func:`fold_time` first turns ``now`` / ``now()`` /
   ``today()`` and ``time ± duration`` (``now - 1h``, ``'2018-10-03 14:38:05' + 10s``) into ticks of the database
   precision. A plain query (:attr:`Query.plain`: a select list without aggregates, WHERE, LIMIT) is projected by
   the same evaluator, as a topic's ``AS SELECT`` is, and needs nothing else.
2. **DuckDB** (:meth:`Query.run`): every other query gets the scanned rows (data columns, tags, ``tbname``) as one
   Arrow table in which timestamps are int64 ticks, and one SQL statement built from the AST: grouping (GROUP BY,
   PARTITION BY), time windows (INTERVAL with offset and SLIDING), aggregates, HAVING, FILL, ORDER BY,
   LIMIT / OFFSET. Nothing is evaluated row by row in Python.

TDengine semantics kept (its "Time-Series Extensions" and "Functions" chapters):

* Result types: COUNT → BIGINT; AVG, SPREAD, STDDEV → DOUBLE; SUM → BIGINT (signed integers), BIGINT UNSIGNED
  (unsigned) or DOUBLE (floats); MIN, MAX, FIRST, LAST, LAST_ROW → the argument's type; ``_wstart`` / ``_wend`` →
  TIMESTAMP, ``_wduration`` → BIGINT (ticks); tags and ``tbname`` (VARCHAR(192)) keep their types. Arithmetic:
  ``+ - *`` of integers BIGINT, otherwise DOUBLE; ``/`` and ``%`` DOUBLE, NULL for a zero divisor (a plain query
  keeps the topic evaluator's types, which are the same except that FLOAT with FLOAT or an integer stays FLOAT).
* Names: the alias, else the expression as written in lower case (``count(*)``, ``avg(current)``).
* FIRST / LAST ignore NULLs (the value at the smallest / largest timestamp among non-NULL values); LAST_ROW does not.
* Aggregates without GROUP BY / PARTITION BY / INTERVAL give one row even over no rows (COUNT 0, others NULL);
  grouped queries give a row per group that has rows.
* ``INTERVAL(i [, o]) [SLIDING(s)]``: windows ``[start, start + i)`` whose starts are ``o`` plus multiples of ``s``
  (default ``i``) since the epoch (UTC); a row belongs to every window covering it. ``SLIDING`` is at most ``i``
  and at least 1/100 of it, ``o`` less than ``i``. Output ordered by the partition keys, then ``_wstart``.
* ``FILL``: NONE (default) leaves windows without rows out; NULL, VALUE, PREV, NEXT and LINEAR add them, for
  each partition, between the windows of the query's time range: the bounds of ``ts`` in the top-level AND of
  the WHERE clause, else the first and last row. They fill the columns holding aggregates (VALUE: one value for
  all, or one per such column, converted to its type; PREV / NEXT: the nearest non-NULL value before / after;
  LINEAR: interpolated between them, NULL for non-numeric columns or at the ends); window pseudo-columns and
  partition keys take the window's and partition's values. At most :data:`MAX_FILL_ROWS` rows in all.
* ORDER BY takes an alias, a 1-based position or an expression; NULLs sort last ascending, first descending.
  With PARTITION BY, LIMIT / OFFSET apply to each partition; otherwise to the whole result.
* ``tbname`` as a partition key makes the tags usable in the select list (each subtable has one value).

Errors: clauses that cannot go together, unknown columns, wrong types and argument counts are ``InvalidValue``;
functions outside the supported set are ``Unsupported``; a failure inside DuckDB (an overflow) is ``InvalidValue``
with DuckDB's message; a FILL over too many windows is ``LimitExceeded``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, fields, replace
from typing import Any, get_args

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.cancel import Cancel
from walgate.storage.errors import InvalidValue, LimitExceeded, Unsupported
from walgate.storage.schema import Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.sql.parser import AGGREGATES
from walgate.storage.topics import expr_name
from walgate.storage.values import TICKS_PER_SECOND, parse_timestamp

__all__ = ["MAX_FILL_ROWS", "PARTIAL_AGGREGATES", "TBNAME_TYPE", "Query", "column_name", "fold_time", "plain"]

MAX_FILL_ROWS = 1_000_000
TBNAME_TYPE = ColumnType("VARCHAR", 192)
_MAX_WINDOWS_PER_ROW = 100  # SLIDING at least 1/100 of INTERVAL, as TDengine requires

_TICK_NS = {precision: 10**9 // tps for precision, tps in TICKS_PER_SECOND.items()}
_DAY_NS = 86_400 * 10**9
_WINDOW_COLUMNS = frozenset({"_wstart", "_wend", "_wduration"})
_EXPR_TYPES = get_args(ast.Expr)
_HIDDEN = "__wg_"  # prefix of the columns queries add (ticks, window start)
_SIGNED = {"TINYINT", "SMALLINT", "INT", "BIGINT", "BOOL"}
_UNSIGNED = {"TINYINT UNSIGNED", "SMALLINT UNSIGNED", "INT UNSIGNED", "BIGINT UNSIGNED"}
_FLOATS = {"FLOAT", "DOUBLE"}
_DUCK_TYPES = {
    "BOOL": "BOOLEAN", "TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INT": "INTEGER", "BIGINT": "BIGINT",
    "TINYINT UNSIGNED": "UTINYINT", "SMALLINT UNSIGNED": "USMALLINT", "INT UNSIGNED": "UINTEGER",
    "BIGINT UNSIGNED": "UBIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "VARCHAR": "VARCHAR", "NCHAR": "VARCHAR",
    "JSON": "VARCHAR", "TIMESTAMP": "BIGINT",
}
_BIGINT, _DOUBLE, _BOOL = ColumnType("BIGINT"), ColumnType("DOUBLE"), ColumnType("BOOL")
_COMPARISONS = {"=", "!=", "<", "<=", ">", ">="}
_SUPPORTED_AGGREGATES = {"count", "sum", "avg", "min", "max", "first", "last", "last_row", "spread", "stddev",
                         "stddev_pop"}
PARTIAL_AGGREGATES = frozenset({"_first_ts", "_last_ts", "_last_row_ts", "_first_of", "_last_of", "_last_row_of"})
"""Aggregates of the queries :mod:`walgate.storage.select_partial` makes, run only by a :class:`Query` made with
``partial=True`` (a statement naming one is refused as unsupported): ``_first_ts(x)`` / ``_last_ts(x)``, the
timestamp of FIRST(x) / LAST(x) (the least / greatest among rows where ``x`` is not NULL), ``_last_row_ts(x)``
that of LAST_ROW(x) (the greatest); ``_first_of(v, t)`` / ``_last_of(v, t)``, the non-NULL ``v`` of the least /
greatest ``t``, ``_last_row_of(v, t)`` the ``v`` (NULL too) of the greatest ``t``: each node's FIRST / LAST /
LAST_ROW merged by their timestamps."""
_STAR_NAME = re.compile(r"\b(count|first|last|last_row)\(\)")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _numeric(t: ColumnType) -> bool:
    return t.name in _SIGNED or t.name in _UNSIGNED or t.name in _FLOATS


def _integer(t: ColumnType) -> bool:
    return t.name in _SIGNED or t.name in _UNSIGNED


def _is_aggregate(expr: ast.Expr) -> bool:
    return any(isinstance(n, ast.Call) and (n.name in AGGREGATES or n.name in PARTIAL_AGGREGATES)
               for n in ast.walk(expr))


def plain(select: ast.Select) -> bool:
    """Whether ``select`` is a plain query (a select list without aggregates or window columns, WHERE, LIMIT),
    whose rows the scan's evaluator projects without DuckDB."""
    return not (select.partition_by or select.group_by or select.interval or select.having is not None
                or select.order_by or select.offset
                or any(_is_aggregate(i.expr) or _mentions_window(i.expr) for i in select.items if i.expr is not None))


def column_name(expr: ast.Expr) -> str:
    """TDengine's name of an un-aliased result column: the expression in lower case (``count(*)``)."""
    return _STAR_NAME.sub(r"\1(*)", expr_name(expr))


# ------------------------------------------------------------------ time folding


def fold_time(expr: ast.Expr, now: int, precision: str) -> ast.Expr:
    """``expr`` with ``now`` / ``now()`` / ``today()`` and ``time ± duration`` replaced by integer ticks.

    Raises InvalidValue for a duration anywhere else, or one finer than the precision."""
    folded = _fold(expr, now, precision)
    for node in ast.walk(folded):
        if isinstance(node, ast.Duration):
            raise InvalidValue("a duration (as in now - 1h) can only be added to or subtracted from now or a "
                               "timestamp")
    return folded


def _ticks(duration: ast.Duration, precision: str) -> int:
    tick = _TICK_NS[precision]
    if duration.ns % tick:
        raise InvalidValue(f"duration of {duration.ns} ns is finer than the database precision ({precision})")
    return duration.ns // tick


def _time_value(expr: ast.Expr, precision: str) -> int | None:
    """Ticks of a folded time literal, an integer (ticks) or a timestamp string, else None."""
    if isinstance(expr, ast.Lit) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.Lit) and isinstance(expr.value, str):
        return parse_timestamp(expr.value, precision)
    return None


def _fold(expr: ast.Expr, now: int, precision: str) -> ast.Expr:
    if (isinstance(expr, ast.Col) and expr.name == "now") or (
            isinstance(expr, ast.Call) and expr.name in ("now", "today") and not expr.args):
        if isinstance(expr, ast.Call) and expr.name == "today":
            day = _DAY_NS // _TICK_NS[precision]
            return ast.Lit(now - now % day)
        return ast.Lit(now)
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-"):
        left, right = _fold(expr.left, now, precision), _fold(expr.right, now, precision)
        if isinstance(right, ast.Duration) and (base := _time_value(left, precision)) is not None:
            step = _ticks(right, precision)
            return ast.Lit(base + step if expr.op == "+" else base - step)
        if isinstance(left, ast.Duration) and expr.op == "+" and (base := _time_value(right, precision)) is not None:
            return ast.Lit(base + _ticks(left, precision))
        return ast.Binary(expr.op, left, right)
    changes: dict[str, Any] = {}
    for f in fields(expr):
        value = getattr(expr, f.name)
        if isinstance(value, tuple) and value and all(isinstance(v, _EXPR_TYPES) for v in value):
            changes[f.name] = tuple(_fold(v, now, precision) for v in value)
        elif isinstance(value, _EXPR_TYPES):
            changes[f.name] = _fold(value, now, precision)
    return replace(expr, **changes) if changes else expr


def _time_bounds(where: ast.Expr | None, ts: str, precision: str) -> tuple[int | None, int | None]:
    """The [low, high] ticks the top-level AND of ``where`` puts on column ``ts`` (None: unbounded)."""
    low: int | None = None
    high: int | None = None
    stack = [where] if where is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Binary) and node.op == "AND":
            stack += [node.left, node.right]
            continue
        bounds: list[tuple[str, ast.Expr]] = []
        if isinstance(node, ast.Binary) and node.op in _COMPARISONS - {"!="}:
            flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
            if node.left == ast.Col(ts):
                bounds.append((node.op, node.right))
            elif node.right == ast.Col(ts):
                bounds.append((flipped[node.op], node.left))
        elif isinstance(node, ast.Between) and not node.negated and node.expr == ast.Col(ts):
            bounds += [(">=", node.low), ("<=", node.high)]
        for op, value in bounds:
            literal = value.value if isinstance(value, ast.Lit) else None
            if isinstance(literal, bool) or not isinstance(literal, (int, str)):
                continue
            ticks = literal if isinstance(literal, int) else parse_timestamp(literal, precision)
            if op in (">", ">=", "="):
                ticks += op == ">"
                low = ticks if low is None else max(low, ticks)
            if op in ("<", "<=", "="):
                ticks -= op == "<"
                high = ticks if high is None else min(high, ticks)
    return low, high


# ---------------------------------------------------------------- translation


@dataclass(frozen=True)
class _Window:
    length: int  # ticks
    offset: int
    sliding: int


class _Translator:
    """AST → DuckDB SQL text plus the TDengine type of the value.

    Modes: ``row`` (over the scanned rows), ``group`` (an aggregate's surroundings inside the GROUP BY: keys and
    window columns, aggregates over rows) and ``final`` (over the grouped rows: keys as ``__k<i>``, ``__wg_w``).
    ``partial``: the :data:`PARTIAL_AGGREGATES` are translated too."""

    def __init__(self, types: Mapping[str, ColumnType], precision: str, keys: list[ast.Expr],
                 window: _Window | None, partial: bool = False) -> None:
        self.types, self.precision, self.keys, self.window = types, precision, keys, window
        self.partial = partial
        self.key_sql: list[str] = []
        self.key_types: list[ColumnType] = []
        for key in keys:
            if _is_aggregate(key):
                raise InvalidValue("aggregate functions are not allowed in GROUP BY / PARTITION BY")
            sql, type_ = self.sql(key, "row")
            self.key_sql.append(sql)
            self.key_types.append(type_)

    def sql(self, expr: ast.Expr, mode: str) -> tuple[str, ColumnType]:
        if mode != "row" and expr in self.keys:
            index = self.keys.index(expr)
            return (f'"__k{index}"' if mode == "final" else self.key_sql[index]), self.key_types[index]
        if isinstance(expr, ast.Col):
            return self._column(expr.name, mode)
        if isinstance(expr, ast.Lit):
            return _literal(expr.value)
        if isinstance(expr, ast.Duration):
            raise InvalidValue("a duration (as in now - 1h) can only be added to or subtracted from now or a "
                               "timestamp")
        if isinstance(expr, ast.Unary):
            inner, t = self.sql(expr.operand, mode)
            if expr.op == "NOT":
                return f"(NOT {inner})", _BOOL
            if not _numeric(t):
                raise InvalidValue(f"operator - needs a number, got {t}")
            kind = _BIGINT if _integer(t) else _DOUBLE
            return f"(- CAST({inner} AS {kind.name}))", kind
        if isinstance(expr, ast.Binary):
            return self._binary(expr, mode)
        if isinstance(expr, ast.Call):
            return self._call(expr, mode)
        if isinstance(expr, ast.Cast):
            return self._cast(expr, mode)
        if isinstance(expr, ast.IsNull):
            inner, _ = self.sql(expr.expr, mode)
            return f"({inner} IS {'NOT ' if expr.negated else ''}NULL)", _BOOL
        if isinstance(expr, ast.Between):
            value, t = self.sql(expr.expr, mode)
            low = self._operand(expr.low, t, mode)
            high = self._operand(expr.high, t, mode)
            return f"({value} {'NOT ' if expr.negated else ''}BETWEEN {low} AND {high})", _BOOL
        if isinstance(expr, ast.InList):
            value, t = self.sql(expr.expr, mode)
            if not all(isinstance(v, ast.Lit) for v in expr.values):
                raise Unsupported("IN (...) accepts only literal values")
            values = ", ".join(self._operand(v, t, mode) for v in expr.values)
            return f"({value} {'NOT ' if expr.negated else ''}IN ({values}))", _BOOL
        if isinstance(expr, ast.Like):
            value, t = self.sql(expr.expr, mode)
            if not t.is_string:
                raise InvalidValue(f"LIKE needs a string, got {t}")
            pattern = _literal(expr.pattern)[0]
            return f"({value} {'NOT ' if expr.negated else ''}LIKE {pattern} ESCAPE '\\')", _BOOL
        raise Unsupported(f"{type(expr).__name__} is not supported in queries")  # unreachable: Expr is closed

    def _column(self, name: str, mode: str) -> tuple[str, ColumnType]:
        if name in _WINDOW_COLUMNS:
            if self.window is None or mode == "row":
                raise InvalidValue(f"{name} is only valid in the select list of a query with INTERVAL")
            if name == "_wstart":
                return '"__wg_w"', ColumnType("TIMESTAMP")
            if name == "_wend":
                return f'("__wg_w" + {self.window.length})', ColumnType("TIMESTAMP")
            return f"CAST({self.window.length} AS BIGINT)", _BIGINT
        if name not in self.types:
            raise InvalidValue(f"Invalid column name: {name}")
        if mode != "row":
            raise InvalidValue(f"column {name} must be in GROUP BY / PARTITION BY or inside an aggregate function")
        return _ident(name), self.types[name]

    def _operand(self, expr: ast.Expr, other: ColumnType, mode: str) -> str:
        """``expr`` as the operand of a comparison with a value of type ``other``: literals take its type."""
        if isinstance(expr, ast.Lit) and isinstance(expr.value, str) and not isinstance(expr.value, bool):
            if other.name == "TIMESTAMP":
                return f"CAST({parse_timestamp(expr.value, self.precision)} AS BIGINT)"
            if _numeric(other):
                try:
                    return _literal(float(expr.value))[0]
                except ValueError:
                    raise InvalidValue(f"cannot compare {other} with {expr.value!r}") from None
        return self.sql(expr, mode)[0]

    def _binary(self, expr: ast.Binary, mode: str) -> tuple[str, ColumnType]:
        if expr.op in ("AND", "OR"):
            return f"({self.sql(expr.left, mode)[0]} {expr.op} {self.sql(expr.right, mode)[0]})", _BOOL
        if expr.op in _COMPARISONS:
            left, lt = self.sql(expr.left, mode) if not _is_string_lit(expr.left) else ("", None)
            right, rt = self.sql(expr.right, mode) if not _is_string_lit(expr.right) else ("", None)
            if lt is None and rt is not None:
                left = self._operand(expr.left, rt, mode)
            elif rt is None and lt is not None:
                right = self._operand(expr.right, lt, mode)
            elif lt is None:
                left, right = self.sql(expr.left, mode)[0], self.sql(expr.right, mode)[0]
            return f"({left} {expr.op} {right})", _BOOL
        left, lt = self.sql(expr.left, mode)
        right, rt = self.sql(expr.right, mode)
        if not (_numeric(lt) and _numeric(rt)):
            raise InvalidValue(f"operator {expr.op} needs numbers, got {lt} and {rt}")
        if expr.op == "/":
            return f"(CAST({left} AS DOUBLE) / NULLIF(CAST({right} AS DOUBLE), 0))", _DOUBLE
        if expr.op == "%":
            return f"(CAST({left} AS DOUBLE) % NULLIF(CAST({right} AS DOUBLE), 0))", _DOUBLE
        kind = "BIGINT" if _integer(lt) and _integer(rt) else "DOUBLE"
        return f"(CAST({left} AS {kind}) {expr.op} CAST({right} AS {kind}))", ColumnType(kind)

    def _call(self, expr: ast.Call, mode: str) -> tuple[str, ColumnType]:
        name, args = expr.name, expr.args
        if name in AGGREGATES or name in PARTIAL_AGGREGATES:
            if mode != "group":
                where = "inside another aggregate" if mode == "row" else "here"
                raise InvalidValue(f"aggregate function {name}() is not allowed {where}")
            return self._aggregate(name, args)
        arity = {"abs": (1, 1), "ceil": (1, 1), "floor": (1, 1), "round": (1, 2), "sqrt": (1, 1), "pow": (2, 2),
                 "log": (1, 2), "lower": (1, 1), "upper": (1, 1), "length": (1, 1), "char_length": (1, 1),
                 "concat": (2, 8)}.get(name)
        if arity is None:
            raise Unsupported(f"function {name}() is not supported in queries")
        if not arity[0] <= len(args) <= arity[1]:
            raise InvalidValue(f"function {name}() takes {arity[0]}..{arity[1]} arguments, got {len(args)}")
        parts = [self.sql(a, mode) for a in args]
        sqls = [p[0] for p in parts]
        first = parts[0][1]
        if name in ("lower", "upper", "length", "char_length", "concat"):
            if not all(p[1].is_string for p in parts):
                raise InvalidValue(f"function {name}() needs strings")
            if name == "concat":
                return "(" + " || ".join(sqls) + ")", ColumnType("VARCHAR", sum(p[1].size for p in parts))
            if name in ("lower", "upper"):
                return f"{name}({sqls[0]})", first
            return f"{'strlen' if name == 'length' else 'length'}({sqls[0]})", _BIGINT
        if not all(_numeric(p[1]) for p in parts):
            raise InvalidValue(f"function {name}() needs numbers")
        doubles = [f"CAST({s} AS DOUBLE)" for s in sqls]
        if name in ("abs", "ceil", "floor", "round"):
            extra = f", CAST({sqls[1]} AS INTEGER)" if len(sqls) == 2 else ""
            return f"CAST({name}({sqls[0]}{extra}) AS {_DUCK_TYPES[first.name]})", first
        if name == "sqrt":
            return f"sqrt({doubles[0]})", _DOUBLE
        if name == "pow":
            return f"power({doubles[0]}, {doubles[1]})", _DOUBLE
        return (f"(ln({doubles[0]}) / ln({doubles[1]}))" if len(doubles) == 2 else f"ln({doubles[0]})"), _DOUBLE

    def _aggregate(self, name: str, args: tuple[ast.Expr, ...]) -> tuple[str, ColumnType]:
        if self.partial and name in PARTIAL_AGGREGATES:
            return self._partial(name, args)
        if name not in _SUPPORTED_AGGREGATES:
            raise Unsupported(f"function {name}() is not supported in queries")
        if name == "count" and not args:
            return "count(*)", _BIGINT
        if len(args) != 1:
            raise InvalidValue(f"function {name}() takes one argument, got {len(args)}")
        arg, t = self.sql(args[0], "row")
        if name == "count":
            return f"count({arg})", _BIGINT
        if name in ("first", "last"):
            fn = "arg_min" if name == "first" else "arg_max"
            return f'{fn}({arg}, "__wg_ticks") FILTER (WHERE {arg} IS NOT NULL)', t
        if name == "last_row":
            return f'arg_max_null({arg}, "__wg_ticks")', t
        if name in ("min", "max"):
            return f"{name}({arg})", t
        if not (_numeric(t) or (name == "spread" and t.name == "TIMESTAMP")):
            raise InvalidValue(f"function {name}() needs a number, got {t}")
        if name == "sum":
            if t.name in _FLOATS:
                return f"CAST(sum({arg}) AS DOUBLE)", _DOUBLE
            kind = "BIGINT UNSIGNED" if t.name in _UNSIGNED else "BIGINT"
            return f"CAST(sum({arg}) AS {_DUCK_TYPES[kind]})", ColumnType(kind)
        if name == "avg":
            return f"avg(CAST({arg} AS DOUBLE))", _DOUBLE
        if name == "spread":
            return f"(CAST(max({arg}) AS DOUBLE) - CAST(min({arg}) AS DOUBLE))", _DOUBLE
        return f"stddev_pop(CAST({arg} AS DOUBLE))", _DOUBLE

    def _partial(self, name: str, args: tuple[ast.Expr, ...]) -> tuple[str, ColumnType]:
        """One of the :data:`PARTIAL_AGGREGATES` (their arguments as select_partial writes them)."""
        value, t = self.sql(args[0], "row")
        if name.endswith("_ts"):
            kept = "" if name == "_last_row_ts" else f" FILTER (WHERE {value} IS NOT NULL)"
            return f'{"min" if name == "_first_ts" else "max"}("__wg_ticks"){kept}', ColumnType("TIMESTAMP")
        by, _ = self.sql(args[1], "row")
        if name == "_last_row_of":
            return f"arg_max_null({value}, {by})", t
        fn = "arg_min" if name == "_first_of" else "arg_max"
        return f"{fn}({value}, {by}) FILTER (WHERE {value} IS NOT NULL)", t

    def _cast(self, expr: ast.Cast, mode: str) -> tuple[str, ColumnType]:
        inner, t = self.sql(expr.expr, mode)
        target = ColumnType(expr.type.name, expr.type.length)
        if target.name == "TIMESTAMP" or target.name not in _DUCK_TYPES:
            raise Unsupported(f"CAST to {target.name} is not supported in this query")
        if _integer(target) and t.name in _FLOATS:
            inner = f"trunc({inner})"
        return f"TRY_CAST({inner} AS {_DUCK_TYPES[target.name]})", target


def _is_string_lit(expr: ast.Expr) -> bool:
    return isinstance(expr, ast.Lit) and isinstance(expr.value, str)


def _literal(value: int | float | str | bool | None) -> tuple[str, ColumnType]:
    if value is None:
        return "NULL", _BIGINT
    if isinstance(value, bool):
        return ("TRUE" if value else "FALSE"), _BOOL
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return f"CAST({value} AS BIGINT)", _BIGINT
        if 0 <= value < 2**64:
            return f"CAST({value} AS UBIGINT)", ColumnType("BIGINT UNSIGNED")
        raise InvalidValue(f"integer {value} is out of range")
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)", _DOUBLE
    return "'" + value.replace("'", "''") + "'", ColumnType("VARCHAR", max(len(value.encode()), 1))


# ---------------------------------------------------------------------- query


@dataclass(frozen=True)
class _Output:
    name: str
    type: ColumnType
    sql: str  # over the final relation
    fillable: bool = False  # holds an aggregate (FILL fills it)


class Query:
    """One SELECT, bound to its database's precision and the wall-clock time it started (``now_ns``); ``partial``:
    one of :mod:`walgate.storage.select_partial`'s, which may use the :data:`PARTIAL_AGGREGATES`."""

    def __init__(self, select: ast.Select, precision: str, now_ns: int, partial: bool = False) -> None:
        self.select, self.precision, self.partial = select, precision, partial
        now = now_ns // _TICK_NS[precision]
        self.where = fold_time(select.where, now, precision) if select.where is not None else None
        self.plain = plain(select)
        if self.plain:
            for item in select.items:
                if item.expr is not None:
                    fold_time(item.expr, now, precision)  # refuses durations before the evaluator sees them

    def run(self, columns: Mapping[str, Column], tags: Collection[str], schema: pa.Schema,
            tables: Iterable[pa.Table], cancel: Cancel | None = None) -> tuple[list[tuple[str, str, int]], pa.Table]:
        """Execute the query over the scanned rows (``tables``: ``schema`` plus ``tbname``); (column_meta, rows).

        ``columns`` are the source's data columns and tags by name (``tags`` names the tags), ``schema`` their
        Arrow schema, data columns first (the first is the timestamp). ``cancel`` interrupts DuckDB
        (:class:`~walgate.storage.errors.QueryCancelled`)."""
        _, src = self._source(schema, tables)
        types = {name: c.type for name, c in columns.items()} | {"tbname": TBNAME_TYPE}
        result, outputs = self._duckdb(src, cancel, lambda con: self._plan(types, schema.names, tags, src, con))
        arrays = []
        for i, out in enumerate(outputs):
            try:
                arrays.append(pc.cast(result.column(i), out.type.arrow(self.precision)))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidValue(f"query failed: column {out.name}: {exc}") from None
        table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(outputs))])
        return [(o.name, o.type.name, o.type.size) for o in outputs], table

    def rows_needed(self) -> int | None:
        """How many of its first rows (in the query's ORDER BY) a part of the scanned rows must keep for the query
        over all parts to answer as over all rows at once: OFFSET + LIMIT for a query of rows (no aggregate, window,
        grouping or HAVING) with a LIMIT and without PARTITION BY; None (every row) otherwise."""
        s = self.select
        if (s.limit is None or s.partition_by or s.group_by or s.interval or s.having is not None
                or any(_is_aggregate(i.expr) for i in s.items if i.expr is not None)):
            return None
        return s.offset + s.limit

    def cut(self, columns: Mapping[str, Column], schema: pa.Schema, tables: Iterable[pa.Table],
            cancel: Cancel | None = None) -> tuple[pa.Table, pa.Array | None]:
        """The scanned rows ``tables`` (as :meth:`run` takes them) cut to their first :meth:`rows_needed` in the
        query's ORDER BY (the first scanned without one): a node's part of a query merged across nodes
        (:mod:`walgate.storage.select_merge`). The rows kept, as one table of ``schema`` plus ``tbname``, and their
        positions among all (None: all of them, in order)."""
        rows, src = self._source(schema, tables)
        needed = self.rows_needed()
        if needed is None or rows.num_rows <= needed:
            return rows, None
        if not self.select.order_by:
            positions = pa.array(range(needed), pa.int64())
            return rows.take(positions), positions
        types = {name: c.type for name, c in columns.items()} | {"tbname": TBNAME_TYPE}
        numbered = src.append_column("__wg_row", pa.array(range(src.num_rows), pa.int64()))

        def plan(_: duckdb.DuckDBPyConnection) -> tuple[str, list[_Output]]:
            tr = _Translator(types, self.precision, [], None)
            items = self._items(schema.names)
            outputs = []
            for expr, alias in items:
                sql, t = tr.sql(expr, "row")
                outputs.append(_Output(alias or column_name(expr), t, sql))
            order = ", ".join(self._order(tr, items, outputs, "row"))
            return f'SELECT "__wg_row" FROM src ORDER BY {order} LIMIT {needed}', []

        picked, _ = self._duckdb(numbered, cancel, plan)
        positions = picked.column(0).combine_chunks()
        return rows.take(positions), positions

    def _source(self, schema: pa.Schema, tables: Iterable[pa.Table]) -> tuple[pa.Table, pa.Table]:
        """The scanned rows as one table of ``schema`` plus ``tbname``, and DuckDB's source table ``src``: those
        rows, timestamps as int64 ticks, and the timestamp's ticks again as ``__wg_ticks``."""
        full = pa.schema(list(schema) + [pa.field("tbname", pa.string())])
        if reserved := [name for name in full.names if name.startswith(_HIDDEN)]:
            raise InvalidValue(f"column {reserved[0]}: names starting with {_HIDDEN} are reserved in queries")
        parts = [t.select(full.names).cast(full) for t in tables]
        rows = pa.concat_tables(parts) if parts else full.empty_table()
        ticks = {f.name: pc.cast(rows.column(f.name), pa.int64()) if pa.types.is_timestamp(f.type)
                 else rows.column(f.name) for f in full}
        ticks["__wg_ticks"] = ticks[schema.names[0]]
        return rows, pa.table(ticks)

    @staticmethod
    def _duckdb(src: pa.Table, cancel: Cancel | None,
                plan: Callable[[duckdb.DuckDBPyConnection], tuple[str, list[_Output]]]
                ) -> tuple[pa.Table, list[_Output]]:
        """The statement ``plan`` makes run by DuckDB over ``src``: its rows and ``plan``'s outputs. ``cancel``
        interrupts it; DuckDB's failure is InvalidValue."""
        con = duckdb.connect(config={"threads": 1})
        try:
            with cancel.interrupting(con.interrupt) if cancel is not None else nullcontext():
                if cancel is not None:
                    cancel.check()  # an interrupt only stops a statement that is running
                con.register("src", src)
                sql, outputs = plan(con)
                if cancel is not None:
                    cancel.check()
                return con.sql(sql).to_arrow_table(), outputs
        except duckdb.Error as exc:
            if cancel is not None:
                cancel.check()  # an interrupt is not the query's failure
            raise InvalidValue(f"query failed: {str(exc).splitlines()[0]}") from None
        finally:
            con.close()

    # -------------------------------------------------------------- planning

    def _window(self) -> _Window | None:
        interval = self.select.interval
        if interval is None:
            return None
        length = _ticks(ast.Duration(interval.length_ns), self.precision)
        offset = _ticks(ast.Duration(interval.offset_ns), self.precision)
        sliding = _ticks(ast.Duration(interval.sliding_ns), self.precision) if interval.sliding_ns else length
        if length <= 0 or sliding <= 0:
            raise InvalidValue("INTERVAL and SLIDING must be positive")
        if sliding > length:
            raise InvalidValue("SLIDING must not be larger than INTERVAL")
        if -(-length // sliding) > _MAX_WINDOWS_PER_ROW:
            raise InvalidValue("SLIDING must be at least 1/100 of INTERVAL")
        if offset >= length:
            raise InvalidValue("the INTERVAL offset must be smaller than the interval")
        return _Window(length, offset, sliding)

    def _items(self, names: list[str]) -> list[tuple[ast.Expr, str | None]]:
        """The select list as (expression, alias), ``*`` expanded to the columns ``names``."""
        items: list[tuple[ast.Expr, str | None]] = []
        for item in self.select.items:
            if item.expr is None:
                items += [(ast.Col(n), None) for n in names]
            else:
                items.append((item.expr, item.alias))
        return items

    def _plan(self, types: Mapping[str, ColumnType], names: list[str], tags: Collection[str],
              src: pa.Table, con: duckdb.DuckDBPyConnection) -> tuple[str, list[_Output]]:
        s = self.select
        window = self._window()
        items = self._items(names)
        grouped = bool(s.group_by or window or any(_is_aggregate(e) for e, _ in items)
                       or (s.having is not None and _is_aggregate(s.having)))
        if s.group_by and window:
            raise InvalidValue("INTERVAL cannot be combined with GROUP BY: use PARTITION BY")
        if s.having is not None and not grouped:
            raise InvalidValue("HAVING needs GROUP BY, PARTITION BY with aggregates, or INTERVAL")
        keys = list(s.partition_by) + list(s.group_by)
        partitions = len(s.partition_by)
        if grouped and ast.Col("tbname") in keys:  # tags are constant per subtable
            mentioned = {n.name for e, _ in items for n in ast.walk(e) if isinstance(n, ast.Col)}
            keys += [ast.Col(t) for t in tags if t in mentioned and ast.Col(t) not in keys]
        translator = _Translator(types, self.precision, keys, window, self.partial)
        if grouped:
            return self._grouped(translator, items, partitions, window, src, con)
        return self._rows(translator, items, partitions)

    def _rows(self, tr: _Translator, items: list[tuple[ast.Expr, str | None]], partitions: int
              ) -> tuple[str, list[_Output]]:
        outputs = []
        for expr, alias in items:
            sql, t = tr.sql(expr, "row")
            outputs.append(_Output(alias or column_name(expr), t, sql))
        order = self._order(tr, items, outputs, "row")
        select = ", ".join(f"{o.sql} AS \"__o{i}\"" for i, o in enumerate(outputs))
        text = f"SELECT {select} FROM src"
        key_sql = tr.key_sql[:partitions]
        text += self._limit(key_sql, order or key_sql or ['"__wg_ticks"'], order or key_sql)
        return text, outputs

    def _grouped(self, tr: _Translator, items: list[tuple[ast.Expr, str | None]], partitions: int,
                 window: _Window | None, src: pa.Table, con: duckdb.DuckDBPyConnection) -> tuple[str, list[_Output]]:
        s = self.select
        source = "src"
        with_parts = []
        if window is not None:
            w, off = window.sliding, window.offset
            start = f'("__wg_ticks" - ((("__wg_ticks" - {off}) % {w} + {w}) % {w}))'
            copies = -(-window.length // w)
            if copies > 1:
                with_parts.append(
                    f'rows AS (SELECT * FROM (SELECT src.*, {start} - r."__wg_r" * {w} AS "__wg_w" FROM src, '
                    f'range(0, {copies}) AS r("__wg_r")) WHERE "__wg_w" + {window.length} > "__wg_ticks")')
            else:
                with_parts.append(f'rows AS (SELECT src.*, {start} AS "__wg_w" FROM src)')
            source = "rows"
        group_cols = [f'{k} AS "__k{i}"' for i, k in enumerate(tr.key_sql)] + (['"__wg_w"'] if window else [])
        aggregates: list[str] = []
        outputs: list[_Output] = []
        for expr, alias in items:
            name = alias or column_name(expr)
            if _is_aggregate(expr):
                sql, t = tr.sql(expr, "group")
                aggregates.append(f"CAST({sql} AS {_DUCK_TYPES[t.name]}) AS \"__c{len(aggregates)}\"")
                outputs.append(_Output(name, t, f'"__c{len(aggregates) - 1}"', fillable=True))
            else:
                sql, t = tr.sql(expr, "final")
                outputs.append(_Output(name, t, sql))
        group_by = tr.key_sql + (['"__wg_w"'] if window else [])
        having = f" HAVING {tr.sql(s.having, 'group')[0]}" if s.having is not None else ""
        select = ", ".join(group_cols + aggregates) or "count(*) AS \"__none\""
        agg = f"SELECT {select} FROM {source}" + (f" GROUP BY {', '.join(group_by)}" if group_by else "") + having
        with_parts.append(f"agg AS ({agg})")
        final = "agg"
        if window is not None and s.fill is not None and s.fill.mode != "NONE":
            final = "filled"
            with_parts += self._fill_parts(window, tr.key_sql, len(aggregates), src, con)
            outputs = self._fill_outputs(outputs, len(tr.key_sql))
        order = self._order(tr, items, outputs, "final")
        default = [f'"__k{i}"' for i in range(len(tr.key_sql))] + (['"__wg_w"'] if window else [])
        select_list = ", ".join(f"{o.sql} AS \"__o{i}\"" for i, o in enumerate(outputs))
        text = f"WITH {', '.join(with_parts)} SELECT {select_list} FROM {final}"
        partition_cols = [f'"__k{i}"' for i in range(partitions)]
        text += self._limit(partition_cols, order or default or ["1"], order or default)
        return text, outputs

    def _fill_parts(self, window: _Window, key_sql: list[str], naggs: int, src: pa.Table,
                    con: duckdb.DuckDBPyConnection) -> list[str]:
        """CTEs ``grid`` (every window of the time range, per partition) and ``filled`` (grid LEFT JOIN agg)."""
        s = self.select
        ticks = src.column("__wg_ticks")
        low, high = _time_bounds(self.where, src.column_names[0], self.precision)
        if len(ticks) == 0:
            low = high = 0  # agg is empty: the grid joins nothing
        else:
            bounds = pc.min_max(ticks).as_py()
            low = bounds["min"] if low is None else low
            high = bounds["max"] if high is None else high
        w, length = window.sliding, window.length

        def align(t: int) -> int:
            return t - ((t - window.offset) % w)

        first = align(low) - (-(-length // w) - 1) * w
        while first + length <= low:
            first += w
        last = align(high)
        count = (last - first) // w + 1 if last >= first else 0
        keys = [f'"__k{i}"' for i in range(len(key_sql))]
        if count and key_sql:
            distinct = f"SELECT count(*) FROM (SELECT DISTINCT {', '.join(key_sql)} FROM src)"
            [(partitions,)] = con.sql(distinct).fetchall()
            count *= partitions
        if count > MAX_FILL_ROWS:
            raise LimitExceeded(f"FILL would produce {count} rows: the limit is {MAX_FILL_ROWS} (narrow the time "
                                "range in WHERE)")
        if s.fill is not None and s.fill.mode == "VALUE" and len(s.fill.values) not in (1, naggs):
            raise InvalidValue(f"FILL(VALUE, ...) needs one value or one per aggregate column ({naggs}), "
                               f"got {len(s.fill.values)}")
        part_keys = f"SELECT DISTINCT {', '.join(keys)} FROM agg" if keys else "SELECT 1 AS \"__one\" FROM agg LIMIT 1"
        grid = (f'grid AS (SELECT p.*, g."__wg_w" FROM ({part_keys}) AS p, '
                f'range({first}, {last + 1}, {w}) AS g("__wg_w"))' if count else "grid AS (SELECT * FROM agg WHERE FALSE)")
        join = " AND ".join(['grid."__wg_w" = agg."__wg_w"'] + [f"grid.{k} IS NOT DISTINCT FROM agg.{k}" for k in keys])
        cols = ", ".join([f"grid.{k}" for k in keys] + ['grid."__wg_w"'] + [f'agg."__c{i}"' for i in range(naggs)]
                         + ['agg."__wg_w" IS NOT NULL AS "__present"'])
        return [grid, f"filled AS (SELECT {cols} FROM grid LEFT JOIN agg ON {join})"]

    def _fill_outputs(self, outputs: list[_Output], nkeys: int) -> list[_Output]:
        fill = self.select.fill
        assert fill is not None
        partition = "PARTITION BY " + ", ".join(f'"__k{i}"' for i in range(nkeys)) + " " if nkeys else ""
        over = partition + 'ORDER BY "__wg_w"'
        before = f"OVER ({over} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
        after = f"OVER ({over} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)"
        filled = []
        index = 0
        for out in outputs:
            if not out.fillable:
                filled.append(out)
                continue
            c, duck = out.sql, _DUCK_TYPES[out.type.name]
            if fill.mode == "NULL":
                value = c
            elif fill.mode == "VALUE":
                raw = fill.values[index if len(fill.values) > 1 else 0]
                value = f'CASE WHEN "__present" THEN {c} ELSE {_fill_value(raw, out.type)} END'
            elif fill.mode == "PREV":
                value = f'CASE WHEN "__present" THEN {c} ELSE last_value({c} IGNORE NULLS) {before} END'
            elif fill.mode == "NEXT":
                value = f'CASE WHEN "__present" THEN {c} ELSE first_value({c} IGNORE NULLS) {after} END'
            elif _numeric(out.type) or out.type.name == "TIMESTAMP":  # LINEAR
                p, n = f"last_value({c} IGNORE NULLS) {before}", f"first_value({c} IGNORE NULLS) {after}"
                at = f'CASE WHEN {c} IS NOT NULL THEN "__wg_w" END'
                pw, nw = f"last_value({at} IGNORE NULLS) {before}", f"first_value({at} IGNORE NULLS) {after}"
                line = (f'(CAST({p} AS DOUBLE) + (CAST({n} AS DOUBLE) - CAST({p} AS DOUBLE)) * ("__wg_w" - {pw}) '
                        f"/ NULLIF({nw} - {pw}, 0))")
                if _integer(out.type) or out.type.name == "TIMESTAMP":
                    line = f"trunc({line})"
                value = f'CASE WHEN "__present" THEN {c} ELSE CAST({line} AS {duck}) END'
            else:
                value = f'CASE WHEN "__present" THEN {c} END'
            filled.append(replace(out, sql=value))
            index += 1
        return filled

    def _order(self, tr: _Translator, items: list[tuple[ast.Expr, str | None]], outputs: list[_Output],
               mode: str) -> list[str]:
        """ORDER BY terms: an output named or written the same, a 1-based position, or an expression."""
        order = []
        for term in self.select.order_by:
            sql = None
            expr = term.expr
            if isinstance(expr, ast.Lit) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
                if not 1 <= expr.value <= len(outputs):
                    raise InvalidValue(f"ORDER BY position {expr.value} is not in the select list")
                sql = outputs[expr.value - 1].sql
            else:
                for (item, _), out in zip(items, outputs):
                    if item == expr or (isinstance(expr, ast.Col) and out.name == expr.name):
                        sql = out.sql
                        break
            if sql is None:
                if _is_aggregate(expr):
                    raise InvalidValue("ORDER BY an aggregate needs it in the select list")
                sql = tr.sql(expr, mode)[0]
            order.append(f"{sql} {'DESC NULLS FIRST' if term.descending else 'ASC NULLS LAST'}")
        return order

    def _limit(self, partition: list[str], within: list[str], order: list[str]) -> str:
        """QUALIFY (LIMIT per partition), ORDER BY and LIMIT / OFFSET clauses."""
        s = self.select
        text = ""
        if partition and (s.limit is not None or s.offset):
            number = f"row_number() OVER (PARTITION BY {', '.join(partition)} ORDER BY {', '.join(within)})"
            text += f" QUALIFY {number} > {s.offset}"
            if s.limit is not None:
                text += f" AND {number} <= {s.offset + s.limit}"
        if order:
            text += f" ORDER BY {', '.join(order)}"
        if not partition:
            if s.limit is not None:
                text += f" LIMIT {s.limit}"
            if s.offset:
                text += f" OFFSET {s.offset}"
        return text


def _mentions_window(expr: ast.Expr) -> bool:
    return any(isinstance(n, ast.Col) and n.name in _WINDOW_COLUMNS for n in ast.walk(expr))


def _fill_value(value: int | float | str | bool | None, t: ColumnType) -> str:
    """A FILL(VALUE, ...) value as a literal of the column's type (1.7 → 1 for an integer column)."""
    if value is None:
        return "NULL"
    try:
        if _integer(t) or t.name == "TIMESTAMP":
            converted: Any = int(float(value)) if not isinstance(value, bool) else int(value)
        elif t.name in _FLOATS:
            converted = float(value)
        elif t.is_string:
            converted = str(value)
        else:
            converted = value
    except (ValueError, OverflowError):
        raise InvalidValue(f"FILL value {value!r} does not convert to {t}") from None
    sql = _literal(converted)[0]
    return f"CAST({sql} AS {_DUCK_TYPES[t.name]})"
