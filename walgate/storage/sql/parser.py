"""Parse one statement of the TDengine SQL subset into the AST of :mod:`.ast`.

``grammar.lark`` is the source of truth for the syntax; it is parsed with
Lark's LALR parser and an inline transformer (no parse tree is built). The
one exception is the body of ``INSERT ... VALUES``: each list of rows is a
single ``VALUES_ROWS`` token that :class:`_RowReader` splits with regexes
compiled from the grammar's own value terminals, because LALR on every value
token manages only ~12k rows/s while the fast path does several times that.
An INSERT with plain names and no comments does not reach Lark at all
(:func:`_plain_insert`: regexes for the table names, name lists and keywords,
:class:`_RowReader` for the rows and tags), so a statement of many small
VALUES lists costs no LALR step per list; anything else, and every error, is
left to Lark, which builds the same AST.

Decisions:

* Every error is a :class:`~walgate.storage.errors.StorageError` whose message
  says what is wrong, where (line and column when known) and quotes the
  statement (a window around the error for long statements); Lark exceptions
  never escape. Syntax and shape errors (unknown type or database option,
  JSON outside TAGS, first column not TIMESTAMP, duplicate names) are
  ``SqlSyntaxError``; a bad option value or a row whose arity differs from its
  column list is ``InvalidValue``; aggregates and durations in a topic, and
  aggregates in a WHERE, are ``Unsupported``.
* ``BINARY(n)`` becomes ``VARCHAR(n)``, ``INTEGER`` becomes ``INT``; ``JSON``
  gets length 4095, the fixed size TDengine reports for JSON tags.
* String literals accept ``''`` / ``""`` doubling and backslash escapes
  (``\\n \\t \\r \\0 \\\\ \\' \\"``); ``\\%`` and ``\\_`` keep their backslash
  so that LIKE patterns can match a literal ``%`` / ``_``; any other
  backslash is dropped (``\\q`` is ``q``), as in TDengine.
* A ``-`` before a number literal in an expression is folded into the
  literal (``-5`` is ``Lit(-5)``, not ``Unary``).
* Durations (``1h``, ``10s``: b u a s m h d w) are nanoseconds, in
  expressions (``Duration``) and in ``INTERVAL`` / ``SLIDING``.
  ``LIMIT a, b`` is ``LIMIT b OFFSET a``.
* ``CreateTopic.sql`` is the statement text without surrounding whitespace
  and trailing ``;``.
* A chain of ``AND`` (or ``OR``) is folded into a balanced tree of
  ``Binary`` nodes (``a AND b AND c`` is ``(a AND b) AND c``; four terms are
  ``(a AND b) AND (c AND d)``): Kleene AND / OR are associative, and a
  10,000-term chain is then 14 levels deep instead of 10,000.

Limits (a clear :class:`~walgate.storage.errors.LimitExceeded`, checked
before anything recurses over the statement, so no input can reach Python's
recursion limit or the C stack downstream; Lark's LALR parser itself is
iterative):

* an expression nests at most :data:`MAX_EXPR_DEPTH` (64) levels: each
  operator, ``NOT``, sign, function call, ``CAST``, ``IN`` / ``BETWEEN`` /
  ``LIKE`` / ``IS NULL`` adds one (parentheses alone add none; a fold of an
  AND / OR chain adds log2 of its length). Nobody writes more by hand, and
  evaluation then stays a few hundred frames deep at most;
* a statement other than ``INSERT`` holds at most
  :data:`MAX_STATEMENT_CHARS` characters (1 MiB, TDengine's maximum SQL
  length) and :data:`MAX_STATEMENT_TOKENS` tokens (65,536: a 4,096-column
  ``CREATE STABLE`` fits), which bounds the parse at well under a second.
  ``INSERT`` (no expressions; its rows are read by the fast path) is bounded
  by the engine's request size alone.
"""

from __future__ import annotations

import functools
import itertools
import re
import typing
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import orjson
from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr

from walgate.security.secrets import mask_secrets
from walgate.storage.errors import InvalidValue, LimitExceeded, SqlSyntaxError, StorageError, Unsupported
from walgate.storage.schema import PRECISIONS, Column, ColumnType
from walgate.storage.sql import ast
from walgate.storage.sql.ast import (
    Between,
    Binary,
    Call,
    Cast,
    Col,
    ColumnTypeRef,
    CreateTopic,
    Duration,
    Expr,
    InList,
    IsNull,
    Like,
    Lit,
    Name,
    Now,
    SelectItem,
    Statement,
    Unary,
    Value,
)

__all__ = ["parse", "AGGREGATES", "MAX_EXPR_DEPTH", "MAX_STATEMENT_CHARS", "MAX_STATEMENT_TOKENS"]

MAX_EXPR_DEPTH = 64
MAX_STATEMENT_CHARS = 1 << 20
MAX_STATEMENT_TOKENS = 65_536

AGGREGATES = frozenset(
    "count sum avg min max first last last_row spread stddev stddev_pop variance var_pop "
    "percentile apercentile top bottom mode hyperloglog histogram elapsed leastsquares twa irate "
    "diff derivative csum mavg sample tail unique interp statecount stateduration group_concat".split()
)
"""Aggregate / selector / time-series functions: refused with ``Unsupported`` in topics and WHERE clauses."""

