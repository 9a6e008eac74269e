"""Unit tests of walgate.storage.lineproto (InfluxDB line protocol, TDengine flavour)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.storage.errors import LineProtocolError
from walgate.storage.lineproto import Point, child_table_name, parse_lines
from walgate.storage.schema import ColumnType

DOUBLE = ColumnType("DOUBLE")
SAMPLE = "meters,location=California.SanFrancisco,groupid=2 current=10.3,voltage=219i32,phase=0.31 1648432611249000000"


def one(line: str, precision: str = "ns") -> Point:
    points = parse_lines(line, precision)
    assert len(points) == 1
    return points[0]


def field(line: str) -> tuple[ColumnType, object]:
    """Type and value of the only field of ``m f=<value>``."""
    ((key, ctype, value),) = one(line).fields
    assert key == "f"
    return ctype, value


def error(body: str | bytes, precision: str = "ns") -> str:
    with pytest.raises(LineProtocolError) as info:
        parse_lines(body, precision)
    return str(info.value)


# ------------------------------------------------------------------ basics


def test_sample_line() -> None:
    assert parse_lines(SAMPLE, "ns") == [
        Point(
            measurement="meters",
            tags=(("groupid", "2"), ("location", "California.SanFrancisco")),
            fields=(
                ("current", DOUBLE, 10.3),
                ("voltage", ColumnType("INT"), 219),
                ("phase", DOUBLE, 0.31),
            ),
            ts_ns=1648432611249000000,
        )
    ]


def test_bytes_and_str_bodies_agree() -> None:
    assert parse_lines(SAMPLE.encode(), "ns") == parse_lines(SAMPLE, "ns")


def test_point_is_frozen_and_hashable() -> None:
    point = one(SAMPLE)
    with pytest.raises(AttributeError):
        point.ts_ns = 1  # type: ignore[misc]
    assert hash(point) == hash(one(SAMPLE))


def test_comments_blank_lines_crlf_and_surrounding_blanks() -> None:
    body = "# a comment\r\n\r\n   \n  m f=1i 5\r\n   # indented comment\nm f=2i 6\r\n\r\n"
    assert parse_lines(body, "ns") == [
        Point("m", (), (("f", ColumnType("BIGINT"), 1),), 5),
        Point("m", (), (("f", ColumnType("BIGINT"), 2),), 6),
    ]


def test_empty_body() -> None:
    assert parse_lines(b"", "ns") == []
    assert parse_lines("\n\n# only comments\n", "ms") == []


def test_several_spaces_between_sections() -> None:
    assert one("m,t=a    f=1i     7   ") == one("m,t=a f=1i 7")


def test_tags_are_optional_and_strings() -> None:
    point = one("m,num=1i,flag=true,quote=\"x\" f=1")
    assert point.tags == (("flag", "true"), ("num", "1i"), ("quote", '"x"'))


def test_tags_sorted_like_tdengine_case_insensitively_and_fields_keep_order() -> None:
    point = one("m,b=2,C=3,a=1,Ab=4 z=1,y=2,m=3")
    assert point.tags == (("a", "1"), ("Ab", "4"), ("b", "2"), ("C", "3"))
    assert [key for key, _, _ in point.fields] == ["z", "y", "m"]


def test_names_keep_their_case_and_dots() -> None:
    point = one("Meters.Room,Location=SF Current=1")
    assert point.measurement == "Meters.Room"
    assert point.tags == (("Location", "SF"),)
    assert point.fields[0][0] == "Current"


def test_repeated_items_across_lines_give_equal_fields() -> None:
    lines = [f"m,g={i % 3} a=1i,b={i}i {i + 1}" for i in range(3000)]  # more distinct items than the memo holds
    points = parse_lines("\n".join(lines), "ns")
    assert len(points) == 3000
    assert points[2999] == Point("m", (("g", "2"),), (("a", ColumnType("BIGINT"), 1), ("b", ColumnType("BIGINT"), 2999)), 3000)
    assert all(p.fields[0] == ("a", ColumnType("BIGINT"), 1) for p in points)


# ------------------------------------------------------------- field types


@pytest.mark.parametrize(
    ("raw", "ctype", "value"),
    [
        ("1", DOUBLE, 1.0),
        ("1.5", DOUBLE, 1.5),
        ("-1.5", DOUBLE, -1.5),
        ("+2", DOUBLE, 2.0),
        ("1.", DOUBLE, 1.0),
        (".5", DOUBLE, 0.5),
        ("1e3", DOUBLE, 1000.0),
        ("-1.5E-3", DOUBLE, -0.0015),
        ("1.0f64", DOUBLE, 1.0),
        ("2.5f32", ColumnType("FLOAT"), 2.5),
        ("-1e3f32", ColumnType("FLOAT"), -1000.0),
        ("1i8", ColumnType("TINYINT"), 1),
        ("-2i16", ColumnType("SMALLINT"), -2),
        ("3i32", ColumnType("INT"), 3),
        ("4i64", ColumnType("BIGINT"), 4),
        ("5i", ColumnType("BIGINT"), 5),
        ("+6i", ColumnType("BIGINT"), 6),
        ("7u8", ColumnType("TINYINT UNSIGNED"), 7),
        ("8u16", ColumnType("SMALLINT UNSIGNED"), 8),
        ("9u32", ColumnType("INT UNSIGNED"), 9),
        ("10u64", ColumnType("BIGINT UNSIGNED"), 10),
        ("11u", ColumnType("BIGINT UNSIGNED"), 11),
    ],
)
def test_numeric_suffixes(raw: str, ctype: ColumnType, value: object) -> None:
    got_type, got = field(f"m f={raw}")
    assert got_type == ctype
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("raw", ["t", "T", "true", "True", "TRUE"])
def test_true_spellings(raw: str) -> None:
    assert field(f"m f={raw}") == (ColumnType("BOOL"), True)


@pytest.mark.parametrize("raw", ["f", "F", "false", "False", "FALSE"])
def test_false_spellings(raw: str) -> None:
    assert field(f"m f={raw}") == (ColumnType("BOOL"), False)


@pytest.mark.parametrize(
    ("suffix", "name", "low", "high"),
    [
        ("i8", "TINYINT", -128, 127),
        ("i16", "SMALLINT", -32768, 32767),
        ("i32", "INT", -(2**31), 2**31 - 1),
        ("i64", "BIGINT", -(2**63), 2**63 - 1),
        ("i", "BIGINT", -(2**63), 2**63 - 1),
        ("u8", "TINYINT UNSIGNED", 0, 255),
        ("u16", "SMALLINT UNSIGNED", 0, 65535),
        ("u32", "INT UNSIGNED", 0, 2**32 - 1),
        ("u64", "BIGINT UNSIGNED", 0, 2**64 - 1),
        ("u", "BIGINT UNSIGNED", 0, 2**64 - 1),
    ],
)
def test_integer_ranges(suffix: str, name: str, low: int, high: int) -> None:
    assert field(f"m f={low}{suffix}") == (ColumnType(name), low)
    assert field(f"m f={high}{suffix}") == (ColumnType(name), high)
    for bad in (low - 1, high + 1):
        message = error(f"m f={bad}{suffix}")
        assert message == f"line 1: value '{bad}{suffix}' of field 'f' is out of range for {name} ({low}..{high}): 'm f={bad}{suffix}'"


def test_float_ranges() -> None:
    assert field("m f=3.4e38f32") == (ColumnType("FLOAT"), 3.4e38)
    assert "out of range for FLOAT" in error("m f=3.5e38f32")
    assert "out of range for DOUBLE" in error("m f=1e309")
    assert "out of range for DOUBLE" in error("m f=" + "9" * 400)


@pytest.mark.parametrize(
    "raw", ["nan", "NaN", "inf", "-inf", "infinity", "1_000", "0x10", "1.5i", "1e3i", "1.5u8", "i8", "u", "f32", "1e", "--1", "1..2", "abc", "yes", "1=2", "\u0661"]
)
def test_invalid_unquoted_values(raw: str) -> None:
    assert error(f"m f={raw}") == (
        f"line 1: invalid value {raw!r} for field 'f': expected a number, a boolean or a quoted string: 'm f={raw}'"
    )


def test_missing_value() -> None:
    assert error("m f=") == "line 1: missing value for field 'f': expected a number, a boolean or a quoted string: 'm f='"


def test_varchar_length_is_utf8_bytes() -> None:
    assert field('m f="abc"') == (ColumnType("VARCHAR", 3), "abc")
    assert field('m f="héllo"') == (ColumnType("VARCHAR", 6), "héllo")
    assert field('m f=""') == (ColumnType("VARCHAR", 0), "")


def test_nchar_length_is_characters() -> None:
    assert field('m f=L"héllo"') == (ColumnType("NCHAR", 5), "héllo")
    assert field('m f=l"日本"') == (ColumnType("NCHAR", 2), "日本")


def test_string_values_hold_separators() -> None:
    point = one('m s="a, b=c d",n=1i 5')
    assert point.fields == (("s", ColumnType("VARCHAR", 8), "a, b=c d"), ("n", ColumnType("BIGINT"), 1))
    assert point.ts_ns == 5


def test_string_escapes() -> None:
    assert field(r'm f="say \"hi\""') == (ColumnType("VARCHAR", 8), 'say "hi"')
    assert field(r'm f="back\\slash"') == (ColumnType("VARCHAR", 10), "back\\slash")
    assert field(r'm f="tab\t stays"') == (ColumnType("VARCHAR", 11), "tab\\t stays")
    assert field(r'm f="ends with \\"') == (ColumnType("VARCHAR", 11), "ends with \\")


def test_string_errors() -> None:
    assert error('m f="abc') == "line 1: unterminated string value of field 'f': 'm f=\"abc'"
    assert "unterminated string value of field 'f'" in error(r'm f="abc\"')
    assert "unterminated string value of field 'f'" in error('m f=L"a, b')
    assert error('m f="a"b 1') == "line 1: unexpected 'b' after the value of field 'f': 'm f=\"a\"b 1'"


# ----------------------------------------------------------------- escapes


def test_measurement_escapes() -> None:
    assert one(r"my\ meas\,ure f=1").measurement == "my meas,ure"
    assert one(r"a=b f=1").measurement == "a=b"  # '=' needs no escape in a measurement
    assert one(r"a\=b f=1").measurement == "a\\=b"  # ... so '\=' stays as written
    assert one(r"m\\ f=1").measurement == "m\\"  # '\\' is one backslash, and the space ends the measurement
    assert one(r"m\x f=1").measurement == "m\\x"


def test_tag_and_field_key_escapes() -> None:
    point = one(r"m,tag\ key\,1\=x=va\ lue\,2\=y fi\ eld\,k\=z=1i")
    assert point.tags == (("tag key,1=x", "va lue,2=y"),)
    assert point.fields == (("fi eld,k=z", ColumnType("BIGINT"), 1),)


def test_backslash_before_other_characters_is_literal() -> None:
    point = one(r"m,path=C:\dir\file f\n=1")
    assert point.tags == (("path", "C:\\dir\\file"),)
    assert point.fields[0][0] == "f\\n"


def test_quotes_in_names_are_literal() -> None:
    point = one('m,t="v" k"q=1i')
    assert point.tags == (("t", '"v"'),)
    assert point.fields == (('k"q', ColumnType("BIGINT"), 1),)


def test_escaped_space_at_end_of_tag_value() -> None:
    assert one(r"m,t=a\  f=1").tags == (("t", "a "),)


# -------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    ("precision", "ts_ns"), [("ns", 1648432611), ("us", 1648432611000), ("ms", 1648432611000000), ("s", 1648432611000000000)]
)
def test_precision_conversion(precision: str, ts_ns: int) -> None:
    assert one("m f=1 1648432611", precision).ts_ns == ts_ns


def test_absent_or_zero_timestamp_means_now() -> None:
    assert one("m f=1").ts_ns is None
    assert one("m f=1 0", "ms").ts_ns is None


def test_negative_timestamp() -> None:
    assert one("m f=1 -5", "ms").ts_ns == -5_000_000


def test_timestamp_errors() -> None:
    assert error("m f=1 12x") == "line 1: invalid timestamp '12x': expected an integer: 'm f=1 12x'"
    assert "invalid timestamp '1.5'" in error("m f=1 1.5")
    assert "invalid timestamp '1 2'" in error("m f=1 1 2")
    assert "invalid timestamp '+5'" in error("m f=1 +5")
    assert "invalid timestamp '\u0661'" in error("m f=1 \u0661")
    assert "out of the int64 nanosecond range" in error(f"m f=1 {2**63}")
    assert "out of the int64 nanosecond range" in error("m f=1 9223372036855", "ms")
    assert one(f"m f=1 {2**63 - 1}").ts_ns == 2**63 - 1


@pytest.mark.parametrize("precision", ["n", "u", "m", "h", "NS", "", "msec"])
def test_unknown_precision(precision: str) -> None:
    assert error("m f=1", precision) == f"unknown precision {precision!r}: expected ns, us, ms or s"


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("m", "no fields (expected a space and field=value after the measurement and tags)"),
        ("m,t=1", "no fields (expected a space and field=value after the measurement and tags)"),
        ("m f", "field 'f' has no '=value'"),
        ("m f=1,g", "field 'g' has no '=value'"),
        ("m =1", "empty field key"),
        ("m f=1,", "empty field key"),
        ("m f=1,,g=2", "empty field key"),
        (",t=1 f=1", "missing measurement"),
        ("m,=1 f=1", "empty tag key"),
        ("m,t f=1", "tag 't' has no '=value'"),
        ("m,t= f=1", "tag 't' has an empty value"),
        ("m,t=a=b f=1", "unescaped '=' in the value of tag 't'"),
        ("m,t=1,t=2 f=1", "duplicate tag key 't'"),
        ("m,t=1 t=2", "key 't' is used as a tag and a field"),
        ("m f=1,f=2", "key 'f' is used as a field twice"),
        ("m f=1i,g=300i8", "value '300i8' of field 'g' is out of range for TINYINT (-128..127)"),
    ],
)
def test_line_errors(line: str, what: str) -> None:
    assert error(line) == f"line 1: {what}: {line!r}"


def test_error_names_the_line_number_and_nothing_is_returned() -> None:
    body = "m f=1 1\n# comment\n\nm f=2 2\nm f=bad 3\nm f=4 4\n"
    assert error(body) == "line 5: invalid value 'bad' for field 'f': expected a number, a boolean or a quoted string: 'm f=bad 3'"


def test_error_quotes_long_lines_truncated() -> None:
    line = "m " + ",".join(f"f{i}=1i" for i in range(100)) + " x"
    message = error(line)
    assert message.startswith("line 1: invalid timestamp 'x': expected an integer: ")
    assert message.endswith(repr(line[:200] + "..."))


def test_invalid_utf8_names_its_line() -> None:
    assert error(b"m f=1\nm f=\xff 1\n") == "line 2: not valid UTF-8: 'm f=\ufffd 1'"


def test_name_length_limits_count_utf8_bytes() -> None:
    assert one("m," + "k" * 64 + "=1 f=1").tags == (("k" * 64, "1"),)
    assert "tag key 'ééé" in error("m," + "é" * 33 + "=1 f=1")
    assert "is longer than 64 bytes" in error("m " + "é" * 33 + "=1")
    assert one("é" * 96 + " f=1").measurement == "é" * 96
    assert "measurement is longer than 192 bytes" in error("é" * 97 + " f=1")


def test_scanner_and_fast_path_agree() -> None:
    line = "cpu,host=a,region=eu usage=1.5,count=3i,ok=t 1700000000000000000"
    slow = line.replace(" ", "  ")  # extra spaces send the line through the scanner
    assert one(slow) == one(line)


# ------------------------------------------------------------ table names


def test_child_table_name_is_md5_of_sorted_tags() -> None:
    tags = (("location", "California.SanFrancisco"), ("groupid", "2"))
    expected = "t_" + hashlib.md5(b"meters,groupid=2,location=California.SanFrancisco").hexdigest()
    assert child_table_name("meters", tags) == expected
    assert child_table_name("meters", tags[::-1]) == expected
    assert child_table_name("meters", one(SAMPLE).tags) == expected
    assert expected == "t_251f05d65163f70e2d23faaaa5338caa"


def test_child_table_name_orders_keys_case_insensitively_and_hashes_utf8() -> None:
    tags = (("b", "x"), ("A", "é"))
    assert child_table_name("m", tags) == "t_" + hashlib.md5("m,A=é,b=x".encode()).hexdigest()


def test_child_table_name_without_tags_and_distinctness() -> None:
    assert child_table_name("m", ()) == "t_" + hashlib.md5(b"m").hexdigest()
    assert child_table_name("m", (("t", "1"),)) != child_table_name("m", (("t", "2"),))
    assert len(child_table_name("m", (("t", "1"),))) == 34


def test_huge_numbers_are_range_errors_not_crashes() -> None:
    assert "out of range for BIGINT" in error("m f=" + "9" * 5000 + "i")
    assert "out of the int64 nanosecond range" in error("m f=1 " + "9" * 5000)
    assert field("m f=" + "0" * 30 + "1i8") == (ColumnType("TINYINT"), 1)


# --------------------------------------------------------------- property


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(alphabet=st.sampled_from('m,t=f 1i"\\L.\r\n#-e'), max_size=40), st.binary(max_size=40)))
def test_any_input_parses_or_raises_line_protocol_error(body: str | bytes) -> None:
    try:
        points = parse_lines(body, "ms")
    except LineProtocolError as exc:
        assert str(exc).startswith(("line ", "unknown precision"))
    else:
        assert all(isinstance(p, Point) and p.fields for p in points)


def _escape_name(text: str, specials: str) -> str:
    out = text.replace("\\", "\\\\")
    for ch in specials:
        out = out.replace(ch, "\\" + ch)
    return out


_names = st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=1, max_size=10).filter(
    lambda s: s.strip(" ") == s and not s.startswith("#") and len(s.encode()) <= 64
)
_values = st.one_of(
    st.booleans().map(lambda b: ("true" if b else "false", ColumnType("BOOL"), b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: (f"{n}i", ColumnType("BIGINT"), n)),
    st.integers(0, 255).map(lambda n: (f"{n}u8", ColumnType("TINYINT UNSIGNED"), n)),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: (repr(x), DOUBLE, x)),
    st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=10).map(
        lambda s: ('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"', ColumnType("VARCHAR", len(s.encode())), s)
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    measurement=_names,
    tags=st.dictionaries(_names, _names, max_size=4),
    fields=st.dictionaries(_names, _values, min_size=1, max_size=4),
    ts=st.one_of(st.none(), st.integers(1, 2**63 - 1)),
)
def test_round_trip_of_escaped_lines(
    measurement: str, tags: dict[str, str], fields: dict[str, tuple[str, ColumnType, object]], ts: int | None
) -> None:
    fields = {k: v for k, v in fields.items() if k not in tags}
    if not fields:
        return
    head = _escape_name(measurement, ", ") + "".join(
        f",{_escape_name(k, ',= ')}={_escape_name(v, ',= ')}" for k, v in tags.items()
    )
    body = ",".join(f"{_escape_name(k, ',= ')}={text}" for k, (text, _, _) in fields.items())
    line = f"{head} {body}" + ("" if ts is None else f" {ts}")
    point = one(line)
    assert point.measurement == measurement
    assert dict(point.tags) == tags
    assert point.fields == tuple((k, ctype, value) for k, (_, ctype, value) in fields.items())
    assert point.ts_ns == ts
