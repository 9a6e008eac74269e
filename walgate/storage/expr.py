"""Vectorised evaluation of expression ASTs (:mod:`walgate.storage.sql.ast`) over pyarrow data.

:func:`compile_expr` turns an expression into a tree of closures once; each
call evaluates it on a mapping ``name -> pa.Array | pa.ChunkedArray |
pa.Scalar`` (tags and ``tbname`` are naturally scalars, row columns arrays)
with one eager ``pyarrow.compute`` kernel per node: no per-row Python.
Operators and functions are tables (``_BINARY``, ``_FUNCTIONS``).

Decisions (SQL / TDengine semantics where pyarrow differs):

* NULL propagates through every operator; AND / OR are Kleene
  (``NULL AND FALSE`` is FALSE). :func:`compile_filter` counts NULL as false.
* ``/`` and ``%`` always yield DOUBLE, and a zero divisor yields NULL. ``%``
  truncates toward zero like C ``fmod`` (``-7 % 3 = -1``). ``+ - *`` keep
  Arrow's numeric type promotion (integer overflow wraps, no error).
* A literal compared or combined with a non-literal is coerced to the other
  side's type: on a TIMESTAMP side a string is parsed like an INSERT value
  (:func:`walgate.storage.values.parse_timestamp`: naive times are UTC, RFC
  3339, or a string of digits as ticks) and an integer is taken as ticks in
  that column's unit; on a numeric side a string is read as a
  DOUBLE (``c = '5'`` works); NULL takes the other side's type.
* IN lists must be literals (as in TDengine) and use a hash lookup;
  ``x IN (..., NULL)`` is NULL rather than FALSE when nothing matches.
* LIKE is case-sensitive; ``_`` and ``%`` are wildcards, ``\\`` escapes them.
* ``CAST(... AS TIMESTAMP)`` produces millisecond timestamps; a cast's
  VARCHAR / NCHAR length is not enforced. A FLOAT / DOUBLE cast to an integer
  type is truncated toward zero; a value that does not convert (``'abc'`` to
  INT, 300 to TINYINT, NaN to BIGINT) is NULL.
* Arithmetic functions and ``/`` ``%`` take numbers (and BOOL), not strings.
* Errors: an unknown column is ``InvalidValue`` (at evaluation, when the
  columns are known); an unknown function or a non-literal IN list is
  ``Unsupported`` and a wrong argument count ``InvalidValue`` (at compile
  time); a type mismatch pyarrow refuses is ``InvalidValue`` naming the
  operator and the types. Type errors depend on the column types only, so
  evaluating once on empty columns (as :class:`walgate.storage.topics.TopicEvaluator`
  does) finds every one of them.
* Evaluation is total once the types check: a row on which a kernel fails
  for its values alone (an overflow of ``ROUND(i, -2)``...) gets NULL for the
  expression instead of failing the batch, so a topic never fails a write.
  The failing rows are found by halving the batch (at most
  :data:`_MAX_EVALUATIONS` evaluations; past that a failing part is NULL
  whole, deterministically). A TIMESTAMP result outside years 0001-9999
  (``CAST(huge AS TIMESTAMP)``) is NULL too, so every result renders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.errors import InvalidValue, Unsupported
from walgate.storage.schema import ColumnType
from walgate.storage.sql.ast import (
    Between,
    Binary,
    Call,
    Cast,
    Col,
    Expr,
    InList,
    IsNull,
    Like,
    Lit,
    Unary,
    walk,
)
from walgate.storage.values import TIMESTAMP_RANGE, parse_timestamp

__all__ = ["compile_expr", "compile_filter", "referenced_columns", "Datum", "Columns"]

Datum: TypeAlias = pa.Array | pa.ChunkedArray | pa.Scalar
Columns: TypeAlias = Mapping[str, Datum]
Evaluator: TypeAlias = Callable[[Columns], Datum]

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, OverflowError)
_NULL_BOOL = pa.scalar(None, pa.bool_())
_NULL_DOUBLE = pa.scalar(None, pa.float64())
_MAX_EVALUATIONS = 256  # per failing evaluation, to find its failing rows (see the module docstring)

# ------------------------------------------------------------------ helpers


def _apply(label: str, fn: Callable[..., Datum], *args: Any) -> Datum:
    """Run a kernel, turning pyarrow's type / value errors into ``InvalidValue``."""
    try:
        return fn(*args)
    except _ARROW_ERRORS as e:
        types = ", ".join(str(a.type) for a in args if hasattr(a, "type"))
        raise InvalidValue(f"cannot evaluate {label}({types}): {str(e).splitlines()[0]}") from None
    except InvalidValue as e:  # raised by our own kernels (e.g. a number expected)
        types = ", ".join(str(a.type) for a in args if hasattr(a, "type"))
        raise InvalidValue(f"cannot evaluate {label}({types}): {e.message}") from None