_DURATION_NS = {"b": 1, "u": 1_000, "a": 1_000_000, "s": 10**9, "m": 60 * 10**9,
                "h": 3_600 * 10**9, "d": 86_400 * 10**9, "w": 604_800 * 10**9}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "%": "\\%", "_": "\\_"}
_UNESCAPE = {"'": re.compile(r"\\(.)|''", re.S), '"': re.compile(r'\\(.)|""', re.S)}

# option -> (min, max) for integers, None for PRECISION (a string)
_DB_OPTIONS: dict[str, tuple[int, int] | None] = {
    "VGROUPS": (1, 1024),
    "PRECISION": None,
    "WAL_LEVEL": (1, 2),
    "WAL_FSYNC_PERIOD": (0, 180_000),
    "WAL_RETENTION_PERIOD": (-1, 2**31 - 1),
    "WAL_RETENTION_SIZE": (-1, 2**63 - 1),
    "WAL_SEGMENT_SIZE": (0, 2**31 - 1),
    "REPLICA": (1, 3),  # 1 or 3 (_REPLICAS); at most the live nodes: checked where it is placed (Catalog.new_database)
    "MIN_INSYNC": (1, 1024),  # at most REPLICA: likewise
}
_REPLICAS = (1, 3)
"""The REPLICA values TDengine 3.x community edition accepts (its parser's ``checkDbEnumOption`` of
``TSDB_MIN_DB_REPLICA``, ``TSDB_MAX_DB_REPLICA``); its enterprise edition's REPLICA 2 (3.3.0.0 on) needs an arbitrator
walgate has not."""
_INT_TYPES = {"TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INT": "INT", "INTEGER": "INT", "BIGINT": "BIGINT"}
_FIXED_TYPES = {"TIMESTAMP", "BOOL", "FLOAT", "DOUBLE"}
_STRING_TYPES = {"VARCHAR": ("VARCHAR", 65_517), "BINARY": ("VARCHAR", 65_517), "NCHAR": ("NCHAR", 16_382)}
_JSON_LENGTH = 4095
_COMPARISONS = {"==": "=", "<>": "!="}
_WORD = re.compile(r"[^,()\s]+")
_LONG_DIGITS = re.compile(r"[0-9]{19}")
_JSON_SCALARS = {int, float, bool, type(None)}
_INSERT = re.compile(r"(?:\s|--[^\n]*)*insert\b", re.I)
# a token for counting (an upper bound of what Lark sees): string, quoted name, comment, word or number, other char
_TOKEN = re.compile(r"'(?:[^'\\]|\\.|'')*'?|\"(?:[^\"\\]|\\.|\"\")*\"?|`[^`]*`?|--[^\n]*|\w+|\S", re.S)

# display names of regex terminals in "expected ..." lists
_TERMINAL_NAMES = {
    "NAME": "identifier", "QUOTED_NAME": "identifier", "INT": "integer", "FLOAT": "number",
    "STRING": "string", "DURATION": "duration (e.g. 1s)", "VALUES_ROWS": "'(' row values ')'",
    "COMP_OP": "comparison operator", "SIGN": "'+', '-'", "MUL_OP": "'*', '/', '%'",
    "$END": "end of statement",
}


class _StatementError(Exception):
    """Raised inside the transformer; :func:`parse` adds the statement and position."""

    def __init__(self, error: type[StorageError], message: str, pos: int | None = None) -> None:
        super().__init__(message)
        self.error, self.message, self.pos = error, message, pos


def _fail(message: str, token: Token | None = None, error: type[StorageError] = SqlSyntaxError) -> NoReturn:
    raise _StatementError(error, message, token.start_pos if token is not None else None)


def _unescape(token: str) -> str:
    """The value of a quoted string literal (quotes included in ``token``)."""
    quote, body = token[0], token[1:-1]
    if "\\" not in body and quote * 2 not in body:
        return body
    return _UNESCAPE[quote].sub(lambda m: quote if m.group(1) is None else _ESCAPES.get(m.group(1), m.group(1)), body)


def _duration_ns(sign: str, duration: str) -> int:
    ns = int(duration[:-1]) * _DURATION_NS[duration[-1]]
    return -ns if sign == "-" else ns


def _column_type(name: Token, unsigned: Token | None, length: Token | None) -> ColumnType:
    """Validate and normalise a type as written in a column definition or CAST."""
    upper = name.upper()
    if upper in _STRING_TYPES:
        canonical, limit = _STRING_TYPES[upper]
        if unsigned is not None:
            _fail(f"{upper} cannot be UNSIGNED", unsigned)
        if length is None:
            _fail(f"{upper} needs a length, e.g. {upper}(64)", name)
        if not 1 <= int(length) <= limit:
            _fail(f"{upper} length must be between 1 and {limit}, got {length}", length)
        return ColumnType(canonical, int(length))
    if upper not in _INT_TYPES and upper not in _FIXED_TYPES and upper != "JSON":
        _fail(f"unknown type {name.value}", name)
    if length is not None:
        _fail(f"type {upper} takes no length", length)
    if upper in _INT_TYPES:
        return ColumnType(_INT_TYPES[upper] + (" UNSIGNED" if unsigned is not None else ""))
    if unsigned is not None:
        _fail(f"only integer types can be UNSIGNED, not {upper}", unsigned)
    return ColumnType("JSON", _JSON_LENGTH) if upper == "JSON" else ColumnType(upper)


