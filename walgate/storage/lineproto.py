r"""InfluxDB line protocol, as TDengine's schemaless writer interprets it.

:func:`parse_lines` turns a request body into :class:`Point` objects, or raises
one :class:`LineProtocolError` for the first bad line (the caller then writes
nothing). The message names the 1-based line number, says what is wrong and
quotes the line (cut at 200 characters).

Syntax: ``measurement[,tag=value...] field=value[,field=value...] [timestamp]``

* Lines are split on ``\n`` only; a trailing ``\r`` (CRLF) and blanks around
  the line are dropped; blank lines and ``#`` comment lines are skipped. The
  sections are separated by one or more spaces. As in TDengine, a newline
  always ends a line, even inside a string value.
* Escapes (Influx): in the measurement ``\,`` and ``\ ``; in tag keys, tag
  values and field keys ``\,`` ``\=`` ``\ ``; in string field values ``\"``;
  everywhere ``\\`` is one backslash. A backslash before any other character
  is kept literally.
* Tags are optional and always strings (the engine stores them as NCHAR).
  Empty tag keys or values, an unescaped ``=`` in a tag value, a key repeated
  among the tags and fields of a line, and a line without fields are errors.
* Field values, typed as TDengine's schemaless writer types them:
  ``1``, ``1.5``, ``1e3``, ``1f64`` -> DOUBLE; ``1f32`` -> FLOAT;
  ``1i8``/``1i16``/``1i32`` -> TINYINT/SMALLINT/INT; ``1i``/``1i64`` -> BIGINT;
  ``1u8``/``1u16``/``1u32`` -> the UNSIGNED types and ``1u``/``1u64`` -> BIGINT
  UNSIGNED (range-checked: ``300i8`` is an error); ``t T true True TRUE f F
  false False FALSE`` -> BOOL; ``"abc"`` -> ``VARCHAR(len(utf-8 bytes))``;
  ``L"abc"`` (or ``l"abc"``) -> ``NCHAR(len(characters))``. NaN and infinity
  are refused.
* Timestamp: an optional integer (may be negative) in ``precision``, one of
  ns/us/ms/s (Influx v1's n/u/m/h are refused); ``Point.ts_ns`` holds it in
  nanoseconds and must fit int64, which keeps it within years 1677-2262,
  inside the range every database precision takes. Absent, or ``0``
  (TDengine's convention), gives ``ts_ns=None``: the engine uses its current time.
* Names (measurement, tag and field keys) are kept exactly as written: no
  lower-casing and no ``.`` -> ``_`` rewrite; the engine treats them as quoted
  identifiers. TDengine's limits apply: measurement <= 192 bytes, keys <= 64
  bytes (UTF-8).
* ``Point.tags`` are in TDengine's tag order: by key, byte-wise and ASCII
  case-insensitively (exact key as tie-break). ``Point.fields`` keep line order.

Child table names follow TDengine (``buildChildTableName``): see
:func:`child_table_name`.

This module is the reference, one line at a time: the engine parses whole
bodies by Arrow columns (:mod:`walgate.storage.lineproto_columns`), which
gives the same results and hands the lines it does not type itself, and every
body it refuses, to :func:`parse_line`. Within a line: the
``measurement,tags`` prefix is parsed once per distinct prefix in a body, and
so is each distinct ``key=value`` item (up to 1024 of them). Lines without
``\`` or ``"`` take a ``str.split`` fast path; anything else (escapes,
strings, extra spaces, and every error) goes through the escape-aware scanner,
which also writes the error messages.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache

from walgate.storage.errors import LineProtocolError
from walgate.storage.schema import ColumnType
from walgate.storage.values import FLOAT_MAX, INT_RANGES

__all__ = [
    "Point",
    "FieldValue",
    "Field",
    "PRECISION_NS",
    "MAX_MEASUREMENT_BYTES",
    "MAX_KEY_BYTES",
    "SUFFIXES",
    "BOOLS",
    "LineError",
    "Memo",
    "multiplier",
    "decode",
    "parse_head",
    "check_keys",
    "field_value",
    "parse_line",
    "parse_lines",
    "child_table_name",
]

FieldValue = bool | int | float | str
Field = tuple[str, ColumnType, FieldValue]  # key, type, value

PRECISION_NS: dict[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
MAX_MEASUREMENT_BYTES = 192  # TSDB_TABLE_NAME_LEN - 1
MAX_KEY_BYTES = 64  # TSDB_COL_NAME_LEN - 1
_QUOTE_CHARS = 200
_MEMO_FIELDS = 1024
_INT64_MAX = INT_RANGES["BIGINT"][1]


@dataclass(frozen=True, slots=True)
class Point:
    """One parsed line. ``fields`` items are ``(key, type, value)``; ``ts_ns`` None means "now"."""

    measurement: str
    tags: tuple[tuple[str, str], ...]
    fields: tuple[Field, ...]
    ts_ns: int | None


_set_measurement = Point.__dict__["measurement"].__set__
_set_tags = Point.__dict__["tags"].__set__
_set_fields = Point.__dict__["fields"].__set__
_set_ts_ns = Point.__dict__["ts_ns"].__set__


def _new_point(
    measurement: str,
    tags: tuple[tuple[str, str], ...],
    fields: tuple[Field, ...],
    ts_ns: int | None,
) -> Point:
    """``Point(...)`` in half the time: fills the slots directly, skipping the frozen ``__init__``."""
    point = object.__new__(Point)
    _set_measurement(point, measurement)
    _set_tags(point, tags)
    _set_fields(point, fields)
    _set_ts_ns(point, ts_ns)
    return point


Series = tuple[str, tuple[tuple[str, str], ...], frozenset[str]]  # measurement, sorted tags, tag keys
Shape = tuple[object, ...]  # tag keys, field keys...


class Memo:
    """What is already parsed in the current body, keyed by source text.

    ``series``: ``measurement,tags`` prefix -> parsed; ``fields``: ``key=value``
    item -> field (fast path, at most ``_MEMO_FIELDS``); ``shapes``: (tag keys,
    field keys...) combinations already validated.
    """

    __slots__ = ("series", "fields", "shapes")

    def __init__(self) -> None:
        self.series: dict[str, Series] = {}
        self.fields: dict[str, Field] = {}
        self.shapes: set[Shape] = set()


class LineError(LineProtocolError):
    """What is wrong with one line, before :func:`parse_line` adds the line number and text (a LineProtocolError
    without them)."""


# ------------------------------------------------------------------ values

_DOUBLE = ColumnType("DOUBLE")
_FLOAT = ColumnType("FLOAT")
_BOOL = ColumnType("BOOL")
# suffix -> (type, min, max); the bounds are None for the floating-point types
SUFFIXES: dict[str, tuple[ColumnType, int | None, int | None]] = {
    "": (_DOUBLE, None, None),
    "f64": (_DOUBLE, None, None),
    "f32": (_FLOAT, None, None),
    **{
        suffix: (ColumnType(name), *INT_RANGES[name])
        for suffix, name in (
            ("i8", "TINYINT"),
            ("i16", "SMALLINT"),
            ("i32", "INT"),
            ("i64", "BIGINT"),
            ("i", "BIGINT"),
            ("u8", "TINYINT UNSIGNED"),
            ("u16", "SMALLINT UNSIGNED"),
            ("u32", "INT UNSIGNED"),
            ("u64", "BIGINT UNSIGNED"),
            ("u", "BIGINT UNSIGNED"),
        )
    },
}
BOOLS: dict[str, bool] = {
    **dict.fromkeys(("t", "T", "true", "True", "TRUE"), True),
    **dict.fromkeys(("f", "F", "false", "False", "FALSE"), False),
}
# With these first/last characters, ASCII and no "_", Python's float() accepts
# exactly Influx's [+-](digits[.digits]|.digits)[e[+-]digits] (no nan/inf).
_FLOAT_FIRST = frozenset("+-.0123456789")
_FLOAT_LAST = frozenset(".0123456789")


def _short(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:40] + "...")


def field_value(raw: str, key: str) -> tuple[ColumnType, FieldValue]:
    """Type and value of an unquoted field value."""
    if raw.isascii() and len(raw) < 300 and raw.replace(".", "", 1).isdigit():
        return _DOUBLE, float(raw)  # the common case first: an unsigned decimal
    suffix = raw[-3:]
    if suffix not in SUFFIXES:
        suffix = raw[-2:]
        if suffix not in SUFFIXES:
            suffix = raw[-1:]
            if suffix not in SUFFIXES:
                suffix = ""
    ctype, low, high = SUFFIXES[suffix]
    number = raw[: len(raw) - len(suffix)]
    if low is None or high is None:
        if number and number[0] in _FLOAT_FIRST and number[-1] in _FLOAT_LAST and number.isascii() and "_" not in number:
            try:
                x = float(number)
            except ValueError:
                pass
            else:
                if math.isinf(x) or (ctype is _FLOAT and abs(x) > FLOAT_MAX):
                    raise LineError(f"value {_short(raw)} of field {key!r} is out of range for {ctype}")
                return ctype, x
    elif number.isascii() and (number.isdigit() or (number[:1] in ("+", "-") and number[1:].isdigit())):
        try:
            n = int(number)
        except ValueError:  # past Python's digit limit: out of range anyway
            n = high + 1
        if not low <= n <= high:
            raise LineError(f"value {_short(raw)} of field {key!r} is out of range for {ctype} ({low}..{high})")
        return ctype, n
    flag = BOOLS.get(raw)
    if flag is None:
        what = "missing value" if not raw else f"invalid value {_short(raw)}"
        raise LineError(f"{what} for field {key!r}: expected a number, a boolean or a quoted string")
    return _BOOL, flag


@lru_cache(maxsize=4096)
def _string_type(name: str, length: int) -> ColumnType:
    return ColumnType(name, length)


def _timestamp(text: str | None, mult: int) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and (text.isdigit() or (text[0] == "-" and text[1:].isdigit()))):
        raise LineError(f"invalid timestamp {_short(text)}: expected an integer")
    try:
        ts = int(text) * mult
    except ValueError:  # past Python's digit limit
        ts = _INT64_MAX + 1
    if not -_INT64_MAX - 1 <= ts <= _INT64_MAX:
        raise LineError(f"timestamp {_short(text)} is out of the int64 nanosecond range")
    return ts or None


# ------------------------------------------------------- names and checks

# Scanner tokens ("unrolled" so that re runs the plain characters in a tight
# loop): a backslash and the character after it always travel together.
_HEAD = re.compile(r"[^\\ ]*(?:\\.?[^\\ ]*)*", re.S)
_MEASUREMENT = re.compile(r"[^,\\ ]*(?:\\.?[^,\\ ]*)*", re.S)
_NAME = re.compile(r"[^,=\\ ]*(?:\\.?[^,=\\ ]*)*", re.S)
_FIELD = re.compile(
    r"([^,=\\ ]*(?:\\.?[^,=\\ ]*)*)="  # key
    r'(?:([Ll]?)"([^"\\]*(?:\\.[^"\\]*)*)"'  # string: L prefix, text
    r"|([^, ]*))",  # or plain value
    re.S,
)
_SPACES = re.compile(r" *")
_UNESCAPE_MEASUREMENT = re.compile(r"\\([, \\])")
_UNESCAPE_NAME = re.compile(r"\\([,= \\])")
_UNESCAPE_STRING = re.compile(r'\\(["\\])')


def _unescape(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(r"\1", text) if "\\" in text else text


def _too_long(name: str, limit: int) -> bool:
    return len(name) > limit // 4 and len(name.encode()) > limit


def _tag_order(tag: tuple[str, str]) -> tuple[bytes, str]:
    return tag[0].encode().lower(), tag[0]


def _scan_head(head: str) -> tuple[str, list[tuple[str, str]]]:
    """``measurement[,k=v...]`` with escapes; raises :class:`LineError` saying what is wrong."""
    end = len(head)
    m = _MEASUREMENT.match(head)
    assert m is not None  # these patterns match the empty string: never None
    measurement = _unescape(m.group(), _UNESCAPE_MEASUREMENT)
    if not measurement:
        raise LineError("missing measurement")
    pairs = []
    pos = m.end()
    while pos < end:  # head[pos] == ","
        m = _NAME.match(head, pos + 1)
        assert m is not None
        key = _unescape(m.group(), _UNESCAPE_NAME)
        pos = m.end()
        if not key:
            raise LineError("empty tag key")
        if pos == end or head[pos] != "=":
            raise LineError(f"tag {key!r} has no '=value'")
        m = _NAME.match(head, pos + 1)
        assert m is not None
        value = _unescape(m.group(), _UNESCAPE_NAME)
        pos = m.end()
        if not value:
            raise LineError(f"tag {key!r} has an empty value")
        if pos < end and head[pos] == "=":
            raise LineError(f"unescaped '=' in the value of tag {key!r}")
        pairs.append((key, value))
    return measurement, pairs


def _split_head(head: str) -> tuple[str, list[tuple[str, str]]] | None:
    """``measurement[,k=v...]`` without backslashes, by ``str.split``; None when anything is off."""
    measurement, *items = head.split(",")
    if not measurement:
        return None
    pairs = []
    for item in items:
        key, _, value = item.partition("=")
        if not key or not value or "=" in value:
            return None
        pairs.append((key, value))
    return measurement, pairs


def parse_head(head: str) -> Series:
    """The checked ``(measurement, sorted tags, tag keys)`` of a line's text before its first unescaped space."""
    measurement, pairs = ("\\" not in head and _split_head(head)) or _scan_head(head)
    if _too_long(measurement, MAX_MEASUREMENT_BYTES):
        raise LineError(f"measurement is longer than {MAX_MEASUREMENT_BYTES} bytes")
    keys = [k for k, _ in pairs]
    key_set = frozenset(keys)
    if len(key_set) != len(keys):
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise LineError(f"duplicate tag key {key!r}")
            seen.add(key)
    for key in keys:
        if _too_long(key, MAX_KEY_BYTES):
            raise LineError(f"tag key {key!r} is longer than {MAX_KEY_BYTES} bytes")
    joined = "".join(keys)
    # Without upper-case letters, TDengine's order is plain string order (keys are unique).
    tags = sorted(pairs) if joined.lower() == joined else sorted(pairs, key=_tag_order)
    return measurement, tuple(tags), key_set