def _scalar(value: Any, type_: pa.DataType | None = None) -> pa.Scalar:
    try:
        return pa.scalar(value, type_)
    except _ARROW_ERRORS as e:
        raise InvalidValue(f"literal {value!r} does not fit {type_ or 'any type'}: {e}") from None


def _literal(value: Any, target: pa.DataType) -> pa.Scalar:
    """The literal ``value`` as a scalar usable with data of type ``target`` (see module docstring)."""
    if value is None:
        return pa.scalar(None, target)
    if pa.types.is_timestamp(target):
        if isinstance(value, str):
            return _scalar(parse_timestamp(value, target.unit), target)
        if isinstance(value, int) and not isinstance(value, bool):
            return _scalar(value, target)
    elif isinstance(value, str) and (pa.types.is_integer(target) or pa.types.is_floating(target)):
        return _apply("CAST AS DOUBLE", pc.cast, pa.scalar(value), pa.float64())
    return _scalar(value)


def _as_double(x: Datum) -> Datum:
    """A number (or BOOL) as DOUBLE; any other type is refused whatever the values (a type error)."""
    if not (pa.types.is_integer(x.type) or pa.types.is_floating(x.type) or pa.types.is_boolean(x.type)
            or pa.types.is_null(x.type)):
        raise InvalidValue(f"expected a number, got {x.type}")
    return pc.cast(x, pa.float64())


def _cast(x: Datum, target: pa.DataType) -> Datum:
    """CAST (see the module docstring): values that do not convert become NULL, the others convert."""
    if pa.types.is_floating(x.type) and pa.types.is_integer(target):
        x = pc.trunc(x)
    safe = not (pa.types.is_timestamp(x.type) and pa.types.is_timestamp(target))  # a finer unit truncates
    try:
        return pc.cast(x, target, safe=safe)
    except pa.ArrowInvalid:  # some values do not convert: cast each distinct value alone
        if isinstance(x, pa.Scalar):
            return pa.scalar(None, target)
        if isinstance(x, pa.ChunkedArray):
            x = x.combine_chunks()
        values = pc.unique(x)
        converted = pa.concat_arrays([_cast_or_null(values.slice(i, 1), target, safe) for i in range(len(values))])
        return pc.take(converted, pc.index_in(x, value_set=values))


def _cast_or_null(value: pa.Array, target: pa.DataType, safe: bool) -> pa.Array:
    try:
        return pc.cast(value, target, safe=safe)
    except pa.ArrowInvalid:
        return pa.nulls(1, target)


def _nonzero_divisor(x: Datum) -> Datum:
    """``x`` as DOUBLE with zeros replaced by NULL (x / 0 and x % 0 are NULL)."""
    x = _as_double(x)
    return pc.if_else(pc.equal(x, 0.0), _NULL_DOUBLE, x)


def _divide(a: Datum, b: Datum) -> Datum:
    return pc.divide(_as_double(a), _nonzero_divisor(b))


def _remainder(a: Datum, b: Datum) -> Datum:
    a, b = _as_double(a), _nonzero_divisor(b)
    return pc.subtract(a, pc.multiply(b, pc.trunc(pc.divide(a, b))))


def _constant_int(x: Datum, what: str) -> int:
    value = x.as_py() if isinstance(x, pa.Scalar) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidValue(f"{what} must be an integer constant")
    return value


def _round(x: Datum, digits: Datum | None = None) -> Datum:
    ndigits = 0 if digits is None else _constant_int(digits, "ROUND's second argument")
    return pc.round(x, ndigits=ndigits, round_mode="half_towards_infinity")


