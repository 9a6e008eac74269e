"""Ingest by columns against ingest by rows: the same CSV bodies, INSERT statements and JSON rows into two identically
seeded engines, one of them made to take the row-by-row reference path, must give the same answers (rows written, or
the same error) and write the same WAL entries (metas and row blocks, compared decoded); and INSERT's VALUES lists read
as JSON must give the values the grammar's scanner gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fuzzing import seeded_engine
from hypothesis import given, settings
from hypothesis import strategies as st
from lark import Token

from walgate.storage import write_plan
from walgate.storage.engine import Engine
from walgate.storage.entry import decode_entry
from walgate.storage.errors import StorageError
from walgate.storage.sql.parser import _lark, _plain_insert, _RowReader, _StatementError

CSV_VALUES = {
    "ts": ["1700000000000", "1700000000001", "-1", "2023-11-14 22:13:20.5", "253402300800000", "x", "", " 17 "],
    "v": ["1", "-7", " 42 ", "2147483648", "+3", "1.5", "", "ü"],
    "f": ["1.5", "-2e3", ".5", "1e309", "nan", "7", ""],
    "s": ["abc", " a b ", "", "z" * 17, "ü"],
    "b": ["1", "FALSE", "true", "0", " t", "yes", ""],
    "n": ["n", "üüü", "x" * 9, ""],
    "u": ["18446744073709551615", "18446744073709551616", "-0", "5", ""],
    "ti": ["127", "-128", "128", "", "0"],
    "fl": ["1.5", "3.5e38", "-0", ""],
    "t": ["1", "2", "x", ""],
    "loc": ["sf", "", "la"],
    "tbname": ["d1", "d3", "d2", "", "a", "nt", "c"],
    "g": ["gg", "ggggg", ""],
}
TARGETS = {  # (table, stable) -> the header names that fit
    ("a", None): ["v", "f", "s", "b", "n", "u", "ti", "fl"],
    ("nt", None): ["v", "s"],
    (None, "m"): ["tbname", "tbname", "v", "f", "s", "b", "n", "u", "ti", "fl", "t", "loc"],
    (None, "alt"): ["tbname", "tbname", "v", "s", "t", "g"],
}


@st.composite
def csv_bodies(draw: st.DrawFn) -> tuple[str, tuple[str | None, str | None]]:
    """A body and its target: mostly the target's names in the header and fitting values, sometimes not."""
    target = draw(st.sampled_from(sorted(TARGETS, key=str)))
    names = TARGETS[target] + (["nosuch", "loc"] if draw(st.integers(0, 9)) == 0 else [])
    first = ["ts", "tbname"] if target[1] and draw(st.integers(0, 9)) else ["ts"]
    more = draw(st.lists(st.sampled_from(names), max_size=5, unique=True).map(lambda h: [n for n in h if n not in first]))
    header = draw(st.permutations(first + more))
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        row = [draw(st.sampled_from(CSV_VALUES.get(h, ["1"])[: 3 if draw(st.integers(0, 7)) else None]))
               for h in header]
        if draw(st.integers(0, 19)) == 0:
            row = row[:-1] or ['"q"']  # ragged, or quoted
        rows.append(row)
    blank = draw(st.sampled_from(["", "\n"]))
    return "\n".join(",".join(r) for r in [header, *rows]) + blank, target


def _dump(engine: Engine) -> list[Any]:
    """Every entry of every vnode WAL, decoded: metas without their time stamps, blocks as schema and rows."""
    out: list[Any] = []
    for db in sorted(engine.catalog.databases):
        for vnode in engine.vnodes[db]:
            for raw in vnode.wal.read_from(0):
                entry = decode_entry(raw)
                if entry.meta is not None:
                    out.append({k: v for k, v in entry.meta.items() if k != "ts"})
                out += [(b.source, b.is_stable, str(b.batch.schema), _rows(b.batch)) for b in entry.blocks]
    return out