def check_keys(memo: Memo, shape: Shape) -> None:
    """The field keys of ``shape`` (tag keys, field keys...) must be unique, distinct from the tag keys and short
    enough; remembers ``shape`` when they are."""
    tag_keys = shape[0]
    assert isinstance(tag_keys, frozenset)
    seen = set(tag_keys)
    for key in shape[1:]:
        assert isinstance(key, str)
        if key in seen:
            kind = "a tag and a field" if key in tag_keys else "a field twice"
            raise LineError(f"key {key!r} is used as {kind}")
        if _too_long(key, MAX_KEY_BYTES):
            raise LineError(f"field key {key!r} is longer than {MAX_KEY_BYTES} bytes")
        seen.add(key)
    memo.shapes.add(shape)


# ------------------------------------------------------------------ lines


def _parse_simple(line: str, mult: int, memo: Memo) -> Point | None:
    """Fast path for a line without backslashes or quotes; None means "let the scanner decide"."""
    parts = line.split(" ")
    if len(parts) == 3:
        head, fieldset, ts = parts
        if not fieldset or not ts:
            return None
    elif len(parts) == 2:
        head, fieldset = parts
        ts = None
    else:
        return None
    series = memo.series.get(head)
    if series is None:
        series = memo.series[head] = parse_head(head)
    fields: list[Field] = []
    shape: list[object] = [series[2]]
    for item in fieldset.split(","):
        field = memo.fields.get(item)
        if field is None:
            key, eq, raw = item.partition("=")
            if not key or not eq:
                return None
            ctype, value = field_value(raw, key)
            field = (key, ctype, value)
            if len(memo.fields) < _MEMO_FIELDS:
                memo.fields[item] = field
        fields.append(field)
        shape.append(field[0])
    shape_key = tuple(shape)
    if shape_key not in memo.shapes:
        check_keys(memo, shape_key)
    if ts is None:
        ts_ns = None
    elif len(ts) < 20 and ts.isdigit() and ts.isascii() and 0 < (ts_ns := int(ts) * mult) <= _INT64_MAX:
        pass
    else:
        ts_ns = _timestamp(ts, mult)
    return _new_point(series[0], series[1], tuple(fields), ts_ns)


