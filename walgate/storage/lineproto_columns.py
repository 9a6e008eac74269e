"""Line protocol by columns: a whole body into one Arrow table per measurement.

:func:`parse_body` reads the language of :mod:`walgate.storage.lineproto` (TDengine's schemaless rules, in its
docstring) and returns what :func:`~walgate.storage.lineproto.parse_lines`, the reference that parses one line at a
time, would give, arranged for the engine: per measurement, the type each field and tag key needs over the body and
the rows as one Arrow table.

How: the body's lines are split, trimmed and matched by pyarrow compute kernels, never one by one in Python. A line
is *plain* when it holds no backslash and no double quote and reads ``head fields[ timestamp]`` with single spaces
and ``key=value`` items. Plain lines are grouped by measurement and field keys (their *shape*); each group's values
come out of one regular expression and are typed a column at a time: a column is taken when every value has the
syntax of its first value's type (a number with the same suffix, or a boolean) and casts within range. Each distinct
``measurement,tags`` head and each (tag keys, field keys) combination is parsed and checked once, by the
reference's own functions. Every other line (escapes, quoted strings, extra spaces), and every line of a group a
column refuses, goes through the reference parser, and its rows join the others. When the reference parser refuses
a line, the whole body is parsed by the reference, so the error names the same first bad line, with the same message.

Widening, as TDengine's schemaless writer does within one request: a key keeps one type per measurement; string
types take the longest length; any other disagreement is an :class:`InvalidValue`, whose message is the one the
reference walk over the lines in order gives (:func:`_reference_widening`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from walgate.storage import lineproto
from walgate.storage.errors import InvalidValue, LineProtocolError
from walgate.storage.lineproto import BOOLS, SUFFIXES, LineError, Memo, Point
from walgate.storage.schema import ColumnType
from walgate.storage.values import FLOAT_MAX, INT_RANGES

__all__ = ["Measurement", "parse_body", "parse_body_by_lines"]

Tags = tuple[tuple[str, str], ...]

_MAX_SHAPES = 16  # field-key lists typed by columns per measurement and body; lines of any other go one by one
_INT32_MAX = 2**31 - 1
_TRUE = pa.array([k for k, v in BOOLS.items() if v])
_BOOL_TEXTS = pa.array(list(BOOLS))
_INT64 = pa.int64()
_INT64_MAX = INT_RANGES["BIGINT"][1]


@dataclass(frozen=True)
class Measurement:
    """One measurement's rows in a body.

    ``fields`` and ``tags``: the type each key needs (strings: the longest value), in the order the reference walk
    meets them (series by first line, then their lines in order); ``series``: the tag sets (sorted as TDengine sorts
    them) and the 1-based line where each first appears, by first appearance; ``rows``: ``series`` (int32, index into
    ``series``), ``ts_ns`` (int64 nanoseconds, null for "now"), then one column per field in ``fields`` order (the
    Arrow type of its ColumnType, null where a line lacks it), ordered by series, then line. Read the columns by
    position: a field may be named ``series`` or ``ts_ns``.
    """

    name: str
    fields: dict[str, ColumnType]
    tags: dict[str, ColumnType]
    series: list[tuple[Tags, int]]
    rows: pa.RecordBatch


@dataclass
class _Group:
    """Rows of one measurement with the same field keys and types: ``series`` indexes the body's series list,
    ``lines`` the body's lines (0-based), ``ts`` is int64 nanoseconds (null: now)."""

    measurement: str
    keys: tuple[str, ...]
    types: tuple[ColumnType, ...]
    columns: list[pa.Array]
    ts: pa.Array
    lines: pa.Array
    series: pa.Array