def _check_columns(columns: tuple[Column, ...], tags: tuple[Column, ...] = ()) -> None:
    """TDengine's table-shape rules: TIMESTAMP first, unique names, JSON only as the sole tag."""
    if columns[0].type.name != "TIMESTAMP":
        _fail(f"the first column must be a TIMESTAMP, {columns[0].name!r} is {columns[0].type}")
    seen: set[str] = set()
    for column in columns + tags:
        if column.name in seen:
            _fail(f"duplicate column or tag name {column.name!r}")
        seen.add(column.name)
    for column in columns:
        if column.type.name == "JSON":
            _fail(f"JSON is only allowed as a tag type, not for column {column.name!r}")
    if len(tags) > 1 and any(t.type.name == "JSON" for t in tags):
        _fail("a JSON tag must be the only tag of its supertable")


def _check_no_aggregates(items: tuple[SelectItem, ...], where: Expr | None, context: str) -> None:
    """Refuse aggregates (and, in a topic, durations, which only queries fold) in ``items`` and ``where``."""
    exprs = [i.expr for i in items if i.expr is not None] + ([where] if where is not None else [])
    for expr in exprs:
        for node in ast.walk(expr):
            if isinstance(node, Call) and node.name in AGGREGATES:
                allowed = "allowed in WHERE" if context == "WHERE" else f"supported in {context}"
                raise _StatementError(Unsupported, f"aggregate function {node.name}() is not {allowed}")
            if isinstance(node, Duration) and context != "WHERE":
                raise _StatementError(Unsupported, f"durations (as in now - 1h) are not supported in {context}")