def _parse_line(line: str, mult: int, memo: Memo) -> Point:
    """The escape-aware scanner: parses any line, or raises :class:`LineError` saying what is wrong."""
    end = len(line)
    m = _HEAD.match(line)
    assert m is not None
    head = m.group()
    series = memo.series.get(head)
    if series is None:
        series = memo.series[head] = parse_head(head)
    pos = len(head)
    if pos == end:
        raise LineError("no fields (expected a space and field=value after the measurement and tags)")
    spaces = _SPACES.match(line, pos)
    assert spaces is not None
    pos = spaces.end()
    fields: list[Field] = []
    shape: list[object] = [series[2]]
    while True:
        m = _FIELD.match(line, pos)
        if m is None or not m.group(1):
            name = _NAME.match(line, pos)
            assert name is not None
            key = _unescape(name.group(), _UNESCAPE_NAME)
            raise LineError(f"field {key!r} has no '=value'" if key else "empty field key")
        key_text, prefix, text, plain = m.groups()
        key = _unescape(key_text, _UNESCAPE_NAME)
        if plain is None:
            text = _unescape(text, _UNESCAPE_STRING)
            ctype = _string_type("NCHAR", len(text)) if prefix else _string_type("VARCHAR", len(text.encode()))
            fields.append((key, ctype, text))
        elif plain[:1] == '"' or plain[:2] in ('L"', 'l"'):
            raise LineError(f"unterminated string value of field {key!r}")
        else:
            fields.append((key, *field_value(plain, key)))
        shape.append(key)
        pos = m.end()
        if pos == end or line[pos] == " ":
            break
        if line[pos] != ",":
            raise LineError(f"unexpected {line[pos]!r} after the value of field {key!r}")
        pos += 1
    shape_key = tuple(shape)
    if shape_key not in memo.shapes:
        check_keys(memo, shape_key)
    ts_ns = _timestamp(line[pos:].lstrip(" ") or None, mult)
    return _new_point(series[0], series[1], tuple(fields), ts_ns)


