"""Value coercion shared by SQL INSERT, CSV import and line protocol.

:func:`coerce` turns a Python literal (what the SQL parser produces) into the
storage representation of a column type; :func:`coerce_text` does the same
for CSV fields. Decisions:

* ``None`` is NULL for every type. In CSV only an *unquoted* empty field is
  NULL (see ``csvfile``); a quoted empty string is ``''`` and therefore an
  error for non-string types.
* TIMESTAMP is an int of ticks in the database precision (ms/us/ns). Ints are
  ticks already; :class:`Now` is ``now_ns + offset_ns``; strings are
  ``YYYY-MM-DD HH:MM:SS[.fraction]`` (naive = UTC, walgate's convention) or
  RFC 3339 (``T``, ``Z``/``±hh:mm``/``±hhmm``) with up to 9 fraction digits,
  parsed with integer arithmetic so no precision is lost; a string of digits is
  also accepted as ticks. Fractions finer than the precision are floored.
  Floats and bools are refused. Every timestamp, however given (``now +
  1000000w`` too), must lie in years 0001-9999 UTC and fit int64
  (:data:`TIMESTAMP_RANGE`), so that every stored timestamp renders as RFC 3339.
* BOOL: ``bool``, the ints 0/1, and the strings true/false (any case) and 0/1.
* Integer types: ints (not bools, not floats) or integral strings
  (``[+-]digits``), range-checked per type (TINYINT -128..127, ...).
* FLOAT/DOUBLE: ints, floats, numeric strings; NaN/inf and FLOAT overflow
  are refused.
* VARCHAR/NCHAR: strings; numbers become ``str(n)`` (bools ``'true'``/
  ``'false'``); the declared length counts UTF-8 bytes for VARCHAR and
  characters for NCHAR.
* JSON (tags only): a string holding a JSON object whose values are strings,
  numbers, booleans or null (TDengine's rule); stored compact.
* ``'now'`` is not special in strings: only the SQL keyword (:class:`Now`) is.

Every failure raises :class:`InvalidValue` naming the expected type and the
value.

:func:`coerce_texts` is :func:`coerce_text` over a whole Arrow column of
text, and :func:`coerce_values` is :func:`coerce` over a column of literals:
pyarrow casts and conversions where their rules are these (integers
``[-]digits``, numbers as :func:`float` reads them, epoch ticks; ints, floats,
bools and strings of the type the column takes as they are), value by value
otherwise.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage.errors import InvalidValue
from walgate.storage.schema import ColumnType
from walgate.storage.sql.ast import Now

__all__ = [
    "INT_RANGES",
    "FLOAT_MAX",
    "TICKS_PER_SECOND",
    "TIMESTAMP_RANGE",
    "coerce",
    "coerce_text",
    "coerce_texts",
    "coerce_values",
    "parse_timestamp",
    "format_timestamp",
    "parse_duration_ns",
]

INT_RANGES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "TINYINT UNSIGNED": (0, 2**8 - 1),
    "SMALLINT UNSIGNED": (0, 2**16 - 1),
    "INT UNSIGNED": (0, 2**32 - 1),
    "BIGINT UNSIGNED": (0, 2**64 - 1),
}
TICKS_PER_SECOND: dict[str, int] = {"ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
FLOAT_MAX = 3.4028234663852886e38  # largest finite IEEE-754 binary32

_INT64_MIN, _INT64_MAX = INT_RANGES["BIGINT"]
_TIMESTAMP = ColumnType("TIMESTAMP")
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_FIRST_SECOND = (date(1, 1, 1).toordinal() - _EPOCH_ORDINAL) * 86_400  # 0001-01-01T00:00:00Z
_END_SECOND = (date(9999, 12, 31).toordinal() + 1 - _EPOCH_ORDINAL) * 86_400  # 10000-01-01T00:00:00Z
TIMESTAMP_RANGE: dict[str, tuple[int, int]] = {
    precision: (max(_FIRST_SECOND * tps, _INT64_MIN), min(_END_SECOND * tps - 1, _INT64_MAX))
    for precision, tps in TICKS_PER_SECOND.items()
}
"""precision -> (first, last) valid ticks: years 0001-9999 UTC within int64 (ns: all of int64, 1677-2262)."""
_INTEGRAL = re.compile(r"[+-]?[0-9]+")
_NUMERIC = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATETIME = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[Tt ]"
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]{1,9}))?"
    r"(?P<tz>[Zz]|[+-][0-9]{2}:?[0-9]{2})?"
)
_DURATION = re.compile(r"([0-9]+)([buasmhdw])")
_DURATION_NS = {
    "b": 1,
    "u": 1_000,
    "a": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
    "w": 604_800_000_000_000,
}


def _bad(ctype: ColumnType, value: object, why: str) -> InvalidValue:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return InvalidValue(f"invalid value for {ctype}: {shown} ({why})")


def _ticks(precision: str) -> int:
    try:
        return TICKS_PER_SECOND[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; expected one of ms, us, ns") from None


def _int(ctype: ColumnType, text: str) -> int:
    """``int(text)`` for an integral string; past Python's digit limit it is out of range anyway."""
    try:
        return int(text)
    except ValueError:
        raise _bad(ctype, text, "out of range") from None