def _balanced(op: str, operands: tuple[Expr, ...]) -> Expr:
    """``a op b op c ...`` as a balanced tree, built pairwise without recursion (see the module docstring)."""
    level = list(operands)
    while len(level) > 1:
        pairs: list[Expr] = [Binary(op, level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = pairs + level[len(pairs) * 2:]
    return level[0]


def _check_limits(sql: str) -> None:
    """Refuse a statement (other than INSERT) longer than the limits, before Lark sees it."""
    if _INSERT.match(sql):
        return
    if len(sql) > MAX_STATEMENT_CHARS:
        raise LimitExceeded(f"statement of {len(sql)} characters: the limit is {MAX_STATEMENT_CHARS} "
                            "(INSERT excepted)")
    for count, _ in enumerate(_TOKEN.finditer(sql), 1):
        if count > MAX_STATEMENT_TOKENS:
            raise LimitExceeded(f"statement of more than {MAX_STATEMENT_TOKENS} tokens: the limit is "
                                f"{MAX_STATEMENT_TOKENS} (INSERT excepted)")


def _check_depth(sql: str, statement: Statement) -> None:
    """Refuse expressions nested deeper than :data:`MAX_EXPR_DEPTH` (see the module docstring)."""
    exprs: list[Expr | None] = []
    if isinstance(statement, ast.Select):
        exprs += statement.expressions()
    elif isinstance(statement, CreateTopic):
        exprs += [i.expr for i in statement.select or ()]
        exprs.append(statement.where)
    for expr in exprs:
        if expr is not None and (levels := ast.depth(expr)) > MAX_EXPR_DEPTH:
            raise LimitExceeded(_located(sql, f"expression nested {levels} levels deep: the limit is {MAX_EXPR_DEPTH} "
                                         "(each operator, NOT, function call and CAST adds a level)", None))


class _RowReader:
    """The VALUES fast path: split a VALUES_ROWS token into tuples of values.

    Accepts exactly the grammar's ``value`` rule (number with optional sign,
    string, TRUE / FALSE / NULL, ``now[()] [± duration ...]``), built from the
    grammar's terminal regexes. One ``findall`` tokenises all rows in C; the
    Python loop only converts values and checks the row structure, and on
    error ``finditer`` re-scans to find where the offending token starts.

    Before that, rows of numbers and lower-case true / false / null only (no
    quote, no digit run of 19 or more, so every integer fits int64) are read
    in one go as JSON (``(1, 2.5) (3, null)`` is the JSON ``[[1, 2.5], [3,
    null]]`` once the parentheses become brackets): JSON's numbers are a subset
    of the grammar's, with the same integer / float split and values, and a
    list that is not such rows is left to the regexes.
    """

    _KEYWORDS: dict[str, bool | None] = {"true": True, "false": False, "null": None}

    def __init__(self, terminal: Callable[[str], str]) -> None:
        value = (
            rf"([+-]?)\s*(?:({terminal('FLOAT')})|({terminal('INT')}))"
            rf"|({terminal('STRING')})"
            rf"|((?i:now)(?:\s*\(\s*\))?(?:\s*[+-]\s*{terminal('DURATION')})*)"
            r"|((?i:true|false|null))(?![A-Za-z0-9_])"
        )
        # groups: open, sign, float, int, string, now, keyword, delimiter, bad
        self._tokens = re.compile(rf"\s*(\()|\s*(?:{value})\s*([,)]?)|\s*(\S)", re.S)
        self._offset = re.compile(rf"([+-])\s*({terminal('DURATION')})")

    def rows(self, token: Token) -> tuple[tuple[Value, ...], ...]:
        return self._json_rows(token.value) or self._scanned_rows(token)

    @staticmethod
    def _json_rows(text: str) -> tuple[tuple[Value, ...], ...] | None:
        """The rows of a VALUES list of JSON numbers, true, false and null (see the class docstring), else None."""
        if "'" in text or '"' in text or _LONG_DIGITS.search(text):
            return None
        try:
            rows = orjson.loads("[" + text.replace("(", "[").replace(")", "],")[:-1] + "]")
        except orjson.JSONDecodeError:
            return None
        if not all(type(row) is list and row for row in rows) or \
                set(map(type, itertools.chain.from_iterable(rows))) - _JSON_SCALARS:
            return None  # an empty row, or a nested one
        return tuple(map(tuple, rows))

    def _scanned_rows(self, token: Token) -> tuple[tuple[Value, ...], ...]:
        rows: list[tuple[Value, ...]] = []
        row: list[Value] | None = None  # None between rows
        value: Value
        tokens = self._tokens.findall(token.value)
        for index, (opening, sign, flt, integer, string, now, keyword, delimiter, bad) in enumerate(tokens):
            if opening:
                if row is not None:
                    self._fail(token, index, "expected a value, got '('")
                row = []
                continue
            if bad or row is None:
                self._fail(token, index, "expected '(' to start a row" if row is None else "")
            if integer:
                value = -int(integer) if sign == "-" else int(integer)
            elif flt:
                value = -float(flt) if sign == "-" else float(flt)
            elif string:
                value = _unescape(string)
            elif now:
                value = Now(sum(_duration_ns(s, d) for s, d in self._offset.findall(now)))
            else:
                value = self._KEYWORDS[keyword.lower()]
            row.append(value)
            if delimiter == ")":
                rows.append(tuple(row))
                row = None
            elif not delimiter:
                self._fail(token, index, "expected ',' or ')' after a value", after=True)
        if row is not None:
            raise _StatementError(SqlSyntaxError, "unexpected end of statement inside a row",
                                  (token.start_pos or 0) + len(token.value))
        return tuple(rows)

    def _fail(self, token: Token, index: int, message: str, after: bool = False) -> NoReturn:
        """Raise ``message`` at the ``index``-th token (a description of the bad token if empty)."""
        text = token.value
        m = next(m for i, m in enumerate(self._tokens.finditer(text)) if i == index)
        pos = m.end() if after else m.end() - len(m.group().lstrip())
        if not message:
            bad = _WORD.match(text, pos)
            message = ("unterminated string" if text[pos] in "'\"" else
                       "expected a value (number, string, TRUE, FALSE, NULL or now), "
                       f"got {_shorten(bad.group() if bad else text[pos])!r}")
        raise _StatementError(SqlSyntaxError, message, (token.start_pos or 0) + pos)


@v_args(inline=True)
class _ToAst(Transformer[Token, Statement]):
    """Builds AST nodes while the LALR parser reduces (one method per rule / alias)."""

    rows: _RowReader  # set by _lark() once the grammar's terminals are known

    # -- common
    def ident(self, token: Token) -> str:
        text = str(token.value)
        return text[1:-1] if token.type == "QUOTED_NAME" else text.lower()

    def table_name(self, first: str, second: str | None) -> Name:
        return Name(first) if second is None else Name(second, first)

    def if_not_exists(self, *tokens: Token) -> bool:
        return bool(tokens)

    if_exists = if_not_exists

    # -- values
    def int_literal(self, token: Token) -> int:
        return int(token)

    def float_literal(self, token: Token) -> float:
        return float(token)

    def string_literal(self, token: Token) -> str:
        return _unescape(token.value)

    def true_literal(self) -> bool:
        return True

    def false_literal(self) -> bool:
        return False

    def null_literal(self) -> None:
        return None

    def signed_number(self, sign: Token, number: Token) -> int | float:
        value = int(number) if number.type == "INT" else float(number)
        return -value if sign == "-" else value

    def signed_int(self, sign: Token | None, number: Token) -> int:
        return -int(number) if sign == "-" else int(number)

    def now_offset(self, sign: Token, duration: Token) -> int:
        return _duration_ns(sign, duration)

    def now(self, *offsets: int) -> Now:
        return Now(sum(offsets))

    # -- databases
    def db_option(self, name: Token, value: int | Token) -> tuple[str, int | str]:
        key = name.upper()
        if key not in _DB_OPTIONS:
            _fail(f"unsupported database option {name.value.upper()}", name)
        bounds = _DB_OPTIONS[key]
        if bounds is None:
            precision = _unescape(value).lower() if isinstance(value, Token) else value
            if precision not in PRECISIONS:
                _fail(f"PRECISION must be 'ms', 'us' or 'ns', got {precision!r}", name, InvalidValue)
            return key, precision
        if isinstance(value, Token):
            _fail(f"{key} expects an integer, got {value.value}", name, InvalidValue)
        if key == "REPLICA" and value not in _REPLICAS:  # TDengine's TSDB_CODE_PAR_INVALID_ENUM_OPTION, its name
            _fail(f"Invalid option replications: {value}, only {_REPLICAS[0]}, {_REPLICAS[1]} allowed", name,
                  InvalidValue)
        if not bounds[0] <= value <= bounds[1]:
            _fail(f"{key} must be between {bounds[0]} and {bounds[1]}, got {value}", name, InvalidValue)
        return key, value

    def create_database(self, if_not_exists: bool, name: str, *options: tuple[str, int | str]) -> ast.CreateDatabase:
        result: dict[str, int | str] = {}
        for key, value in options:
            if key in result:
                _fail(f"database option {key} given twice")
            result[key] = value
        return ast.CreateDatabase(name, if_not_exists, result)

    def drop_database(self, if_exists: bool, name: str) -> ast.DropDatabase:
        return ast.DropDatabase(name, if_exists)

    def use_database(self, name: str) -> ast.UseDatabase:
        return ast.UseDatabase(name)

    # -- tables
    def data_type(self, name: Token, unsigned: Token | None, length: Token | None) -> ColumnType:
        return _column_type(name, unsigned, length)

    def column_def(self, name: str, type_: ColumnType) -> Column:
        return Column(name, type_)

    def column_defs(self, *columns: Column) -> tuple[Column, ...]:
        return columns

    def create_stable(self, if_not_exists: bool, name: Name, columns: tuple[Column, ...],
                      tags: tuple[Column, ...]) -> ast.CreateStable:
        _check_columns(columns, tags)
        return ast.CreateStable(name, columns, tags, if_not_exists)

    def create_table(self, if_not_exists: bool, name: Name, columns: tuple[Column, ...]) -> ast.CreateTable:
        _check_columns(columns)
        return ast.CreateTable(name, columns, if_not_exists)

    def create_subtable(self, if_not_exists: bool, name: Name, using: ast.Using) -> ast.CreateSubtable:
        return ast.CreateSubtable(name, using.stable, using.tag_names, using.tag_values, if_not_exists)

    def alter_action(self, verb: Token, kind: Token, target: Column | str) -> tuple[str, Column | str]:
        if kind.upper() == "COLUMN" and isinstance(target, Column) and target.type.name == "JSON":
            _fail(f"JSON is only allowed as a tag type, not for column {target.name!r}")
        return f"{verb.upper()} {kind.upper()}", target

    def alter_stable(self, name: Name, action: tuple[str, Column | str]) -> ast.AlterStable:
        verb, target = action
        if isinstance(target, Column):
            return ast.AlterStable(name, verb, column=target)
        return ast.AlterStable(name, verb, column_name=target)

    def drop_table(self, if_exists: bool, *names: Name) -> ast.DropTable:
        return ast.DropTable(names, if_exists)

    def drop_stable(self, if_exists: bool, name: Name) -> ast.DropStable:
        return ast.DropStable(name, if_exists)

    # -- insert
    def name_list(self, *names: str) -> tuple[str, ...]:
        return names

    def using_clause(self, stable: Name, tag_names: tuple[str, ...] | None, *values: Value) -> ast.Using:
        if tag_names is not None and len(tag_names) != len(values):
            _fail(f"{len(tag_names)} tag names but {len(values)} tag values", error=InvalidValue)
        return ast.Using(stable, tag_names, values)

    def insert_target(self, table: Name, using: ast.Using | None, columns: tuple[str, ...] | None,
                      values: Token) -> ast.InsertTarget:
        rows = self.rows.rows(values)
        if columns is not None:
            for number, row in enumerate(rows, 1):
                if len(row) != len(columns):
                    _fail(f"row {number} of table {table.name!r} has {len(row)} values for "
                          f"{len(columns)} columns", error=InvalidValue)
        return ast.InsertTarget(table, using, columns, rows)

    def insert(self, *targets: ast.InsertTarget) -> ast.Insert:
        return ast.Insert(targets)

    # -- topics
    def with_meta(self) -> bool:
        return True

    def topic_database(self, name: str) -> dict[str, Any]:
        return {"kind": "database", "source": Name(name)}

    def topic_stable(self, name: Name, where: Expr | None) -> dict[str, Any]:
        _check_no_aggregates((), where, "CREATE TOPIC AS STABLE")
        return {"kind": "stable", "source": name, "where": where}

    def topic_select(self, items: tuple[SelectItem, ...], source: Name, where: Expr | None) -> dict[str, Any]:
        _check_no_aggregates(items, where, "CREATE TOPIC AS SELECT")
        return {"kind": "select", "source": source, "select": items, "where": where}

    def create_topic(self, if_not_exists: bool, name: str, *rest: Any) -> CreateTopic:
        return CreateTopic(name=name, with_meta=len(rest) == 2, if_not_exists=if_not_exists, **rest[-1])

    def drop_topic(self, if_exists: bool, name: str) -> ast.DropTopic:
        return ast.DropTopic(name, if_exists)

    def drop_consumer_group(self, if_exists: bool, group: str | Token, topic: str) -> ast.DropConsumerGroup:
        name = _unescape(group.value) if isinstance(group, Token) else group
        return ast.DropConsumerGroup(name, topic, if_exists)

    # -- cluster
    def redistribute_vgroup(self, *parts: str | Token) -> ast.RedistributeVgroup:
        db = str(parts[0]) if not isinstance(parts[0], Token) else None
        numbers = [int(p) for p in parts[0 if db is None else 1:]]
        return ast.RedistributeVgroup(db, numbers[0], tuple(numbers[1:]))

    def balance_vgroup(self, *tokens: Token) -> ast.BalanceVgroup:
        return ast.BalanceVgroup(leader=len(tokens) == 3)

    def drop_dnode(self, dnode: Token) -> ast.DropDnode:
        return ast.DropDnode(int(dnode))

    # -- privileges
    def grant(self, privileges: tuple[str, ...], level: tuple[str | None, str], user: str) -> ast.Grant:
        return ast.Grant(privileges, level[0], level[1], user)

    def revoke(self, privileges: tuple[str, ...], level: tuple[str | None, str], user: str) -> ast.Grant:
        return ast.Grant(privileges, level[0], level[1], user, revoke=True)

    def privileges(self, *names: Token) -> tuple[str, ...]:
        return tuple(dict.fromkeys(str(n).upper() for n in names))

    def privilege(self, token: Token) -> Token:
        return token

    def priv_table(self, db: str, table: str) -> tuple[str | None, str]:
        return db, table

    def priv_database(self, db: str) -> tuple[str | None, str]:
        return db, "*"

    def priv_topic(self, topic: str) -> tuple[str | None, str]:
        return None, topic

    def show_user_privileges(self) -> ast.ShowUserPrivileges:
        return ast.ShowUserPrivileges()

    # -- show / describe / select
    def show(self, _show: Token, *rest: Token | str) -> ast.Show:
        return ast.Show(str(rest[-1]).upper(), str(rest[0]) if len(rest) == 3 else None)

    def create_user(self, name: str, password: Token) -> ast.CreateUser:
        return ast.CreateUser(name, _unescape(password.value))

    def alter_user(self, name: str, password: Token) -> ast.AlterUser:
        return ast.AlterUser(name, _unescape(password.value))

    def drop_user(self, name: str) -> ast.DropUser:
        return ast.DropUser(name)

    def show_users(self) -> ast.ShowUsers:
        return ast.ShowUsers()

    def describe(self, name: Name) -> ast.Describe:
        return ast.Describe(name)

    def star(self) -> SelectItem:
        return SelectItem(None)

    def select_expr(self, expr: Expr, alias: str | None = None) -> SelectItem:
        return SelectItem(expr, alias)

    def select_items(self, *items: SelectItem) -> tuple[SelectItem, ...]:
        return items

    def select(self, items: tuple[SelectItem, ...], source: Name, where: Expr | None,
               partition_by: tuple[Expr, ...] | None, window: tuple[ast.Interval, ast.Fill | None] | None,
               group_by: tuple[Expr, ...] | None, having: Expr | None, order_by: tuple[ast.OrderItem, ...] | None,
               limit: tuple[int, int] | None) -> ast.Select:
        _check_no_aggregates((), where, "WHERE")
        interval, fill = window if window is not None else (None, None)
        return ast.Select(items, source, where, limit[0] if limit else None, limit[1] if limit else 0,
                          partition_by or (), interval, fill, group_by or (), having, order_by or ())

    def partition_by(self, *exprs: Expr) -> tuple[Expr, ...]:
        return exprs

    group_by = partition_by

    def interval(self, length: Token, offset: Token | None, sliding: Token | None,
                 fill: ast.Fill | None) -> tuple[ast.Interval, ast.Fill | None]:
        sliding_ns = None if sliding is None else _duration_ns("+", sliding)
        return ast.Interval(_duration_ns("+", length), 0 if offset is None else _duration_ns("+", offset),
                            sliding_ns), fill

    def fill(self, mode: Token) -> ast.Fill:
        return ast.Fill(mode.upper())

    def fill_mode(self, mode: Token) -> Token:
        return mode

    def fill_value_list(self, *values: int | float | str | bool | None) -> ast.Fill:
        return ast.Fill("VALUE", values)

    def order_by(self, *items: ast.OrderItem) -> tuple[ast.OrderItem, ...]:
        return items

    def order_item(self, expr: Expr, direction: Token | None) -> ast.OrderItem:
        return ast.OrderItem(expr, direction is not None and direction.upper() == "DESC")

    def order_direction(self, direction: Token) -> Token:
        return direction

    def limit(self, count: Token, offset: Token | None) -> tuple[int, int]:
        return int(count), 0 if offset is None else int(offset)

    def limit_comma(self, offset: Token, count: Token) -> tuple[int, int]:
        return int(count), int(offset)

    # -- expressions
    def or_(self, *operands: Expr) -> Expr:
        return _balanced("OR", operands)

    def and_(self, *operands: Expr) -> Expr:
        return _balanced("AND", operands)

    def not_(self, _not: Token, operand: Expr) -> Unary:
        return Unary("NOT", operand)

    def compare(self, left: Expr, op: Token, right: Expr) -> Binary:
        return Binary(_COMPARISONS.get(op.value, op.value), left, right)

    def arith(self, left: Expr, op: Token, right: Expr) -> Binary:
        return Binary(op.value, left, right)

    def in_list(self, expr: Expr, negated: Token | None, *values: Expr) -> InList:
        return InList(expr, values, negated is not None)

    def between(self, expr: Expr, negated: Token | None, low: Expr, high: Expr) -> Between:
        return Between(expr, low, high, negated is not None)

    def like(self, expr: Expr, negated: Token | None, pattern: Token) -> Like:
        return Like(expr, _unescape(pattern.value), negated is not None)

    def is_null(self, expr: Expr, negated: Token | None) -> IsNull:
        return IsNull(expr, negated is not None)

    def sign(self, sign: Token, operand: Expr) -> Expr:
        if sign == "+":
            return operand
        if isinstance(operand, Lit) and isinstance(operand.value, (int, float)) and not isinstance(operand.value, bool):
            return Lit(-operand.value)
        return Unary("-", operand)

    def lit(self, value: int | float | str | bool | None) -> Lit:
        return Lit(value)

    def column(self, name: str) -> Col:
        return Col(name)

    def call(self, name: str, *args: Expr) -> Call:
        return Call(name.lower(), args)

    def call_star(self, name: str) -> Call:
        return Call(name.lower(), ())

    def duration(self, token: Token) -> Duration:
        return Duration(_duration_ns("+", token))

    def cast(self, expr: Expr, type_: ColumnType) -> Cast:
        return Cast(expr, ColumnTypeRef(type_.name, type_.length))

    def start(self, statement: Statement) -> Statement:
        return statement


_WS = r"[ \t\f\r\n]*"  # Lark's common.WS, which the grammar ignores
_IDENT = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)"
_INSERT_INTO = re.compile(rf"{_WS}insert{_WS}(?<![A-Za-z0-9_])into(?![A-Za-z0-9_])", re.I)
_TABLE = re.compile(rf"{_WS}({_IDENT})(?:{_WS}\.{_WS}({_IDENT}))?")
_NAME_LIST = re.compile(rf"{_WS}\({_WS}({_IDENT}(?:{_WS},{_WS}{_IDENT})*){_WS}\)")
_LIST_ITEM = re.compile(_IDENT)
_WS_RE = re.compile(_WS)
_KEYWORD = re.compile(rf"{_WS}(using|tags|values)(?![A-Za-z0-9_])", re.I)
_END = re.compile(rf"{_WS}(?:;{_WS})?\Z")
_RESERVED = {"insert", "into", "using", "tags", "values"}


def _plain_insert(sql: str) -> ast.Insert | None:
    """An INSERT without comments and with plain names, read by regexes and :class:`_RowReader` alone (the tags of
    ``USING ... TAGS (...)`` are one row), as Lark would build it; None for anything else or anything wrong, which
    Lark then parses (and words the error of)."""
    m = _INSERT_INTO.match(sql)
    if m is None or "--" in sql:
        return None
    reader, values_rows, one_row = _fast_readers()
    pos = m.end()
    targets = []
    try:
        while True:
            table, pos = _table_at(sql, pos)
            using = None
            keyword = _KEYWORD.match(sql, pos)
            if keyword is not None and keyword[1].lower() == "using":
                stable, pos = _table_at(sql, keyword.end())
                tag_names, pos = _names_at(sql, pos)
                keyword = _KEYWORD.match(sql, pos)
                if keyword is None or keyword[1].lower() != "tags":
                    return None
                tags = one_row.match(sql, _skip_ws(sql, keyword.end()))
                if tags is None:
                    return None
                rows = reader.rows(Token("VALUES_ROWS", tags.group(), start_pos=tags.start()))
                if len(rows) != 1 or (tag_names is not None and len(tag_names) != len(rows[0])):
                    return None
                using = ast.Using(stable, tag_names, rows[0])
                pos = tags.end()
                keyword = _KEYWORD.match(sql, pos)
            columns = None
            if keyword is None:
                columns, pos = _names_at(sql, pos)
                keyword = _KEYWORD.match(sql, pos)
            if keyword is None or keyword[1].lower() != "values":
                return None
            found = values_rows.match(sql, _skip_ws(sql, keyword.end()))
            if found is None:
                return None
            rows = reader.rows(Token("VALUES_ROWS", found.group(), start_pos=found.start()))
            if columns is not None and any(len(row) != len(columns) for row in rows):
                return None
            targets.append(ast.InsertTarget(table, using, columns, rows))
            pos = found.end()
            if _END.match(sql, pos):
                return ast.Insert(tuple(targets))
    except (_StatementError, _NotPlain):
        return None


class _NotPlain(Exception):
    """What :func:`_plain_insert` leaves to Lark."""


def _ident(text: str) -> str:
    """:meth:`_ToAst.ident` of a NAME or QUOTED_NAME text; _NotPlain for a keyword the grammar reserves there."""
    if text[0] == "`":
        return text[1:-1]
    if text.lower() in _RESERVED:
        raise _NotPlain
    return text.lower()


def _table_at(sql: str, pos: int) -> tuple[Name, int]:
    m = _TABLE.match(sql, pos)
    if m is None:
        raise _NotPlain
    first = _ident(m[1])
    return (Name(first) if m[2] is None else Name(_ident(m[2]), first)), m.end()


def _names_at(sql: str, pos: int) -> tuple[tuple[str, ...] | None, int]:
    m = _NAME_LIST.match(sql, pos)
    if m is None:
        return None, pos
    return tuple(_ident(name) for name in _LIST_ITEM.findall(m[1])), m.end()


def _skip_ws(sql: str, pos: int) -> int:
    m = _WS_RE.match(sql, pos)
    assert m is not None  # matches the empty string
    return m.end()


@functools.cache
def _fast_readers() -> tuple[_RowReader, re.Pattern[str], re.Pattern[str]]:
    """The row reader, the VALUES_ROWS pattern and the one-row pattern (``_ROW``) of the grammar, for
    :func:`_plain_insert`."""
    parser = _lark()
    row = re.search(r"^_ROW: /(.*)/s$", (Path(__file__).parent / "grammar.lark").read_text(), re.M)
    assert row is not None
    return (_RowReader(lambda name: parser.get_terminal(name).pattern.to_regexp()),
            re.compile(parser.get_terminal("VALUES_ROWS").pattern.to_regexp()), re.compile(row[1], re.S))


@functools.cache
def _lark() -> Lark:
    transformer = _ToAst()
    parser = Lark((Path(__file__).parent / "grammar.lark").read_text(), parser="lalr", lexer="contextual",
                  transformer=transformer, maybe_placeholders=True)
    transformer.rows = _RowReader(lambda name: parser.get_terminal(name).pattern.to_regexp())
    return parser


def parse(sql: str) -> Statement:
    """Parse exactly one statement (an optional trailing ``;`` is allowed)."""
    if not sql.strip().rstrip(";").strip():
        raise SqlSyntaxError("empty statement")
    try:
        sql.encode()
    except UnicodeEncodeError as e:  # not quoted: the message itself must stay valid text
        raise SqlSyntaxError(f"the statement is not valid Unicode text: a lone surrogate at position {e.start}") \
            from None
    fast = _plain_insert(sql)
    if fast is not None:
        return fast
    _check_limits(sql)
    parser = _lark()
    try:
        statement = typing.cast(Statement, parser.parse(sql))
    except _StatementError as e:
        raise e.error(_located(sql, e.message, e.pos)) from None
    except UnexpectedInput as e:
        at_end = isinstance(e, UnexpectedToken) and e.token.type == "$END"
        pos = len(sql.rstrip()) if at_end else e.pos_in_stream
        raise SqlSyntaxError(_located(sql, "syntax error: " + _describe(parser, e), pos)) from None
    _check_depth(sql, statement)
    if isinstance(statement, CreateTopic):
        statement = replace(statement, sql=sql.strip().removesuffix(";").rstrip())
    return statement


def _describe(parser: Lark, e: UnexpectedInput) -> str:
    """'unexpected X, expected one of ...' for a Lark error.

    The expected set is what the parser really accepts at that point (Lark's
    interactive parser, run without callbacks), not the merged LALR lookahead.
    """
    if isinstance(e, UnexpectedCharacters):
        if e.allowed == {"VALUES_ROWS"} and e.char == "(":
            return "a VALUES row cannot contain '(' except in now()"
        found, expected = f"character {e.char!r}", e.allowed
    elif isinstance(e, UnexpectedToken):
        found = "end of statement" if e.token.type == "$END" else repr(_shorten(e.token.value))
        expected = e.expected
    else:
        return "syntax error"
    interactive = getattr(e, "interactive_parser", None)
    if interactive is not None:
        expected = interactive.accepts() or expected
    names = sorted({_terminal_name(parser, name) for name in expected})
    listing = names[0] if len(names) == 1 else "one of " + ", ".join(names[:25]) + (", ..." if len(names) > 25 else "")
    return f"unexpected {found}, expected {listing}"


def _terminal_name(parser: Lark, name: str) -> str:
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    pattern = parser.get_terminal(name).pattern
    if isinstance(pattern, PatternStr):
        return pattern.value.upper() if pattern.value.isalpha() else repr(pattern.value)
    return name


def _located(sql: str, message: str, pos: int | None) -> str:
    """``message`` with the line/column of ``pos`` and the statement (a window of it if long) quoted."""
    where = ""
    if pos is not None:
        line = sql.count("\n", 0, pos) + 1
        column = pos - sql.rfind("\n", 0, pos)
        where = f" (line {line}, column {column})"
    text = sql.strip()
    if len(text) > 200:
        start = max(0, (pos or 0) - 80)
        text = ("..." if start else "") + sql[start:start + 160].strip() + ("..." if start + 160 < len(sql) else "")
    return mask_secrets(f"{message}{where}; statement: {text}", sql)  # CREATE USER x PASS '...' quotes no password


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