def _quote(line: str) -> str:
    return repr(line if len(line) <= _QUOTE_CHARS else line[:_QUOTE_CHARS] + "...")


def decode(body: bytes | bytearray | memoryview | str) -> str:
    if isinstance(body, str):
        return body
    data = bytes(body)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        stop = data.find(b"\n", exc.start)
        line = data[start : stop if stop >= 0 else len(data)].decode("utf-8", "replace")
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise LineProtocolError(f"line {lineno}: not valid UTF-8: {_quote(line)}") from None


def multiplier(precision: str) -> int:
    """Nanoseconds per unit of ``precision``; LineProtocolError for an unknown one."""
    mult = PRECISION_NS.get(precision)
    if mult is None:
        raise LineProtocolError(f"unknown precision {precision!r}: expected ns, us, ms or s")
    return mult


def parse_line(line: str, lineno: int, mult: int, memo: Memo) -> Point:
    """One line, already stripped, not blank and no comment; a LineProtocolError naming ``lineno`` and quoting it."""
    try:
        point = None
        if "\\" not in line and '"' not in line:
            point = _parse_simple(line, mult, memo)
        return point or _parse_line(line, mult, memo)
    except LineError as exc:
        raise LineProtocolError(f"line {lineno}: {exc}: {_quote(line)}") from None