def parse_timestamp(text: str, precision: str) -> int:
    """Ticks in ``precision`` for a date string (see module docstring) or a string of digits."""
    tps = _ticks(precision)
    if _INTEGRAL.fullmatch(text):
        ticks = _int(_TIMESTAMP, text)
    else:
        m = _DATETIME.fullmatch(text)
        if m is None:
            raise _bad(_TIMESTAMP, text, "expected 'YYYY-MM-DD HH:MM:SS[.fraction]', RFC 3339 or epoch ticks")
        try:
            days = date(int(m["y"]), int(m["mo"]), int(m["d"])).toordinal() - _EPOCH_ORDINAL
        except ValueError as exc:
            raise _bad(_TIMESTAMP, text, str(exc)) from None
        hour, minute, second = int(m["h"]), int(m["mi"]), int(m["s"])
        if hour > 23 or minute > 59 or second > 59:
            raise _bad(_TIMESTAMP, text, "time of day out of range")
        seconds = days * 86_400 + hour * 3_600 + minute * 60 + second
        tz = m["tz"]
        if tz and tz not in ("Z", "z"):
            digits = tz[1:].replace(":", "")
            off_h, off_m = int(digits[:2]), int(digits[2:])
            if off_h > 23 or off_m > 59:
                raise _bad(_TIMESTAMP, text, "UTC offset out of range")
            offset = off_h * 3_600 + off_m * 60
            seconds += -offset if tz[0] == "+" else offset
        frac = m["frac"] or ""
        nanos = seconds * 1_000_000_000 + int(frac.ljust(9, "0"))
        ticks = nanos // (1_000_000_000 // tps)
    return _check_ticks(ticks, precision, text)


def _check_ticks(ticks: int, precision: str, shown: object) -> int:
    """``ticks`` if within :data:`TIMESTAMP_RANGE`, else an InvalidValue showing ``shown``."""
    _ticks(precision)  # a ValueError for an unknown precision, as everywhere
    low, high = TIMESTAMP_RANGE[precision]
    if not low <= ticks <= high:
        raise _bad(_TIMESTAMP, shown, f"out of range: timestamps must be in years 0001-9999 and fit int64 "
                                      f"{precision} ticks ({low}..{high})")
    return ticks


