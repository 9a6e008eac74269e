"""An INSERT, a CREATE / DROP TABLE, a CREATE TOPIC of one table, a line-protocol or a CSV body split by the node
that owns each of its tables (cluster mode; docs/cluster.md "SQL writes across nodes").

Pure: the split reads the databases' placement (``DatabaseDef.nodes``) and names, never a vnode. Each target of
the statement (``INSERT INTO t1 ... t2 ...``: one per table clause) belongs to the node its table's vgroup is placed
on (``vnode_of``); the targets of one node are its *part*, named by their positions in the statement, so that the
owner can be sent the statement's text and the positions it writes (:func:`targets_at`) and never has to be sent
SQL rebuilt from the syntax tree. A target of a database the catalog does not know stays with the node asked, which
answers it as it answers any unknown database.

A line-protocol body is split by line (:func:`split_lines`): each line goes to the node of its subtable (TDengine's
automatic name of its measurement and tags, as the planner names it); the owner is sent a body of its lines, each
at its line number (the others' lines left blank), which it parses and plans as any body: an error it answers names
the line as the client numbered it. Lines are split and parsed as :func:`~walgate.storage.lineproto.parse_lines`
does: a bad line is refused here, naming it, before anything is sent. A CSV body is split by record
(:func:`split_csv`) the same way: by its ``tbname`` field into a supertable, whole to the table's node into a table;
each owner's body is the header and its records, each at its line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from walgate.storage import csvfile, lineproto
from walgate.storage.catalog import DatabaseDef
from walgate.storage.errors import CsvError, InvalidValue
from walgate.storage.sql import ast
from walgate.storage.vnode import vnode_of

_POSITION = "(?:0|[1-9][0-9]*)"
_POSITIONS = re.compile(f"{_POSITION}(?:,{_POSITION})*")
_NODE_ID = re.compile("[0-9]{1,10}")

TableDdl = ast.CreateTable | ast.CreateSubtable | ast.CreateStable | ast.DropTable | ast.CreateTopic
"""A statement making or dropping tables that live in their vgroups' vnodes, each table's part sent to the node of
its vgroup; a CREATE STABLE, sent to the node of its name's vgroup, which alone sees a normal table of that name; or
a CREATE TOPIC of one table, sent to the node of the table's vgroup, which alone knows its columns and compiles it."""

__all__ = ["Part", "TableDdl", "split_csv", "split_insert", "split_lines", "split_tables", "tables_at", "targets_at",
           "format_positions", "parse_positions", "parse_sender"]


@dataclass(frozen=True)
class Part:
    """What one node writes of a write: the ``positions`` of its targets in an INSERT (empty for a body), the vgroups
    (``(database, index)``) and tables (``database.table``) they write, their rows, and, of a line-protocol body,
    the numbers of its lines in the body (1-based) and the body of those lines."""

    node: int
    positions: tuple[int, ...]
    vgroups: tuple[tuple[str, int], ...]
    tables: tuple[str, ...]
    rows: int
    lines: tuple[int, ...] = ()
    body: bytes = b""


def split_insert(stmt: ast.Insert, session: str | None, databases: Mapping[str, DatabaseDef],
                 local: int) -> list[Part]:
    """The parts of ``stmt`` (``session``: the current database of unqualified names) per owning node, the node
    asked (``local``) first when it owns any, then by node id. Every target is in exactly one part."""
    return _split([(target.table, len(target.rows)) for target in stmt.targets], session, databases, local)


def split_tables(stmt: TableDdl, session: str | None, databases: Mapping[str, DatabaseDef],
                 local: int) -> list[Part]:
    """The parts of the CREATE TABLE, CREATE STABLE, DROP TABLE or CREATE TOPIC ``stmt`` (``session``: the current
    database of unqualified names) per node owning the vgroup of each table it names (its position: its place in
    ``DROP TABLE``'s list; a CREATE's one table, a topic's source table, is at 0), the node asked (``local``) first
    when it owns any, then by node id; no rows."""
    names = stmt.names if isinstance(stmt, ast.DropTable) else (stmt.source,) if isinstance(stmt, ast.CreateTopic) \
        else (stmt.name,)
    return _split([(name, 0) for name in names], session, databases, local)