def _log(x: Datum, base: Datum | None = None) -> Datum:
    return pc.ln(_as_double(x)) if base is None else pc.logb(_as_double(x), _as_double(base))


def _substr(s: Datum, pos: Datum, length: Datum | None = None) -> Datum:
    """SUBSTR(s, pos[, len]): 1-based ``pos``, negative counts from the end."""
    start = _constant_int(pos, "SUBSTR's position")
    start = start - 1 if start > 0 else start
    stop = None
    if length is not None:
        stop = start + _constant_int(length, "SUBSTR's length")
        if start < 0 <= stop:
            stop = None
    return pc.utf8_slice_codeunits(s, start=start, stop=stop)


def _on_double(fn: Callable[[Datum], Datum]) -> Callable[[Datum], Datum]:
    return lambda x: fn(_as_double(x))


_BINARY: dict[str, Callable[[Datum, Datum], Datum]] = {
    "+": pc.add,
    "-": pc.subtract,
    "*": pc.multiply,
    "/": _divide,
    "%": _remainder,
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
    "AND": pc.and_kleene,
    "OR": pc.or_kleene,
}
_UNARY: dict[str, Callable[[Datum], Datum]] = {"-": pc.negate, "NOT": pc.invert}

# name -> (min args, max args, implementation)
_FUNCTIONS: dict[str, tuple[int, int, Callable[..., Datum]]] = {
    "abs": (1, 1, pc.abs),
    "ceil": (1, 1, pc.ceil),
    "floor": (1, 1, pc.floor),
    "round": (1, 2, _round),
    "sqrt": (1, 1, _on_double(pc.sqrt)),
    "pow": (2, 2, lambda x, y: pc.power(_as_double(x), _as_double(y))),
    "log": (1, 2, _log),
    "ln": (1, 1, _log),
    "log10": (1, 1, _on_double(pc.log10)),
    "sin": (1, 1, _on_double(pc.sin)),
    "cos": (1, 1, _on_double(pc.cos)),
    "tan": (1, 1, _on_double(pc.tan)),
    "asin": (1, 1, _on_double(pc.asin)),
    "acos": (1, 1, _on_double(pc.acos)),
    "atan": (1, 1, _on_double(pc.atan)),
    "lower": (1, 1, pc.utf8_lower),
    "upper": (1, 1, pc.utf8_upper),
    "length": (1, 1, pc.binary_length),  # bytes, as TDengine's LENGTH
    "char_length": (1, 1, pc.utf8_length),
    "ltrim": (1, 1, pc.utf8_ltrim_whitespace),
    "rtrim": (1, 1, pc.utf8_rtrim_whitespace),
    "concat": (2, 8, lambda *xs: pc.binary_join_element_wise(*xs, "")),
    "concat_ws": (3, 9, lambda sep, *xs: pc.binary_join_element_wise(*xs, sep, null_handling="skip")),
    "substr": (2, 3, _substr),
}

# ------------------------------------------------------------------ compiler


def _compile_col(node: Col) -> Evaluator:
    name = node.name

    def column(columns: Columns) -> Datum:
        try:
            return columns[name]
        except KeyError:
            raise InvalidValue(f"unknown column {name!r}") from None

    return column


def _compile_lit(node: Lit) -> Evaluator:
    scalar = _scalar(node.value)
    return lambda columns: scalar


def _compile_unary(node: Unary) -> Evaluator:
    fn, operand = _UNARY[node.op], _compile(node.operand)
    return lambda columns: _apply(node.op, fn, operand(columns))


def _compile_binary(node: Binary) -> Evaluator:
    """A binary operator; a literal operand is coerced to the other operand's type."""
    fn, op = _BINARY[node.op], node.op
    left, right = _compile(node.left), _compile(node.right)
    if isinstance(node.right, Lit) and not isinstance(node.left, Lit):
        value = node.right.value
        return lambda columns: _with_literal_right(op, fn, left(columns), value)
    if isinstance(node.left, Lit) and not isinstance(node.right, Lit):
        value = node.left.value
        return lambda columns: _with_literal_left(op, fn, value, right(columns))
    return lambda columns: _apply(op, fn, left(columns), right(columns))