class _Series:
    """The body's series ((measurement, tags) pairs): ids by first sight, and the first line (0-based) of each."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, Tags], int] = {}
        self.first: list[int] = []

    def id(self, key: tuple[str, Tags], line: int) -> int:
        sid = self.ids.get(key)
        if sid is None:
            sid = self.ids[key] = len(self.first)
            self.first.append(line)
        elif line < self.first[sid]:
            self.first[sid] = line
        return sid


def parse_body(body: bytes | str, precision: str) -> list[Measurement]:
    """A line-protocol body by columns (see the module docstring): its measurements in order of first appearance;
    LineProtocolError naming the first bad line, or InvalidValue when a key's types disagree."""
    mult = lineproto.multiplier(precision)
    text = lineproto.decode(body)  # the reference's error for bytes that are no UTF-8
    try:
        data = text.encode() if isinstance(body, str) else bytes(body)
        if len(data) > _INT32_MAX:  # past a string array's offsets (requests are far smaller)
            return parse_body_by_lines(text, precision)
        whole = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(struct.pack("<ii", 0, len(data))),
                                                       pa.py_buffer(data)])
        lines = pc.utf8_trim(pc.split_pattern(whole, "\n").flatten(), " \r")
        series = _Series()
        groups, slow = _plain_groups(lines, text, mult, series)
        memo = Memo()
        points = [(i, lineproto.parse_line(lines[i].as_py(), i + 1, mult, memo)) for i in slow]
    except (LineError, LineProtocolError, UnicodeEncodeError):  # a bad line (or a str of lone surrogates)
        return parse_body_by_lines(text, precision)  # raises the reference's error for the first bad line
    groups += _point_groups(points, series)
    try:
        return _assemble(groups, series)
    except InvalidValue:
        return parse_body_by_lines(text, precision)  # raises the reference's message


def parse_body_by_lines(body: bytes | str, precision: str) -> list[Measurement]:
    """:func:`parse_body` with every line through the reference parser, and type conflicts found by the reference
    walk (:func:`_reference_widening`): the fallback of :func:`parse_body`, which must give the same result."""
    mult = lineproto.multiplier(precision)
    memo = Memo()
    points = []
    for i, raw in enumerate(lineproto.decode(body).split("\n")):
        line = raw.strip(" \r")
        if line and line[0] != "#":
            points.append((i, lineproto.parse_line(line, i + 1, mult, memo)))
    _reference_widening([p for _, p in points])
    series = _Series()
    return _assemble(_point_groups(points, series), series)


# ---------------------------------------------------------------- plain lines


def _plain_groups(lines: pa.Array, text: str, mult: int, series: _Series) -> tuple[list[_Group], list[int]]:
    """The groups of the plain lines of ``text``, and the (0-based) lines left to the reference parser, in order;
    raises LineError for a plain line the reference refuses."""
    wanted = pc.greater(pc.binary_length(lines), 0)
    if "#" in text:
        wanted = pc.and_not(wanted, pc.starts_with(lines, "#"))
    parts = pc.split_pattern(lines, " ")
    count = pc.list_value_length(parts)
    plain = pc.and_(wanted, pc.and_(pc.greater_equal(count, 2), pc.less_equal(count, 3)))
    if "\\" in text or '"' in text:
        plain = pc.and_not(plain, pc.or_(pc.match_substring(lines, "\\"), pc.match_substring(lines, '"')))
    slow = pc.indices_nonzero(pc.and_not(wanted, plain)).to_pylist()
    where = pc.indices_nonzero(plain)
    if not len(where):
        return [], slow
    parts = parts.take(where)
    starts = parts.offsets.slice(0, len(parts))
    words = parts.flatten()
    heads = words.take(starts).dictionary_encode()
    fieldsets = words.take(pc.add(starts, 1))
    ts_texts = words.take(pc.if_else(pc.equal(count.take(where), 3), pc.add(starts, 2), pa.scalar(None, pa.int32())))
    # each distinct head parsed once: its series, first line and tag keys
    firsts = pa.table({"h": heads.indices, "line": where}).group_by("h", use_threads=False).aggregate([("line", "min")])
    first_line = dict(zip(firsts["h"].to_pylist(), firsts["line_min"].to_pylist()))
    parsed = [lineproto.parse_head(head) for head in heads.dictionary.to_pylist()]
    head_series = [series.id(p[:2], first_line[h]) for h, p in enumerate(parsed)]
    sids = pa.array(head_series, pa.int32()).take(heads.indices)
    measurements = pa.array([p[0] for p in parsed]).dictionary_encode()
    by_measurement = pa.table({"m": measurements.indices.take(heads.indices), "i": pc.indices_nonzero(plain.take(where))})
    members = by_measurement.group_by("m", use_threads=False).aggregate([("i", "list")])
    memo = Memo()
    groups: list[_Group] = []
    for m, rows in zip(members["m"].to_pylist(), members["i_list"].chunks[0]):
        measurement = measurements.dictionary[m].as_py()
        rest = rows.values
        for _ in range(_MAX_SHAPES):  # one group per shape: the first remaining line's field keys
            if not len(rest):
                break
            keys = tuple(item.partition("=")[0] for item in fieldsets[rest[0].as_py()].as_py().split(","))
            pattern = "^" + ",".join(f"{re.escape(k)}=(?P<f{j}>[^,]*)" for j, k in enumerate(keys)) + "$"
            values = pc.extract_regex(fieldsets.take(rest), pattern)
            if "" in keys or not values[0].is_valid:  # not key=value items: the reference's error
                slow.append(where[rest[0].as_py()].as_py())
                rest = rest.slice(1)
                continue
            at = rest
            if values.null_count:
                matched = values.is_valid()
                at, rest, values = rest.filter(matched), rest.filter(pc.invert(matched)), values.filter(matched)
            else:
                rest = rest.slice(len(rest))
            for h in pc.unique(heads.indices.take(at)).to_pylist():
                shape = (parsed[h][2], *keys)
                if shape not in memo.shapes:
                    lineproto.check_keys(memo, shape)
            group = _plain_group(measurement, keys, values, ts_texts.take(at), mult, where.take(at), sids.take(at))
            if group is None:
                slow += where.take(at).to_pylist()
            else:
                groups.append(group)
        slow += where.take(rest).to_pylist()
    slow.sort()
    return groups, slow