def _split(targets: list[tuple[ast.Name, int]], session: str | None, databases: Mapping[str, DatabaseDef],
           local: int) -> list[Part]:
    """The parts of a statement's ``targets`` (each a table and its rows, at its position in the list) per owning
    node (:func:`split_insert`)."""
    owners: dict[int, list[tuple[int, str, int, str, int]]] = {}
    for position, (table, rows) in enumerate(targets):
        db_name = table.db or session
        db = databases.get(db_name) if db_name is not None else None
        if db is None:  # unknown (or no) database: the node asked answers it
            owners.setdefault(local, []).append((position, db_name or "", -1, table.name, rows))
            continue
        vgroup = vnode_of(db.name, table.name, db.vgroups)
        owners.setdefault(db.node_of(vgroup, local), []).append((position, db.name, vgroup, table.name, rows))
    parts = []
    for node in sorted(owners, key=lambda n: (n != local, n)):
        entries = owners[node]
        vgroups = sorted({(db, vgroup) for _, db, vgroup, _, _ in entries if vgroup >= 0})
        tables = tuple(dict.fromkeys(f"{db}.{name}" if db else name for _, db, _, name, _ in entries))
        parts.append(Part(node, tuple(e[0] for e in entries), tuple(vgroups), tables, sum(e[4] for e in entries)))
    return parts


def split_lines(body: bytes, precision: str, db: DatabaseDef, local: int) -> list[Part]:
    """The parts of the line-protocol ``body`` into ``db`` (timestamps in ``precision``) per owning node, the node
    asked (``local``) first when it owns any, then by node id; LineProtocolError naming the first bad line."""
    mult, memo = lineproto.multiplier(precision), lineproto.Memo()
    owners: dict[int, list[tuple[int, str, int, str]]] = {}
    lines = lineproto.decode(body).split("\n")
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip(" \r")
        if not line or line[0] == "#":
            continue
        point = lineproto.parse_line(line, lineno, mult, memo)
        table = lineproto.child_table_name(point.measurement, point.tags)
        vgroup = vnode_of(db.name, table, db.vgroups)
        owners.setdefault(db.node_of(vgroup, local), []).append((lineno, line, vgroup, table))
    parts = []
    for node in sorted(owners, key=lambda n: (n != local, n)):
        entries = owners[node]
        mine = ["" for _ in range(entries[-1][0])]  # up to its last line: the others' lines blank
        for lineno, line, _, _ in entries:
            mine[lineno - 1] = line
        parts.append(Part(node, (), tuple((db.name, v) for v in sorted({e[2] for e in entries})),
                          tuple(dict.fromkeys(f"{db.name}.{e[3]}" for e in entries)), len(entries),
                          tuple(e[0] for e in entries), "\n".join(mine).encode()))
    return parts