def _rows(batch: pa.RecordBatch) -> list[list[Any]]:
    """Columns as Python values (timestamps as their ticks: years past 9999 have no datetime)."""
    return [(c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c).to_pylist() for c in batch.columns]


def _answer(write: Callable[[Engine], int], engine: Engine) -> Any:
    try:
        return write(engine)
    except StorageError as exc:
        return type(exc).__name__, str(exc)


def _rows_only(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``engine`` (alone) plan INSERT and CSV by rows: the planner's column paths are wrapped to decline while
    ``engine`` writes."""
    rows_only = [False]
    ingest = engine.ingest
    write = ingest.write

    def by_rows(request: write_plan.WriteRequest) -> int:
        rows_only[0] = True
        try:
            return write(request)
        finally:
            rows_only[0] = False

    csv_by_columns, insert = write_plan._csv_by_columns, write_plan._insert
    monkeypatch.setattr(ingest, "write", by_rows)
    monkeypatch.setattr(write_plan, "_csv_by_columns", lambda *args: None if rows_only[0] else csv_by_columns(*args))
    monkeypatch.setattr(write_plan, "_insert", lambda reads, s, session, now, by_columns: insert(
        reads, s, session, now, by_columns and not rows_only[0]))


@pytest.fixture
def engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Engine, Engine]:
    by_columns = seeded_engine(tmp_path / "columns")
    by_rows = seeded_engine(tmp_path / "rows")
    _rows_only(by_rows, monkeypatch)
    return by_columns, by_rows


def test_csv_by_columns_writes_what_rows_write(engines: tuple[Engine, Engine]) -> None:
    by_columns, by_rows = engines

    @settings(max_examples=300, deadline=None)
    @given(case=csv_bodies())
    def run(case: tuple[str, tuple[str | None, str | None]]) -> None:
        body, target = case

        def write(engine: Engine) -> int:
            return engine.write_csv("x", body.encode(), table=target[0], stable=target[1])

        assert _answer(write, by_columns) == _answer(write, by_rows)
        assert _dump(by_columns) == _dump(by_rows)

    run()


def test_csv_plain_body_is_typed_by_columns(engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch) -> None:
    by_columns, _ = engines
    monkeypatch.setattr(write_plan, "_csv_by_rows", None)  # the columns must take this body alone
    body = b"tbname,ts,v,f,t,loc\nd1,1700000000100,1,1.5,7,sf\nd9,1700000000101,,2e3,,\nd1,1700000000102,3,, ,la\n"
    assert by_columns.write_csv("x", body, stable="m") == 3
    rows = by_columns.execute("SELECT tbname, ts, v, f, t, loc FROM x.m WHERE ts >= 1700000000100 ORDER BY ts").rows
    assert [r[2:] for r in rows] == [[1, 1.5, 7, "sf"], [None, 2000.0, None, None], [3, None, 7, "sf"]]


SQL_VALUES = {
    "INT": ["1", "-7", "2147483648", "1.5", "'3'", "true", "NULL", "+4"],
    "DOUBLE": ["1.5", "-2e3", ".5", "7", "1e309", "'2.5'", "NULL", "-0.0", "123456789012345678901"],
    "VARCHAR": ["'abc'", "'a''b'", "7", "1.25", "''", "'" + "z" * 17 + "'", "NULL", "true"],
    "BOOL": ["true", "FALSE", "0", "1", "2", "'yes'", "NULL", "null"],
    "TIMESTAMP": ["1700000000000", "1700000000001", "-62135596800001", "'2023-11-14 22:13:20.5'", "TRUE",
                  "'1700000000002'", "NULL", "1.5"],  # no now: two engines, two clocks
    "TINYINT": ["127", "-128", "128", "NULL", "0"],
    "BIGINT UNSIGNED": ["18446744073709551615", "18446744073709551616", "-0", "5", "NULL"],
}
M_COLUMNS = [("ts", "TIMESTAMP"), ("v", "INT"), ("f", "DOUBLE"), ("s", "VARCHAR"), ("b", "BOOL"), ("u", "BIGINT UNSIGNED"),
             ("ti", "TINYINT")]


@st.composite
def inserts(draw: st.DrawFn) -> str:
    """An INSERT of one to three VALUES lists into x.m subtables, mostly well typed."""
    targets = []
    for _ in range(draw(st.integers(1, 4))):
        names = draw(st.sampled_from([M_COLUMNS[:4], M_COLUMNS[:2]])
                     | st.permutations(M_COLUMNS[1:]).map(lambda cs: [M_COLUMNS[0], *cs[:3]]))
        table = draw(st.sampled_from(["d1", "d3", "a", "nt", "c"]))
        using = f" USING x.m TAGS ({draw(st.sampled_from(['1', 'NULL', '300']))}, 'sf')" if table[0] == "d" else ""
        rows = []
        for _ in range(draw(st.integers(1, 4))):
            values = [draw(st.sampled_from(SQL_VALUES[t][: 2 if draw(st.integers(0, 5)) else None])) for _, t in names]
            rows.append("(" + ", ".join(values) + ")")
        columns = " (" + ", ".join(n for n, _ in names) + ")"
        targets.append(f"x.{table}{using}{columns} VALUES {' '.join(rows)}")
    return "INSERT INTO " + " ".join(targets)


def test_insert_by_columns_writes_what_rows_write(engines: tuple[Engine, Engine]) -> None:
    by_columns, by_rows = engines

    @settings(max_examples=200, deadline=None)
    @given(sql=inserts())
    def run(sql: str) -> None:
        def write(engine: Engine) -> Any:
            return engine.execute(sql).rows

        assert _answer(write, by_columns) == _answer(write, by_rows)
        assert _dump(by_columns) == _dump(by_rows)

    run()


def test_insert_lists_typed_together_keep_statement_order(engines: tuple[Engine, Engine]) -> None:
    """Lists giving the same columns are typed together, yet each vnode's rows stay in statement order: here d3's
    second list (vnode 1, typed with d1's) comes after the other list into vnode 1."""
    by_columns, by_rows = engines
    sql = ("INSERT INTO x.d1 USING x.m TAGS (1, 'a') (ts, v) VALUES (1700000000100, 1) "
           "x.d3 USING x.m TAGS (3, 'c') (ts, f) VALUES (1700000000101, 2.5) "
           "x.d3 (ts, v) VALUES (1700000000102, 3) (1700000000103, 4)")
    assert by_columns.execute(sql).rows == by_rows.execute(sql).rows
    assert _dump(by_columns) == _dump(by_rows)


JSON_VALUES: dict[str, list[Any]] = {
    "ts": [1700000000000, 1700000000001, "2023-11-14T22:13:20.5Z", None, -62135596800001, 1.5],
    "v": [1, -7, None, 2**31, "3", True, 1.5],
    "f": [1.5, 7, None, "2.5", 10**400, False],
    "s": ["abc", "", None, "z" * 17, 5],
    "b": [True, False, None, 1, "true", 2],
    "u": [2**64 - 1, 0, None, -1, 2**64],
    "t": [1, None, "x"],
    "loc": ["sf", None],
    "nosuch": [1],
}


@st.composite
def json_rows(draw: st.DrawFn) -> list[tuple[Any, Any, int]]:
    rows: list[tuple[Any, Any, int]] = []
    for _ in range(draw(st.integers(1, 5))):
        keys = draw(st.lists(st.sampled_from(list(JSON_VALUES)[:-1]) | st.sampled_from(list(JSON_VALUES)), max_size=5,
                             unique=True))
        fields: Any = {k: draw(st.sampled_from(JSON_VALUES[k][: 2 if draw(st.integers(0, 5)) else None])) for k in keys}
        name: Any = draw(st.sampled_from(["d1", "d3", "d2"]) | st.sampled_from(["a", "nt", "", "e\ud800", 7]))
        if draw(st.integers(0, 19)) == 0:
            fields = [fields]
        rows.append((name, fields, draw(st.sampled_from([1700000000000, 1700000000002, -2**62]))))
    return rows


def test_json_rows_by_columns_write_what_rows_write(engines: tuple[Engine, Engine]) -> None:
    by_columns, by_rows = engines
    by_rows.ingest._json_by_columns = lambda *args: None  # type: ignore[method-assign]

    @settings(max_examples=200, deadline=None)
    @given(rows=json_rows())
    def run(rows: list[tuple[Any, Any, int]]) -> None:
        def write(engine: Engine) -> int:
            return engine.write_json_rows("x", "m", rows)

        assert _answer(write, by_columns) == _answer(write, by_rows)
        assert _dump(by_columns) == _dump(by_rows)

    run()


NUMBERS = ["0", "7", "-7", "007", "1.5", "-0.0", "-0", ".5", "5.", "1e5", "1E-5", "2.5e+3", "+3", "- 4",
           "9223372036854775807", "-9223372036854775808", "18446744073709551615", "123456789012345678901234",
           "0.1234567890123456789", "1e400", "true", "FALSE", "null", "NULL", "'s'", "now", "1s", "١"]


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(st.sampled_from(NUMBERS), min_size=0, max_size=4), min_size=1, max_size=4),
       gap=st.sampled_from([" ", "", "\n", ",", " \x0b"]))
