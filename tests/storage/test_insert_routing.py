"""An INSERT, a CREATE / DROP TABLE, a CREATE TOPIC of one table or a line-protocol body split by the node owning each table (walgate/storage/insert_routing.py): every
table clause (line) in exactly one part, the node asked first, a clause of an unknown database kept by the node
asked; a forwarded part's positions checked; a body's part keeps each line (CSV record) at its number."""

from __future__ import annotations

import pytest

from walgate.storage import csvfile, lineproto
from walgate.storage.catalog import DatabaseDef
from walgate.storage.errors import CsvError, InvalidValue, LineProtocolError
from walgate.storage.insert_routing import (
    Part,
    parse_positions,
    parse_sender,
    split_csv,
    split_insert,
    split_lines,
    split_tables,
    tables_at,
    targets_at,
)
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.vnode import vnode_of


def _db(name: str, nodes: tuple[int, ...] | None) -> DatabaseDef:
    return DatabaseDef(name, {"VGROUPS": 2 if nodes is None else len(nodes), "PRECISION": "ms"}, 0, name,
                       None if nodes is None else tuple((n,) for n in nodes))


def _insert(sql: str) -> ast.Insert:
    stmt = parse(sql)
    assert isinstance(stmt, ast.Insert)
    return stmt


def _in(db: str, vgroup: int, n: int) -> list[str]:
    return [t for t in (f"t{i}" for i in range(100)) if vnode_of(db, t, 2) == vgroup][:n]


def test_each_clause_goes_to_the_node_of_its_tables_vgroup_the_node_asked_first() -> None:
    a, b = _in("f", 0, 2), _in("f", 1, 1)
    dbs = {"f": _db("f", (3, 1))}  # vgroup 0 on node 3, vgroup 1 on node 1
    stmt = _insert(f"INSERT INTO f.{a[0]} VALUES (1, 1) (2, 2) {b[0]} VALUES (3, 3) f.{a[1]} VALUES (4, 4) "
                   "nodb.x VALUES (5, 5)")
    parts = split_insert(stmt, "f", dbs, 1)
    assert parts == [Part(1, (1, 3), (("f", 1),), (f"f.{b[0]}", "nodb.x"), 2),
                     Part(3, (0, 2), (("f", 0),), (f"f.{a[0]}", f"f.{a[1]}"), 3)]
    assert targets_at(stmt, (1, 3)) == ast.Insert((stmt.targets[1], stmt.targets[3]))


def test_a_single_nodes_database_and_no_session_database_stay_local() -> None:
    stmt = _insert("INSERT INTO s.t1 VALUES (1, 1) t2 VALUES (2, 2)")
    assert split_insert(stmt, None, {"s": _db("s", None)}, 7) == [
        Part(7, (0, 1), (("s", vnode_of("s", "t1", 2)),), ("s.t1", "t2"), 2)]


def test_a_forwarded_parts_positions_are_checked() -> None:
    stmt = _insert("INSERT INTO f.t1 VALUES (1, 1) f.t2 VALUES (2, 2)")
    for bad in ((2,), (0, 0), (), (-1,)):
        with pytest.raises(InvalidValue):
            targets_at(stmt, bad)
    assert parse_positions("0,1") == (0, 1)
    for text in ("", "a", "1;2", "1,,2", " 1", "1 ", "+1", "-0", "1_0", "01", "\u0663", "9" * 5000):
        with pytest.raises(InvalidValue):  # (int() took a blank, a sign, an underscore and Arabic-Indic digits)
            parse_positions(text)
    assert parse_sender("12") == 12
    for text in ("", "x", " 1", "+1", "\u0663", "9" * 11):
        with pytest.raises(InvalidValue, match="not a node id"):
            parse_sender(text)