def format_timestamp(ticks: int, precision: str) -> str:
    """RFC 3339 UTC with exactly 3/6/9 fraction digits for ms/us/ns, e.g. ``2022-03-28T09:56:51.249Z``.

    Integer arithmetic throughout (``datetime`` stops at microseconds), for any
    ``ticks``: what ingestion accepts is in years 0001-9999, but a data dir
    written before that rule may hold others, shown with more year digits
    (``10000-01-01T...``) or a sign (``-0001-...``) rather than failing.
    """
    tps = _ticks(precision)
    seconds, frac = divmod(ticks, tps)
    days, sod = divmod(seconds, 86_400)
    year, month, day = _civil(days)
    hour, rest = divmod(sod, 3_600)
    minute, second = divmod(rest, 60)
    width = len(str(tps)) - 1
    sign = "-" if year < 0 else ""
    return f"{sign}{abs(year):04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{frac:0{width}d}Z"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the proleptic Gregorian calendar, ``days`` after 1970-01-01 (H. Hinnant's algorithm)."""
    era, day_of_era = divmod(days + 719_468, 146_097)  # eras of 400 years, starting on 0000-03-01
    year_of_era = (day_of_era - day_of_era // 1_460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153  # 0 = March
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def parse_duration_ns(text: str) -> int:
    """``<int><unit>`` with TDengine's units b(ns) u(µs) a(ms) s m h d w, in nanoseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise InvalidValue(f"invalid duration {text!r}: expected <integer><unit>, unit one of b u a s m h d w")
    return int(m[1]) * _DURATION_NS[m[2]]


def _json_tag(ctype: ColumnType, text: str) -> str:
    def refuse_constant(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    try:
        obj = json.loads(text, parse_constant=refuse_constant)
    except ValueError as exc:
        raise _bad(ctype, text, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _bad(ctype, text, "a JSON tag must be an object")
    for key, val in obj.items():
        if not key:
            raise _bad(ctype, text, "empty key")
        if isinstance(val, (dict, list)):
            raise _bad(ctype, text, f"value of {key!r} must be a string, number, boolean or null")
    out = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    if ctype.length is not None and len(out.encode()) > ctype.length:
        raise _bad(ctype, text, f"longer than {ctype.length} bytes")
    return out


def _check_length(ctype: ColumnType, text: str) -> str:
    if ctype.length is not None:
        size = len(text.encode()) if ctype.name == "VARCHAR" else len(text)
        if size > ctype.length:
            unit = "bytes" if ctype.name == "VARCHAR" else "characters"
            raise _bad(ctype, text, f"{size} {unit}, longer than {ctype.length}")
    return text


def coerce(value: object, ctype: ColumnType, precision: str, now_ns: int) -> object:
    """Storage representation of a SQL literal for a column of ``ctype`` (see module docstring)."""
    if value is None:
        return None
    name = ctype.name
    if name == "TIMESTAMP":
        if isinstance(value, Now):
            ticks = (now_ns + value.offset_ns) // (1_000_000_000 // _ticks(precision))
            return _check_ticks(ticks, precision, f"now{value.offset_ns:+d}b")
        if isinstance(value, str):
            return parse_timestamp(value, precision)
        if isinstance(value, int) and not isinstance(value, bool):
            return _check_ticks(value, precision, value)
        raise _bad(ctype, value, "expected epoch ticks, a date string or now")
    if isinstance(value, Now):
        raise _bad(ctype, value, "now is only valid for TIMESTAMP")
    if name in INT_RANGES:
        if isinstance(value, str) and _INTEGRAL.fullmatch(value):
            value = _int(ctype, value)
        elif isinstance(value, bool) or not isinstance(value, int):
            raise _bad(ctype, value, "expected an integer")
        low, high = INT_RANGES[name]
        if not low <= value <= high:
            raise _bad(ctype, value, f"out of range {low}..{high}")
        return value
    if name in ("DOUBLE", "FLOAT"):
        if isinstance(value, str):
            if not _NUMERIC.fullmatch(value):
                raise _bad(ctype, value, "expected a number")
            number = float(value)
        elif isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
        else:
            raise _bad(ctype, value, "expected a number")
        if not math.isfinite(number) or (name == "FLOAT" and abs(number) > FLOAT_MAX):
            raise _bad(ctype, value, "out of range")
        return number
    if name == "BOOL":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str):
            lowered = value.lower()
            if lowered in ("true", "1"):
                return True
            if lowered in ("false", "0"):
                return False
        raise _bad(ctype, value, "expected true/false or 0/1")
    if name in ("VARCHAR", "NCHAR"):
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise _bad(ctype, value, "expected a string")
        return _check_length(ctype, value)
    if name == "JSON":
        if not isinstance(value, str):
            raise _bad(ctype, value, "expected a JSON object in a string")
        return _json_tag(ctype, value)
    raise ValueError(f"unknown column type {ctype}")


def coerce_text(text: str | None, ctype: ColumnType, precision: str, now_ns: int) -> object:
    """Like :func:`coerce` for a CSV field: surrounding blanks are ignored except for string types."""
    if text is None:
        return None
    if not ctype.is_string:
        text = text.strip()
    return coerce(text, ctype, precision, now_ns)


_PY_BLANKS = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes among ASCII characters
_TRUE_TEXTS = pa.array(["true", "1"])
_BOOL_TEXTS = pa.array(["true", "1", "false", "0"])


def coerce_texts(texts: pa.Array, ctype: ColumnType, precision: str, now_ns: int) -> pa.Array:
    """:func:`coerce_text` of every value of a string column (NULL stays NULL), as an Arrow array of the column's
    type; InvalidValue for the first value that fails (in column order: callers wanting the first failure of a
    whole table go through the values in their order)."""
    arrow = ctype.arrow(precision)
    if not ctype.is_string and pc.all(pc.string_is_ascii(texts)).as_py():
        typed = _cast_texts(pc.utf8_trim(texts, _PY_BLANKS), ctype, precision)
        if typed is not None:
            return typed.cast(arrow)
    elif ctype.name in ("VARCHAR", "NCHAR"):
        size = pc.binary_length(texts) if ctype.name == "VARCHAR" else pc.utf8_length(texts)
        if ctype.length is None or (pc.max(size).as_py() or 0) <= ctype.length:
            return texts.cast(arrow)
    return pa.array([coerce_text(t, ctype, precision, now_ns) for t in texts.to_pylist()], arrow)


def _cast_texts(texts: pa.Array, ctype: ColumnType, precision: str) -> pa.Array | None:
    """Trimmed ASCII texts cast where Arrow's rules are :func:`coerce`'s and every value is valid; else None."""
    name = ctype.name
    if name == "BOOL":
        lowered = pc.utf8_lower(texts)
        if not pc.all(pc.or_(pc.is_null(lowered), pc.is_in(lowered, value_set=_BOOL_TEXTS))).as_py():
            return None
        return pc.if_else(pc.is_valid(lowered), pc.is_in(lowered, value_set=_TRUE_TEXTS), pa.scalar(None, pa.bool_()))
    if name not in INT_RANGES and name not in ("TIMESTAMP", "DOUBLE", "FLOAT"):
        return None
    try:
        column = texts.cast(_as_is_type(ctype, precision))
    except pa.ArrowInvalid:  # not numbers (dates, "+1", ""), or past 64 bits
        return None
    return column if _fits(column, ctype, precision) else None


_NONE = type(None)
# column type name -> the Python types coerce() keeps as they are (range and length checked by column)
_AS_IS: dict[str, frozenset[type]] = {
    **dict.fromkeys(INT_RANGES, frozenset({int, _NONE})),
    "TIMESTAMP": frozenset({int, _NONE}),
    "DOUBLE": frozenset({float, int, _NONE}),
    "FLOAT": frozenset({float, int, _NONE}),
    "BOOL": frozenset({bool, _NONE}),
    "VARCHAR": frozenset({str, _NONE}),
    "NCHAR": frozenset({str, _NONE}),
}


def coerce_values(values: list[object], ctype: ColumnType, precision: str, now_ns: int) -> pa.Array:
    """:func:`coerce` of every value (None is NULL), as an Arrow array of the column's type; InvalidValue for the
    first value that fails (in column order)."""
    arrow = ctype.arrow(precision)
    if set(map(type, values)) <= _AS_IS.get(ctype.name, frozenset()):
        try:
            column = pa.array(values, _as_is_type(ctype, precision))
        except (pa.ArrowInvalid, OverflowError):  # past 64 bits, or an int no double holds exactly
            column = None
        if column is not None and _fits(column, ctype, precision):
            return column.cast(arrow)
    return pa.array([coerce(v, ctype, precision, now_ns) for v in values], arrow)


def _as_is_type(ctype: ColumnType, precision: str) -> pa.DataType:
    """The Arrow type values of ``ctype`` are checked in: 64 bits for numbers and ticks, else the column's own."""
    if ctype.name in ("DOUBLE", "FLOAT"):
        return pa.float64()
    if ctype.name == "BIGINT UNSIGNED":
        return pa.uint64()
    if ctype.name in INT_RANGES or ctype.name == "TIMESTAMP":
        return pa.int64()
    return ctype.arrow(precision)


def _fits(column: pa.Array, ctype: ColumnType, precision: str) -> bool:
    """Whether every value of a column converted as it is lies within ``ctype`` (range, finiteness, length)."""
    name = ctype.name
    if name in ("VARCHAR", "NCHAR"):
        if ctype.length is None:
            return True
        size = pc.binary_length(column) if name == "VARCHAR" else pc.utf8_length(column)
        return (pc.max(size).as_py() or 0) <= ctype.length
    if name == "BOOL":
        return True
    low: float
    high: float
    if name in ("DOUBLE", "FLOAT"):
        if not pc.all(pc.is_finite(column)).as_py():
            return False
        low, high = (-FLOAT_MAX, FLOAT_MAX) if name == "FLOAT" else (-math.inf, math.inf)
    else:
        low, high = TIMESTAMP_RANGE[precision] if name == "TIMESTAMP" else INT_RANGES[name]
    bounds = pc.min_max(column)
    return not bounds["min"].is_valid or (low <= bounds["min"].as_py() and bounds["max"].as_py() <= high)