def test_values_rows_as_json_match_the_scanner(rows: list[list[str]], gap: str) -> None:
    text = gap.join("(" + ", ".join(row) + ")" for row in rows)
    reader = _RowReader(lambda name: _lark().get_terminal(name).pattern.to_regexp())
    fast = reader._json_rows(text)
    try:
        scanned = reader._scanned_rows(Token("VALUES_ROWS", text))
    except _StatementError:
        assert fast is None
        return
    if fast is not None:
        assert [[(type(v), repr(v)) for v in row] for row in fast] == [[(type(v), repr(v)) for v in row]
                                                                         for row in scanned]


TABLES = ["x.d1", "X.D1", "d1", "`D 1`", "x . d1", "`x`.`d1`", "Using", "values", "x.\x0bm", "ümlaut"]
NAME_LISTS = ["(ts, v)", "(TS, V)", "(`ts`,v )", "(ts)", "()", "(ts, 1)"]
ROWS = ["(1, 'sf')", "(1)", "(now, -2.5)", "( 'a)b' , NULL)", "(1)(2)", "(1) (2, 3)", "(1,\n2)", "(1) , (2)", "(1",
        "(true, 'x''y')", "(+1)", "(1 -- c\n)", "(now() + 1s, 1e3)"]
GLUE = [" ", " ", " ", "", "\n", "\x0b", " -- c\n"]