def _with_literal_right(op: str, fn: Callable[[Datum, Datum], Datum], left: Datum, value: Any) -> Datum:
    return _apply(op, fn, left, _literal(value, left.type))


def _with_literal_left(op: str, fn: Callable[[Datum, Datum], Datum], value: Any, right: Datum) -> Datum:
    return _apply(op, fn, _literal(value, right.type), right)


def _compile_call(node: Call) -> Evaluator:
    if node.name not in _FUNCTIONS:
        raise Unsupported(f"unsupported function {node.name}()")
    low, high, fn = _FUNCTIONS[node.name]
    if not low <= len(node.args) <= high:
        expected = str(low) if low == high else f"{low} to {high}"
        raise InvalidValue(f"{node.name}() takes {expected} arguments, got {len(node.args)}")
    args = [_compile(a) for a in node.args]
    label = node.name.upper()
    return lambda columns: _apply(label, fn, *(a(columns) for a in args))


def _compile_cast(node: Cast) -> Evaluator:
    target = ColumnType(node.type.name, node.type.length).arrow("ms")
    operand, label = _compile(node.expr), f"CAST AS {node.type.name}"
    return lambda columns: _apply(label, _cast, operand(columns), target)


def _compile_in_list(node: InList) -> Evaluator:
    if not all(isinstance(v, Lit) for v in node.values):
        raise Unsupported("IN (...) accepts only literal values")
    values = [v.value for v in node.values if isinstance(v, Lit) and v.value is not None]
    has_null = len(values) < len(node.values)
    operand, negated = _compile(node.expr), node.negated
    value_sets: dict[pa.DataType, pa.Array] = {}  # per operand type, built once

    def in_list(columns: Columns) -> Datum:
        x = operand(columns)
        if x.type not in value_sets:
            value_sets[x.type] = _value_set(values, x.type)
        found = _apply("IN", lambda a: pc.is_in(a, value_set=value_sets[x.type], skip_nulls=True), x)
        if has_null:  # no match against a list holding NULL is unknown, not false
            found = pc.if_else(found, True, _NULL_BOOL)
        found = pc.if_else(pc.is_valid(x), found, _NULL_BOOL)
        return pc.invert(found) if negated else found

    return in_list


def _value_set(values: list[Any], target: pa.DataType) -> pa.Array:
    """The IN list's literals as one array comparable with ``target`` (Arrow infers int/float mixes)."""
    scalars = [_literal(v, target) for v in values]
    if not scalars:
        return pa.array([], target)
    if pa.types.is_timestamp(target):
        for s in scalars:
            if s.type != target:  # a float or bool literal: no timestamp
                raise InvalidValue(f"IN (...) on {target}: {s.as_py()!r} is not a timestamp")
        return pa.array([s.value for s in scalars], target)
    return _apply("IN", pa.array, [s.as_py() for s in scalars])


def _compile_between(node: Between) -> Evaluator:
    inside = Binary("AND", Binary(">=", node.expr, node.low), Binary("<=", node.expr, node.high))
    return _compile(Unary("NOT", inside) if node.negated else inside)


def _compile_is_null(node: IsNull) -> Evaluator:
    fn, operand = (pc.is_valid if node.negated else pc.is_null), _compile(node.expr)
    return lambda columns: fn(operand(columns))


def _compile_like(node: Like) -> Evaluator:
    operand, pattern, negated = _compile(node.expr), node.pattern, node.negated

    def like(columns: Columns) -> Datum:
        matched = _apply("LIKE", lambda x: pc.match_like(x, pattern), operand(columns))
        return pc.invert(matched) if negated else matched

    return like


_COMPILERS: dict[type, Callable[[Any], Evaluator]] = {
    Col: _compile_col,
    Lit: _compile_lit,
    Unary: _compile_unary,
    Binary: _compile_binary,
    Call: _compile_call,
    Cast: _compile_cast,
    InList: _compile_in_list,
    Between: _compile_between,
    IsNull: _compile_is_null,
    Like: _compile_like,
}


def _compile(expr: Expr) -> Evaluator:
    return _COMPILERS[type(expr)](expr)