def _plain_group(
    measurement: str, keys: tuple[str, ...], values: pa.Array, ts: pa.Array, mult: int, lines: pa.Array, sids: pa.Array
) -> _Group | None:
    """A group of plain lines with these field keys (``values``: their texts, a struct of one field per key), typed;
    None when a column or the timestamps need the reference."""
    types, columns = [], []
    for j, key in enumerate(keys):
        typed = _typed_column(key, values.field(j))
        if typed is None:
            return None
        types.append(typed[0])
        columns.append(typed[1])
    stamps = _timestamps(ts, mult)
    if stamps is None:
        return None
    return _Group(measurement, keys, tuple(types), columns, stamps, lines.cast(_INT64), sids)


def _typed_column(key: str, raw: pa.Array) -> tuple[ColumnType, pa.Array] | None:
    """The type and values of one field column when every value has its first value's syntax and fits; else None.

    Arrow's casts from text take exactly the numbers the reference takes, but for ``inf``/``nan`` (refused here by
    value) and a leading ``+`` on an integer (left to the reference)."""
    try:
        ctype, _ = lineproto.field_value(raw[0].as_py(), key)
    except LineError:
        return None
    if ctype.name == "BOOL":
        if not pc.all(pc.is_in(raw, value_set=_BOOL_TEXTS)).as_py():
            return None
        return ctype, pc.is_in(raw, value_set=_TRUE)
    first = raw[0].as_py()
    suffix = next(s for s in (first[-3:], first[-2:], first[-1:], "") if s in SUFFIXES)  # as the reference picks it
    low, high = SUFFIXES[suffix][1:]
    if suffix:
        if not pc.all(pc.ends_with(raw, suffix)).as_py():
            return None
        raw = pc.utf8_slice_codeunits(raw, 0, -len(suffix))
    try:
        if low is None or high is None:
            column = raw.cast(pa.float64())
            peak = pc.max(pc.abs(column)).as_py()
            if not pc.all(pc.is_finite(column)).as_py() or (ctype.name == "FLOAT" and peak > FLOAT_MAX):
                return None
        else:
            column = raw.cast(pa.uint64() if low == 0 else _INT64)
            bounds = pc.min_max(column)
            if bounds["min"].as_py() < low or bounds["max"].as_py() > high:
                return None
    except pa.ArrowInvalid:  # no number, past 64 bits, "-0" unsigned: the reference decides
        return None
    return ctype, column.cast(ctype.arrow())


def _timestamps(ts: pa.Array, mult: int) -> pa.Array | None:
    """int64 nanoseconds (null for an absent or 0 timestamp, TDengine's "now"); None when the reference must decide."""
    if ts.null_count == len(ts):
        return pa.nulls(len(ts), _INT64)
    try:  # Arrow's integers are the reference's: [-]digits, no "+", no blanks
        ns = pc.multiply_checked(ts.cast(_INT64), mult)
    except pa.ArrowInvalid:
        return None
    return pc.if_else(pc.equal(ns, 0), None, ns)


# ------------------------------------------------------ lines of the reference


