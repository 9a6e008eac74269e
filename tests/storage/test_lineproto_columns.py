"""walgate.storage.lineproto_columns: whole bodies by Arrow columns give what the line-by-line reference gives.

The differential test feeds random bodies (mostly plain lines, which take the column path, mixed with escapes, quoted
strings, odd spacing, comments and bad values, which take the reference's) to :func:`parse_body` and compares the
measurements or the error with :func:`parse_body_by_lines` and with an oracle built here from the reference's
points (:func:`walgate.storage.lineproto.parse_lines`).
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.storage.errors import InvalidValue, LineProtocolError
from walgate.storage.lineproto import parse_lines
from walgate.storage.lineproto_columns import Measurement, parse_body, parse_body_by_lines
from walgate.storage.schema import ColumnType

MEASUREMENTS = ["m", "m", "cpu", "m\\ 1", "ü"]
TAG_KEYS = ["t", "host", "Region", "f1"]
TAG_VALUES = ["a", "b", "1", "a\\,b", "ü"]
FIELD_KEYS = ["f1", "f2", "f3", "Usage", "k\\ 2"]
VALUES = ["1", "-2.5", ".5", "5.", "1e3", "+7", "-0", "1f32", "2.5f64", "3.5e38f32", "1e309", "127i8", "128i8",
          "-128i8", "7i16", "7i32", "9223372036854775807i", "9223372036854775808i", "-5i64", "+5i", "255u8",
          "256u8", "-0u8", "18446744073709551615u", "7u32", "1u16", "t", "F", "true", "FALSE", "yes", '"s"', '"a b,c=d"',
          'L"ü"', '"q\\"q"', "", "inf", "nan", "1_0", "0x1", "a=b"]
TIMESTAMPS = ["", "", "1700000000000", "1700000000001", "0", "-0", "-1", "-1700000000123", "9223372036854775807",
              "9223372036854775808", "+5", "1.5", "007"]


def _line(m: str, tags: list[tuple[str, str]], fields: list[tuple[str, str]], ts: str, sep: str) -> str:
    head = m + "".join(f",{k}={v}" for k, v in tags)
    return head + sep + ",".join(f"{k}={v}" for k, v in fields) + (f"{sep}{ts}" if ts else "")


plain_values = (st.sampled_from(VALUES[:8]) | st.sampled_from(["1i", "2i", "-3i", "t", "f", "9u8"])
                | st.sampled_from(["1e309", "inf", "nan", "3.5e38f32", "128i8", "-0u8", "+5i", "18446744073709551616u"]))
plain_lines = st.builds(
    _line,
    st.sampled_from(["m", "cpu"]),
    st.lists(st.tuples(st.sampled_from(["t", "host"]), st.sampled_from(["a", "b"])), max_size=2, unique_by=lambda t: t[0]),
    st.sampled_from([("f1",), ("f1", "f2"), ("f2", "f1", "f3")]).flatmap(
        lambda keys: st.tuples(*(st.tuples(st.just(k), plain_values) for k in keys)).map(list)),
    st.sampled_from(TIMESTAMPS[:7]),
    st.just(" "),
)
any_lines = st.builds(
    _line,
    st.sampled_from(MEASUREMENTS),
    st.lists(st.tuples(st.sampled_from(TAG_KEYS), st.sampled_from(TAG_VALUES)), max_size=3),
    st.lists(st.tuples(st.sampled_from(FIELD_KEYS), st.sampled_from(VALUES)), min_size=1, max_size=3),
    st.sampled_from(TIMESTAMPS),
    st.sampled_from([" ", " ", " ", "  "]),
)
bodies = st.lists(
    st.one_of(plain_lines, plain_lines, plain_lines, plain_lines, any_lines, st.sampled_from(["", "# c", "  ", "\r"])),
    min_size=1, max_size=12,
).flatmap(lambda ls: st.sampled_from(["\n", "\r\n"]).map(lambda sep: sep.join(ls)))


def _outcome(parse: Any, body: str, precision: str) -> Any:
    try:
        return [_comparable(m) for m in parse(body, precision)]
    except (LineProtocolError, InvalidValue) as exc:
        return type(exc).__name__, str(exc)


def _comparable(m: Measurement) -> tuple[Any, ...]:
    return m.name, m.fields, m.tags, m.series, m.rows.schema, m.rows.to_pylist()


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def _oracle(body: str, precision: str) -> Any:
    """What parse_body must give, from the reference's points: widening in the reference walk's order."""
    try:
        points = parse_lines(body, precision)
    except LineProtocolError as exc:
        return "LineProtocolError", str(exc)
    numbers = [i for i, raw in enumerate(body.split("\n"), 1) if raw.strip(" \r") and raw.strip(" \r")[0] != "#"]
    series: dict[tuple[str, Any], list[tuple[int, Any]]] = {}
    for line, p in zip(numbers, points):
        series.setdefault((p.measurement, p.tags), []).append((line, p))
    out: dict[str, dict[str, Any]] = {}
    for (name, tags), rows in series.items():
        m = out.setdefault(name, {"fields": {}, "tags": {}, "series": [], "rows": []})
        for k, v in tags:
            have = m["tags"].get(k)
            m["tags"][k] = ColumnType("NCHAR", max(len(v), 1, have.length if have else 0))
        for _, p in rows:
            for k, ctype, _ in p.fields:
                have = m["fields"].get(k)
                if have is not None and have != ctype:
                    if have.name != ctype.name or not have.is_string:
                        return "InvalidValue", f"Measurement {name}: field {k} is {ctype} in one line and {have} in another"
                    ctype = max(have, ctype, key=lambda t: t.length or 0)
                m["fields"][k] = ctype
        m["series"].append((tags, rows[0][0]))
        m["rows"] += [(len(m["series"]) - 1, p) for _, p in rows]
    result = []
    for name, m in out.items():
        rows = []
        for n, p in m["rows"]:
            values = {k: (_f32(v) if t.name == "FLOAT" else v) for k, t, v in p.fields}
            rows.append({"series": n, "ts_ns": p.ts_ns, **{k: values.get(k) for k in m["fields"]}})
        result.append((name, m["fields"], m["tags"], m["series"], rows))
    return result


@settings(max_examples=500, deadline=None)
@given(body=bodies, precision=st.sampled_from(["ns", "us", "ms", "s"]))
def test_columns_match_the_reference(body: str, precision: str) -> None:
    columns = _outcome(parse_body, body, precision)
    assert columns == _outcome(parse_body_by_lines, body, precision)
    expected = _oracle(body, precision)
    if isinstance(columns, list):
        assert [(n, f, t, s, rows) for n, f, t, s, _, rows in columns] == expected
    else:
        assert columns == expected


def test_plain_body_takes_the_columns_and_keeps_line_order() -> None:
    body = "m,t=b f1=1i 1\nm,t=a f1=2i,f2=t 2\nm,t=b f1=3i\n# c\n\ncpu f=1.5f32 4\nm,t=a f2=f,f1=4i 5"
    (m, cpu) = parse_body(body, "ms")
    assert m.name == "m" and cpu.name == "cpu"
    assert m.fields == {"f1": ColumnType("BIGINT"), "f2": ColumnType("BOOL")}
    assert m.series == [((("t", "b"),), 1), ((("t", "a"),), 2)]
    assert m.rows.to_pylist() == [
        {"series": 0, "ts_ns": 1_000_000, "f1": 1, "f2": None},
        {"series": 0, "ts_ns": None, "f1": 3, "f2": None},
        {"series": 1, "ts_ns": 2_000_000, "f1": 2, "f2": True},
        {"series": 1, "ts_ns": 5_000_000, "f1": 4, "f2": False},
    ]
    assert cpu.rows.to_pylist() == [{"series": 0, "ts_ns": 4_000_000, "f": 1.5}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("m f=1 1\nm f=128i8 2", "line 2: value '128i8' of field 'f' is out of range for TINYINT (-128..127)"),
        ("m f=1 1\nm,t=1 f=2 x", "line 2: invalid timestamp 'x': expected an integer"),
        ("m f=1 1\nm f=1i 2", "Measurement m: field f is BIGINT in one line and DOUBLE in another"),
        ('m s="ab" 1\nm s="abc" 2\nm s=1 3', "Measurement m: field s is DOUBLE in one line and VARCHAR(3) in another"),
    ],
)
def test_errors_name_the_reference_line(body: str, message: str) -> None:
    with pytest.raises((LineProtocolError, InvalidValue)) as info:
        parse_body(body, "ns")
    assert message in str(info.value)


def test_many_shapes_in_one_measurement() -> None:
    """Past the shapes typed by columns per measurement, lines go one by one, with the same result."""
    body = "\n".join(f"m,t={i % 3} f{i}=1i,g={i}.5 {i + 1}" for i in range(40))
    columns = _outcome(parse_body, body, "ns")
    assert columns == _outcome(parse_body_by_lines, body, "ns")
    assert [(n, f, t, s, rows) for n, f, t, s, _, rows in columns] == _oracle(body, "ns")
    assert len(columns[0][1]) == 41