def test_create_and_drop_table_go_to_the_node_of_each_tables_vgroup_if_exists_kept() -> None:
    a, b = _in("f", 0, 2), _in("f", 1, 1)
    dbs = {"f": _db("f", (3, 1))}  # vgroup 0 on node 3, vgroup 1 on node 1
    drop = parse(f"DROP TABLE IF EXISTS f.{a[0]}, {b[0]}, nodb.x, f.{a[1]}")
    assert isinstance(drop, ast.DropTable)
    assert split_tables(drop, "f", dbs, 1) == [Part(1, (1, 2), (("f", 1),), (f"f.{b[0]}", "nodb.x"), 0),
                                               Part(3, (0, 3), (("f", 0),), (f"f.{a[0]}", f"f.{a[1]}"), 0)]
    assert tables_at(drop, (0, 3)) == ast.DropTable((drop.names[0], drop.names[3]), True)
    for sql in (f"CREATE TABLE IF NOT EXISTS {a[0]} USING f.st TAGS (1)", f"CREATE TABLE f.{a[0]} (ts TIMESTAMP, v INT)",
                f"CREATE TOPIC tp AS SELECT v FROM {a[0]} WHERE v > 1"):  # a topic of one table: to the table's node
        create = parse(sql)
        assert isinstance(create, (ast.CreateTable, ast.CreateSubtable, ast.CreateTopic))
        assert split_tables(create, "f", dbs, 1) == [Part(3, (0,), (("f", 0),), (f"f.{a[0]}",), 0)]
        assert tables_at(create, (0,)) is create
        for bad in ((1,), (0, 0), ()):
            with pytest.raises(InvalidValue):
                tables_at(create, bad)
    with pytest.raises(InvalidValue):
        tables_at(drop, (4,))


def test_a_line_protocol_body_is_split_by_the_node_of_each_lines_subtable_keeping_line_numbers() -> None:
    db = _db("f", (3, 1))
    table = {s: lineproto.child_table_name("m", (("site", s),)) for s in (f"s{i}" for i in range(40))}
    s0 = [s for s, t in table.items() if vnode_of("f", t, 2) == 0][:2]
    s1 = [s for s, t in table.items() if vnode_of("f", t, 2) == 1][:1]
    body = f"m,site={s0[0]} v=1 1\n# comment\nm,site={s1[0]} v=2 2\r\n\nm,site={s0[1]} v=3 3\n".encode()
    parts = split_lines(body, "ms", db, 1)
    assert parts == [
        Part(1, (), (("f", 1),), (f"f.{table[s1[0]]}",), 1, (3,), f"\n\nm,site={s1[0]} v=2 2".encode()),
        Part(3, (), (("f", 0),), (f"f.{table[s0[0]]}", f"f.{table[s0[1]]}"), 2, (1, 5),
             f"m,site={s0[0]} v=1 1\n\n\n\nm,site={s0[1]} v=3 3".encode())]
    assert [len(lineproto.parse_lines(p.body, "ms")) for p in parts] == [1, 2]
    with pytest.raises(LineProtocolError, match="line 2"):
        split_lines(b"m,site=a v=1 1\nm,site=b v= 2", "ms", db, 1)


def test_a_csv_body_is_split_by_tbname_keeping_line_numbers_and_a_table_goes_whole_to_its_node() -> None:
    db = _db("f", (3, 1))
    a, b = _in("f", 0, 2), _in("f", 1, 1)
    body = (f'ts,v,tbname\n\n1,"x\ny",{a[0]}\r\n2,,{b[0]}\n3,"",{a[1]}').encode()
    parts = split_csv(body, db, None, "st", 1)
    assert parts == [
        Part(1, (), (("f", 1),), (f"f.{b[0]}",), 1, (5,), f"ts,v,tbname\n\n\n\n2,,{b[0]}\n".encode()),
        Part(3, (), (("f", 0),), (f"f.{a[0]}", f"f.{a[1]}"), 2, (3, 6),
             f'ts,v,tbname\n\n1,"x\ny",{a[0]}\r\n\n3,"",{a[1]}'.encode())]
    for part in parts:  # each owner reads its records at their lines, with their NULLs and empty strings
        header, rows, lines = csvfile.parse_csv(part.body)
        assert lines == list(part.lines)
    assert csvfile.parse_csv(parts[1].body)[1] == [["1", "x\ny", a[0]], ["3", "", a[1]]]
    assert csvfile.parse_csv(parts[0].body)[1] == [["2", None, b[0]]]
    assert split_csv(body, db, b[0], None, 1) == [Part(1, (), (("f", 1),), (f"f.{b[0]}",), 3, (3, 5, 6), body)]
    assert split_csv(b"ts,v\n1,2", db, None, "st", 1) == [Part(1, (), (), (), 0, (), b"ts,v\n1,2")], "no tbname"
    with pytest.raises(InvalidValue, match="line 2"):
        split_csv(b"ts,tbname\n1,", db, None, "st", 1)
    with pytest.raises(CsvError, match="line 3"):
        split_csv(b"ts,tbname\n1,a\n2", db, None, "st", 1)