def parse_lines(body: bytes | str, precision: str) -> list[Point]:
    """Parse a line-protocol body (see module docstring) one line at a time: every line, or a LineProtocolError.

    The reference parser: :mod:`walgate.storage.lineproto_columns` parses whole bodies into Arrow columns and falls
    back on :func:`parse_line` for what it leaves to it."""
    mult = multiplier(precision)
    points: list[Point] = []
    append = points.append
    memo = Memo()
    for lineno, raw in enumerate(decode(body).split("\n"), 1):
        line = raw.strip(" \r")
        if line and line[0] != "#":
            append(parse_line(line, lineno, mult, memo))
    return points


@lru_cache(maxsize=65_536)
def child_table_name(measurement: str, tags: tuple[tuple[str, str], ...]) -> str:
    """TDengine's automatic child table name for a measurement and its tags.

    ``"t_" + md5("measurement,k1=v1,k2=v2").hexdigest()`` over the UTF-8 text,
    with the tags in TDengine's order (by key, ASCII case-insensitively; see
    the module docstring), as TDengine's ``buildChildTableName`` does, so a
    line written to walgate lands in the table a TDengine server would pick.
    With no tags the digest covers the measurement alone.
    """
    joined = measurement + "".join(f",{k}={v}" for k, v in sorted(tags, key=_tag_order))
    return "t_" + hashlib.md5(joined.encode(), usedforsecurity=False).hexdigest()
