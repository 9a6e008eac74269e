"""Unit tests of walgate.storage.csvfile (CSV import splitting)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.storage.csvfile import parse_csv
from walgate.storage.errors import CsvError


def error(body: str | bytes) -> str:
    with pytest.raises(CsvError) as info:
        parse_csv(body)
    return str(info.value)


def test_header_and_rows() -> None:
    body = "ts,current,voltage\n1648432611249,10.3,219\n1648432612249,10.4,220\n"
    assert parse_csv(body) == (
        ["ts", "current", "voltage"],
        [["1648432611249", "10.3", "219"], ["1648432612249", "10.4", "220"]],
        [2, 3],
    )


def test_bytes_crlf_and_bom() -> None:
    body = "\ufeffts,v\r\n1,a\r\n2,b\r\n".encode()
    assert parse_csv(body) == (["ts", "v"], [["1", "a"], ["2", "b"]], [2, 3])
    assert parse_csv("\ufeffts\n1\n") == (["ts"], [["1"]], [2])


def test_header_names_are_stripped_and_lower_cased_unless_back_quoted() -> None:
    header, rows, _ = parse_csv(" TS , Current,`Voltage`, `Mixed Case` \n1,2,3,4\n")
    assert header == ["ts", "current", "Voltage", "Mixed Case"]
    assert rows == [["1", "2", "3", "4"]]


def test_header_only() -> None:
    assert parse_csv("ts,v\n") == (["ts", "v"], [], [])


def test_empty_unquoted_field_is_null_and_quoted_empty_is_empty_string() -> None:
    header, rows, _ = parse_csv('a,b,c\n1,,""\n,"",\n"","",""\n')
    assert rows == [["1", None, ""], [None, "", None], ["", "", ""]]


def test_null_detection_with_doubled_quotes_in_the_same_record() -> None:
    _, rows, _ = parse_csv('a,b,c,d\n"say ""hi""",,"""",""\n')
    assert rows == [['say "hi"', None, '"', ""]]


def test_blank_fields_are_not_null() -> None:
    _, rows, _ = parse_csv("a,b\n ,x\n")
    assert rows == [[" ", "x"]]


def test_quoted_fields_hold_delimiters_quotes_and_newlines() -> None:
    _, rows, _ = parse_csv('a,b\n"x,y","two\nlines"\n"a ""q""",\n')
    assert rows == [["x,y", "two\nlines"], ['a "q"', None]]


def test_blank_lines_are_skipped_anywhere() -> None:
    assert parse_csv("\n\na,b\n\n1,2\n\r\n3,4\n\n\n") == (["a", "b"], [["1", "2"], ["3", "4"]], [5, 7])


def test_no_trailing_newline() -> None:
    assert parse_csv("a,b\n1,") == (["a", "b"], [["1", None]], [2])


@pytest.mark.parametrize("body", ["", "\n", "\r\n\r\n", b""])
def test_empty_body(body: str | bytes) -> None:
    assert error(body) == "empty CSV: no header row"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a,b,a\n", "line 1: duplicate column name 'a' in the header"),
        ("A,b,a\n", "line 1: duplicate column name 'a' in the header"),
        ("`a`,A\n", "line 1: duplicate column name 'a' in the header"),
    ],
)
def test_duplicate_header_names(body: str, message: str) -> None:
    assert error(body) == message


def test_back_quoted_names_keep_case_so_they_can_differ() -> None:
    assert parse_csv("`A`,a\n1,2\n")[0] == ["A", "a"]


@pytest.mark.parametrize("header", ["a,,b", "a, ,b", 'a,"",b', "a,``,b", "a,`,b", "a,b`c,d"])
def test_invalid_header_names(header: str) -> None:
    assert error(header + "\n").startswith("line 1: invalid column name ")


def test_header_after_blank_lines_reports_its_line() -> None:
    assert error("\n\na,a\n") == "line 3: duplicate column name 'a' in the header"


def test_row_arity_errors_name_line_and_counts() -> None:
    assert error("a,b,c\n1,2,3\n1,2\n") == "line 3: expected 3 fields (as in the header), got 2"
    assert error("a,b\n1,2\n\n1,2,3\n") == "line 4: expected 2 fields (as in the header), got 3"


def test_arity_error_names_the_line_where_a_multiline_record_starts() -> None:
    assert error('a,b\n1,"x\ny\nz"\n2,"p\nq",extra\n') == "line 5: expected 2 fields (as in the header), got 3"


def test_malformed_quoting_is_an_error() -> None:
    assert error('a,b\n1,"x"y\n') == "line 2: ',' expected after '\"'"


def test_unterminated_quote_is_an_error() -> None:
    assert error('a,b\n1,"open\n2,3\n') == "line 2: unexpected end of data"


def test_invalid_utf8() -> None:
    assert error(b"a,b\n1,2\n3,\xff\n") == "line 3: not valid UTF-8"


_cells = st.one_of(st.none(), st.text(st.characters(codec="utf-8", exclude_characters="\r\x00"), max_size=8))


def _render(cell: str | None) -> str:
    return "" if cell is None else '"' + cell.replace('"', '""') + '"'


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(_cells, min_size=3, max_size=3), max_size=5))
def test_round_trip_of_quoted_cells_and_nulls(rows: list[list[str | None]]) -> None:
    body = "a,b,c\n" + "".join(",".join(_render(c) for c in row) + "\n" for row in rows)
    assert parse_csv(body)[:2] == (["a", "b", "c"], rows)