def _point_groups(points: list[tuple[int, Point]], series: _Series) -> list[_Group]:
    """Points the reference parsed (with their 0-based lines) as groups of one measurement, field keys and type names
    each (string types widened to the longest)."""
    by_shape: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[tuple[int, Point, int]]] = {}
    for i, p in points:
        sid = series.id((p.measurement, p.tags), i)
        shape = (p.measurement, tuple(f[0] for f in p.fields), tuple(f[1].name for f in p.fields))
        by_shape.setdefault(shape, []).append((i, p, sid))
    groups = []
    for (measurement, keys, _), rows in by_shape.items():
        types = []
        for j, key in enumerate(keys):
            ctype = rows[0][1].fields[j][1]
            for _, p, _ in rows[1:]:
                ctype = _widest(ctype, p.fields[j][1], key, measurement)
            types.append(ctype)
        columns = [pa.array([p.fields[j][2] for _, p, _ in rows], t.arrow()) for j, t in enumerate(types)]
        groups.append(_Group(measurement, keys, tuple(types), columns, pa.array([p.ts_ns for _, p, _ in rows], _INT64),
                             pa.array([i for i, _, _ in rows], _INT64), pa.array([s for _, _, s in rows], pa.int32())))
    return groups


def _widest(old: ColumnType | None, new: ColumnType, name: str, measurement: str) -> ColumnType:
    """The type a schemaless key takes when it is ``old`` in one line and ``new`` in another of one request."""
    if old is None or old == new:
        return new
    if old.name == new.name and old.is_string:
        return old if (old.length or 0) >= (new.length or 0) else new
    raise InvalidValue(f"Measurement {measurement}: field {name} is {new} in one line and {old} in another")


def _reference_widening(points: Iterable[Point]) -> None:
    """The reference walk: series by first appearance, their lines in order; raises the first type conflict."""
    series: dict[tuple[str, Tags], list[Point]] = {}
    for p in points:
        series.setdefault((p.measurement, p.tags), []).append(p)
    cols: dict[str, dict[str, ColumnType]] = {}
    for (m, _), pts in series.items():
        have = cols.setdefault(m, {})
        for p in pts:
            for k, ctype, _v in p.fields:
                have[k] = _widest(have.get(k), ctype, k, m)


# ----------------------------------------------------------------- assembly


def _assemble(groups: list[_Group], series: _Series) -> list[Measurement]:
    """Groups joined into measurements (see :class:`Measurement`); InvalidValue when a key's types disagree."""
    order = sorted(range(len(series.first)), key=series.first.__getitem__)
    rank = [0] * len(order)
    for r, sid in enumerate(order):
        rank[sid] = r
    ranks = pa.array(rank, _INT64)
    keyed = []
    for g in groups:
        walk = pc.add(pc.multiply(ranks.take(g.series), 1 << 32), g.lines)
        keyed.append((pc.min(walk).as_py(), g, walk))
    keyed.sort(key=lambda k: k[0])
    by_measurement: dict[str, list[tuple[_Group, pa.Array]]] = {}
    fields: dict[str, dict[str, ColumnType]] = {}
    for _, g, walk in keyed:
        by_measurement.setdefault(g.measurement, []).append((g, walk))
        have = fields.setdefault(g.measurement, {})
        for key, ctype in zip(g.keys, g.types):
            have[key] = _widest(have.get(key), ctype, key, g.measurement)
    tag_sets = {sid: key for key, sid in series.ids.items()}
    out = []
    for name, members in by_measurement.items():
        cols = fields[name]
        sids = sorted({s for g, _ in members for s in g.series.unique().to_pylist()}, key=rank.__getitem__)
        local = [0] * len(rank)
        tags: dict[str, ColumnType] = {}
        for n, sid in enumerate(sids):
            local[sid] = n
            for k, v in tag_sets[sid][1]:
                tags[k] = _widest(tags.get(k), ColumnType("NCHAR", max(len(v), 1)), k, name)
        to_local = pa.array(local, pa.int32())
        parts = []
        for g, walk in members:
            given = dict(zip(g.keys, g.columns))
            arrays = [to_local.take(g.series), g.ts, walk]
            for key, ctype in cols.items():
                column = given.get(key)
                arrays.append(pa.nulls(len(walk), ctype.arrow()) if column is None else column.cast(ctype.arrow()))
            parts.append(pa.Table.from_arrays(arrays, ["series", "ts_ns", "walk", *cols]))
        table = pa.concat_tables(parts)
        rows = table.take(pc.sort_indices(table.column(2))).remove_column(2).combine_chunks().to_batches()[0]
        out.append(Measurement(name, cols, tags, [(tag_sets[sid][1], series.first[sid] + 1) for sid in sids], rows))
    return out