@st.composite
def insert_texts(draw: st.DrawFn) -> str:
    """INSERT statements built from plausible pieces with odd ones among them."""
    def piece(pool: list[str]) -> str:
        return draw(st.sampled_from(pool))

    targets = []
    for _ in range(draw(st.integers(1, 3))):
        parts = [piece(TABLES)]
        if draw(st.booleans()):
            parts += [piece(["USING", "using", "TAGS"]), piece(TABLES[:5])]
            if draw(st.booleans()):
                parts.append(piece(NAME_LISTS))
            parts += [piece(["TAGS", "tags", "VALUES"]), piece(ROWS)]
        if draw(st.booleans()):
            parts.append(piece(NAME_LISTS))
        parts += [piece(["VALUES", "values", "Values", "TAGS"]), piece(ROWS)]
        targets.append(piece(GLUE).join(parts) if draw(st.integers(0, 3)) == 0 else " ".join(parts))
    return piece(["INSERT INTO ", "insert into ", " INSERT  INTO\n", "INSERT INTO"]) + " ".join(targets) + piece(
        ["", "", ";", " ; ", ";;", " x"])


@settings(max_examples=400, deadline=None)
@given(sql=insert_texts())
def test_plain_insert_reads_what_lark_reads(sql: str) -> None:
    fast = _plain_insert(sql)
    if fast is not None:
        assert fast == _lark().parse(sql)