def split_csv(body: bytes, db: DatabaseDef, table: str | None, stable: str | None, local: int) -> list[Part]:
    """The parts of the CSV ``body`` into ``table``, or subtables of ``stable`` named by its ``tbname`` field, of
    ``db`` per owning node, the node asked (``local``) first when it owns any, then by node id. CsvError for
    malformed quoting, a record whose field count is not the header's, InvalidValue for an empty ``tbname``, each
    naming its line; a body the split cannot route (no header, no ``tbname`` column, both or neither of ``table``
    and ``stable``) is one part of the node asked, which answers it as any body."""
    found = list(csvfile.records(body))
    if not found or (table is None) == (stable is None):
        return [Part(local, (), (), (), 0, (), body)]
    (_, header_raw, header), rows = found[0], found[1:]
    names = [csvfile.header_name(name, found[0][0]) for name in header]
    if table is not None:
        vgroup = vnode_of(db.name, table, db.vgroups)
        return [Part(db.node_of(vgroup, local), (), ((db.name, vgroup),), (f"{db.name}.{table}",), len(rows),
                     tuple(r[0] for r in rows), body)]
    if "tbname" not in names:
        return [Part(local, (), (), (), 0, (), body)]
    column = names.index("tbname")
    owners: dict[int, list[tuple[int, str, int, str]]] = {}
    for lineno, raw, fields in rows:
        if len(fields) != len(names):
            raise CsvError(f"line {lineno}: expected {len(names)} fields (as in the header), got {len(fields)}")
        name = fields[column]
        if not name:
            raise InvalidValue(f"CSV line {lineno}: empty tbname")
        vgroup = vnode_of(db.name, name, db.vgroups)
        owners.setdefault(db.node_of(vgroup, local), []).append((lineno, raw, vgroup, name))
    parts = []
    for node in sorted(owners, key=lambda n: (n != local, n)):
        entries = owners[node]
        text, line = ["\n" * (found[0][0] - 1) + header_raw], found[0][0] + header_raw.count("\n")
        for lineno, raw, _, _ in entries:  # each record at its line: blank lines for the others' (skipped)
            if not text[-1].endswith("\n"):
                text.append("\n")
                line += 1
            text.append("\n" * (lineno - line) + raw)
            line = lineno + raw.count("\n")
        parts.append(Part(node, (), tuple((db.name, v) for v in sorted({e[2] for e in entries})),
                          tuple(dict.fromkeys(f"{db.name}.{e[3]}" for e in entries)), len(entries),
                          tuple(e[0] for e in entries), "".join(text).encode()))
    return parts


def targets_at(stmt: ast.Insert, positions: tuple[int, ...]) -> ast.Insert:
    """The INSERT of ``stmt``'s targets at ``positions`` (a forwarded part); InvalidValue for a position that is not
    one of its targets or one given twice."""
    _check_positions(positions, len(stmt.targets), "tables")
    return ast.Insert(tuple(stmt.targets[p] for p in positions))


def tables_at(stmt: TableDdl, positions: tuple[int, ...]) -> TableDdl:
    """The CREATE TABLE, CREATE STABLE, CREATE TOPIC or DROP TABLE of ``stmt``'s tables at ``positions`` (a forwarded
    part, :func:`split_tables`; IF EXISTS kept); InvalidValue for a position that is not one of its tables or one
    given twice."""
    if not isinstance(stmt, ast.DropTable):
        _check_positions(positions, 1, "table")
        return stmt
    _check_positions(positions, len(stmt.names), "tables")
    return ast.DropTable(tuple(stmt.names[p] for p in positions), stmt.if_exists)


def _check_positions(positions: tuple[int, ...], count: int, what: str) -> None:
    """InvalidValue unless ``positions`` are distinct, at least one, each one of a statement's ``count``."""
    if len(set(positions)) != len(positions) or not positions:
        raise InvalidValue(f"forwarded part {format_positions(positions)!r}: positions must be distinct, at least one")
    for p in positions:
        if not 0 <= p < count:
            raise InvalidValue(f"forwarded part: the statement has {count} {what}, no position {p}")


def format_positions(positions: tuple[int, ...]) -> str:
    """``positions`` as the forwarding header carries them: ``0,2,5``."""
    return ",".join(str(p) for p in positions)


def parse_positions(text: str) -> tuple[int, ...]:
    """The positions of a forwarding header, exactly as :func:`format_positions` writes them (ASCII digits, no sign,
    blank or leading zero); InvalidValue otherwise."""
    if not _POSITIONS.fullmatch(text):
        raise InvalidValue(f"forwarded part {text[:100]!r}: not a comma-separated list of positions")
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:  # more digits than int() reads (sys.get_int_max_str_digits)
        raise InvalidValue(f"forwarded part {text[:100]!r}: a position of {len(text)} digits") from None


def parse_sender(text: str) -> int:
    """The sending node's id of a forwarding header (the part before its ``;``): ASCII digits; InvalidValue
    otherwise."""
    if not _NODE_ID.fullmatch(text):
        raise InvalidValue(f"forwarded part from {text[:100]!r}: not a node id")
    return int(text)
