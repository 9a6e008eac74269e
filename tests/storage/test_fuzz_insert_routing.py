"""Fuzzing the split of writes by owning node (walgate.storage.insert_routing): generated INSERTs, line-protocol and
CSV bodies for a database of 3 vgroups on nodes 1, 2 and 3, split as node 1 (or 2) would.

Invariants, per input: the split ends in parts or a StorageError (never another exception); the parts partition the
input exactly: every target / line / record is in exactly one part, the part of the node its table is placed on, the
node asked first and each node once; each part's rows are the sum of its own; an owner given a part's body reads back
exactly that part's lines / records, at the client's line numbers, and an owner given an INSERT's positions exactly
those targets (``targets_at``). A line-protocol body the split refuses is one the planner's parser refuses too.
Seeded and bounded (fuzzing.fuzz_settings).
"""

from __future__ import annotations

from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz_lineproto import PRECISIONS
from test_fuzz_lineproto import bodies as odd_bodies

from walgate.storage import csvfile, lineproto
from walgate.storage.catalog import DatabaseDef
from walgate.storage.errors import StorageError
from walgate.storage.insert_routing import Part, split_csv, split_insert, split_lines, targets_at
from walgate.storage.lineproto_columns import parse_body
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.vnode import vnode_of

DB = DatabaseDef("f", {"VGROUPS": 3, "PRECISION": "ms"}, 0, "f", ((1,), (2,), (3,)))
LOCAL = st.sampled_from([1, 2])


def owner(table: str, local: int) -> int:
    return DB.node_of(vnode_of("f", table, DB.vgroups), local)


def check_nodes(parts: list[Part], local: int) -> None:
    """Each node once, the node asked first when it has a part, the others by id; no empty part."""
    nodes = [p.node for p in parts]
    assert len(set(nodes)) == len(nodes) and all(p.rows > 0 or p.rows == len(p.lines) for p in parts)
    rest = nodes[1:] if nodes and nodes[0] == local else nodes
    assert local not in rest and rest == sorted(rest)


NAMES = st.sampled_from(["t1", "t2", "t3", "t4", "d1001", "d1002", "x", "`odd name`", "T1", "`ü`", "ü"])
DBS = st.sampled_from(["f.", "", "nodb.", "F."])
target = st.tuples(DBS, NAMES, st.integers(1, 3)).map(
    lambda t: f"{t[0]}{t[1]} USING f.st TAGS (1) VALUES " + " ".join(f"({1700000000000 + i}, {i})" for i in range(t[2])))
inserts = st.lists(target, min_size=1, max_size=8).map(lambda ts: "INSERT INTO " + " ".join(ts))


@fuzz_settings(300)
@given(inserts, st.sampled_from([None, "f", "nodb"]), LOCAL)
def test_an_insert_split_partitions_its_targets(statement: str, session: str | None, local: int) -> None:
    try:  # a statement that does not parse is answered before any split
        stmt = parse(statement)
    except StorageError:
        return
    assert isinstance(stmt, ast.Insert)
    parts = split_insert(stmt, session, {"f": DB}, local)
    check_nodes(parts, local)
    positions = sorted(p for part in parts for p in part.positions)
    assert positions == list(range(len(stmt.targets))), "every target in exactly one part"
    for part in parts:
        mine = targets_at(stmt, part.positions)
        assert mine.targets == tuple(stmt.targets[p] for p in part.positions)
        assert part.rows == sum(len(t.rows) for t in mine.targets)
        for t in mine.targets:
            db = t.table.db or session
            assert part.node == (owner(t.table.name, local) if db == "f" else local), t.table


SITES = st.sampled_from(["a", "b", "c", "d", "e", "f\\ g", "h\\,i", "ü", "j" * 40])
lp_line = st.tuples(st.sampled_from(["m", "n", "m\\ 2"]), SITES, st.integers(0, 99), st.sampled_from(["", " 17"])).map(
    lambda p: f"{p[0]},site={p[1]} v={p[2]}i{p[3]}")
lp_bodies = st.one_of(
    st.lists(st.one_of(lp_line, st.sampled_from(["", "# comment", "  ", "\r"])), min_size=1, max_size=12).flatmap(
        lambda ls: st.sampled_from(["\n", "\r\n"]).map(lambda sep: sep.join(ls))),
    odd_bodies)


@fuzz_settings(300)
@given(lp_bodies, PRECISIONS, LOCAL)
def test_a_line_protocol_split_partitions_its_lines(body: str, precision: str, local: int) -> None:
    raw = body.encode()
    try:
        parts = split_lines(raw, precision, DB, local)
    except StorageError:
        try:
            parse_body(raw, precision)
        except StorageError:
            return
        raise AssertionError("the split refused a body the planner takes") from None
    check_nodes(parts, local)
    lines = body.split("\n")
    wanted = [n for n, line in enumerate(lines, 1) if line.strip(" \r") and line.strip(" \r")[0] != "#"]
    assert sorted(n for p in parts for n in p.lines) == wanted, "every line in exactly one part"
    for part in parts:
        got = part.body.decode().split("\n")
        assert part.rows == len(part.lines) and len(got) == part.lines[-1]
        for n, line in enumerate(got, 1):
            assert line == (lines[n - 1].strip(" \r") if n in part.lines else ""), (n, part)
        for n in part.lines:
            point = lineproto.parse_line(got[n - 1], n, lineproto.multiplier(precision), lineproto.Memo())
            assert part.node == owner(lineproto.child_table_name(point.measurement, point.tags), local)


TBNAMES = st.sampled_from(["t1", "t2", "t3", "t4", "t5", '"t,6"', '"t\n7"', '"t""8"', "ü", "d1001", "d1002"])
record = st.tuples(TBNAMES, st.integers(0, 99)).map(lambda r: f"{1700000000000 + r[1]},{r[1]},{r[0]}")
odd_record = st.sampled_from(["", '"unterminated', "1700000000000,1,", "1700000000000,1,t1,extra", "1,2"])
csv_bodies = st.tuples(st.sampled_from(["ts,v,tbname", "ts,v,\"tbname\"", "\nts,v,tbname", "ts,v,name"]),
                       st.lists(st.one_of(record, record, record, record, record, record, record, record, record,
                                          odd_record), max_size=10),
                       st.sampled_from(["\n", "\r\n"])).map(lambda c: c[2].join([c[0], *c[1]]))


@fuzz_settings(300)
@given(csv_bodies, LOCAL)
def test_a_csv_split_partitions_its_records(body: str, local: int) -> None:
    raw = body.encode()
    try:
        parts = split_csv(raw, DB, None, "st", local)
    except StorageError:
        return
    check_nodes(parts, local)
    found = list(csvfile.records(raw))
    if len(parts) == 1 and parts[0].body == raw and not parts[0].lines:  # not routable: the node asked answers it
        assert parts[0].node == local
        return
    header, records = found[0], {lineno: fields for lineno, _, fields in found[1:]}
    assert sorted(n for p in parts for n in p.lines) == sorted(records), "every record in exactly one part"
    column = [csvfile.header_name(name, header[0]) for name in header[2]].index("tbname")
    for part in parts:
        got = list(csvfile.records(part.body))
        assert (got[0][0], got[0][2]) == (header[0], header[2]), "the header, at its line"
        assert [(n, fields) for n, _, fields in got[1:]] == [(n, records[n]) for n in part.lines]
        assert part.rows == len(part.lines)
        for n in part.lines:
            name = records[n][column]
            assert name is not None and part.node == owner(name, local)