def compile_expr(expr: Expr) -> Evaluator:
    """An evaluator of ``expr``: columns -> array (or scalar when only scalars are involved).

    Total once the types check (see the module docstring); the recursion of
    compiling and evaluating is as deep as ``expr``, which the parser bounds.
    """
    evaluate = _compile(expr)
    if isinstance(expr, (Col, Lit)):  # nothing to fail on values; stored timestamps are in range
        return evaluate

    def total(columns: Columns) -> Datum:
        try:
            return _valid_timestamps(evaluate(columns))
        except InvalidValue:
            empty = {k: pa.array([], v.type) if isinstance(v, pa.Scalar) else v.slice(0, 0) for k, v in columns.items()}
            result_type = evaluate(empty).type  # raises again when the error is about types, not values
            n = next((len(v) for v in columns.values() if not isinstance(v, pa.Scalar)), None)
            if n is None:
                return pa.scalar(None, result_type)
            budget = [_MAX_EVALUATIONS]
            middle = n // 2
            parts = [_by_halves(evaluate, columns, 0, middle, result_type, budget),
                     _by_halves(evaluate, columns, middle, n, result_type, budget)]
            return _valid_timestamps(pa.concat_arrays(parts))

    return total


def _by_halves(evaluate: Evaluator, columns: Columns, start: int, stop: int, type_: pa.DataType,
               budget: list[int]) -> pa.Array:
    """Rows ``[start, stop)`` evaluated; a part that fails is halved until single rows fail (NULL) or the budget
    of evaluations is spent (the part is NULL). Recursion is log2 of the row count deep."""
    if start == stop:
        return pa.nulls(0, type_)
    budget[0] -= 1
    try:
        part = {k: v if isinstance(v, pa.Scalar) else v.slice(start, stop - start) for k, v in columns.items()}
        result = evaluate(part)
    except InvalidValue:
        if stop - start == 1 or budget[0] <= 0:
            return pa.nulls(stop - start, type_)
        middle = (start + stop) // 2
        return pa.concat_arrays([_by_halves(evaluate, columns, start, middle, type_, budget),
                                 _by_halves(evaluate, columns, middle, stop, type_, budget)])
    if isinstance(result, pa.Scalar):
        return pa.repeat(result, stop - start).cast(type_)
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    return result.cast(type_)


def _valid_timestamps(x: Datum) -> Datum:
    """``x`` with TIMESTAMP values outside years 0001-9999 (or int64) made NULL."""
    if not pa.types.is_timestamp(x.type):
        return x
    low, high = TIMESTAMP_RANGE[x.type.unit]
    ticks = pc.cast(x, pa.int64())
    inside = pc.and_(pc.greater_equal(ticks, low), pc.less_equal(ticks, high))
    if isinstance(inside, pa.Scalar):
        return x if inside.as_py() is not False else pa.scalar(None, x.type)
    return x if pc.all(inside).as_py() is not False else pc.if_else(inside, x, pa.scalar(None, x.type))


def compile_filter(expr: Expr) -> Callable[[Columns], pa.BooleanArray]:
    """A row filter: columns -> BooleanArray without nulls (NULL counts as false).

    A result that is a scalar (the condition only involves tags / literals)
    is broadcast to the length of the mapping's first array, or to length 1
    when the mapping holds only scalars (e.g. evaluating a tag condition).
    """
    evaluate = compile_expr(expr)

    def keep(columns: Columns) -> pa.BooleanArray:
        result = evaluate(columns)
        if not (pa.types.is_boolean(result.type) or pa.types.is_null(result.type)):
            raise InvalidValue(f"condition must be boolean, got {result.type}")
        if isinstance(result, pa.Scalar):
            length = next((len(v) for v in columns.values() if not isinstance(v, pa.Scalar)), 1)
            return pa.repeat(pa.scalar(result.as_py() is True), length)
        if isinstance(result, pa.ChunkedArray):
            result = result.combine_chunks()
        if pa.types.is_null(result.type):
            return pa.repeat(pa.scalar(False), len(result))
        return pc.fill_null(result, False) if result.null_count else result

    return keep


def referenced_columns(expr: Expr) -> frozenset[str]:
    """Names of all columns, tags and pseudo-columns (``tbname``) the expression reads."""
    return frozenset(node.name for node in walk(expr) if isinstance(node, Col))
