"""Fuzzing the ``X-Walgate-Forwarded`` header an owner reads (walgate.gateway.http_api ``_forwarded_part``, over
walgate.storage.insert_routing's positions): any header text (no ``;``, empty fields, a sender that is no node id,
positions negative, repeated, out of range, huge, of non-ASCII digits, signs, blanks or underscores, ``here`` and
``scan`` on statements they do not fit, a SELECT's ``now`` past 2^63 or not plain digits) with INSERTs,
CREATE/DROP TABLEs, a CREATE TOPIC, SELECTs, SHOW TABLES and other statements.

Invariant, per input: the part is a statement or a StorageError (the HTTP API's 400), never another exception; a
part accepted comes from a header of exactly the form nodes send (``<node id>;<positions>`` as
:func:`~walgate.storage.insert_routing.format_positions` writes them, ``here;<now>`` / ``scan;<now>`` of a SELECT,
``here`` or ``scan`` of a SELECT from a node of the version before, then ``;<vgroups>`` routed to the node (a SELECT's
``here;<now>;<vgroups>``, a SHOW TABLES' ``here;;<vgroups>``), ``here`` of a SHOW TABLES) and holds exactly the
targets or tables at those positions. Seeded and bounded
(tests/storage/fuzzing.py's settings)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from walgate.gateway.http_api import _forwarded_part
from walgate.storage.errors import StorageError
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from fuzzing import fuzz_settings  # noqa: E402

STATEMENTS = [
    "INSERT INTO f.t1 VALUES (1700000000000, 1) f.t2 VALUES (1700000000001, 2) f.t3 VALUES (1700000000002, 3)",
    "INSERT INTO f.t1 USING f.st TAGS (1) VALUES (1700000000000, 1)",
    "CREATE TABLE f.t9 USING f.st TAGS (9)",
    "CREATE STABLE f.s2 (ts TIMESTAMP, v INT) TAGS (k INT)",
    "DROP TABLE IF EXISTS f.t1, f.t2, f.t3, f.t4",
    "CREATE TOPIC tp AS SELECT * FROM f.t1",
    "SELECT COUNT(*) FROM f.st",
    "SHOW f.TABLES",
    "SHOW DATABASES",
    "CREATE DATABASE g",
    "not sql at all",
]
VGROUPS = r"(?:(?:0|[1-9][0-9]{0,5})(?:,(?:0|[1-9][0-9]{0,5}))*)?"
FORM = re.compile(r"[0-9]+;(?:here|scan|(?:here|scan);(?:0|[1-9][0-9]{0,18})(?:;" + VGROUPS + r")?|(?:here|scan);;"
                  + VGROUPS + r"|(?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)")
PIECES = st.sampled_from(["", "0", "1", "2", "3", "-1", "+1", " 1", "1 ", "1_0", "٣", "²", "9" * 30, "9" * 5000,
                          "here", "scan", "HERE", ",", ";", "0,0", "1,0", "0,,1", "0x1", "1e1", "\x00", "é",
                          "here;1700000000000000000", "scan;0", f"scan;{2**63 - 1}", f"here;{2**63}", "here;01",
                          "scan;-5", "here;", "scan;٣", "here;1;2", "here;;0,1", "scan;5;0,0", "here;5;", "here;;",
                          "here;5;1,02"])
HEADERS = st.one_of(
    st.tuples(PIECES, PIECES, st.lists(PIECES, max_size=4)).map(lambda h: f"{h[0]};{','.join([h[1], *h[2]])}"),
    st.tuples(PIECES, st.lists(st.integers(-2, 6), max_size=5)).map(lambda h: f"{h[0]};{','.join(map(str, h[1]))}"),
    st.text(st.characters(codec=None, exclude_categories=()), max_size=40),
    st.sampled_from(["1", ";", ";0", "1;", "1;0;1", "1;here;scan", "1;0" + ",1" * 3000, "1;here;0", "1;scan;7",
                     f"1;scan;{2**63}", "1;here;99999999999999999999", "1;scan;1 ", "1;here;0x10"]))


@fuzz_settings(500)
@given(st.sampled_from(STATEMENTS), HEADERS)
@example(STATEMENTS[0], "x;0").via("a sender that is no node id")
@example(STATEMENTS[0], "1;٣").via("a non-ASCII digit")
@example(STATEMENTS[4], "1; 1,+2").via("a blank and a sign")
@example(STATEMENTS[6], "1;scan").via("a SELECT's part without its now")
@example(STATEMENTS[6], f"1;here;{2**63}").via("a now past 2^63")
@example(STATEMENTS[6], "2;scan;1700000000000000000").via("a SELECT's part as nodes send it")
@example(STATEMENTS[6], "2;scan;1700000000000000000;0,2").via("a SELECT's part with its vgroups")
@example(STATEMENTS[6], "2;here;;0").via("a SELECT's vgroups without its now")
@example(STATEMENTS[7], "2;here;;1").via("a SHOW TABLES' part with its vgroups")
@example(STATEMENTS[7], "2;here;0").via("a SHOW TABLES' part with a now")
def test_a_forwarded_part_is_of_the_form_nodes_send_or_refused(sql: str, header: str) -> None:
    try:
        part = _forwarded_part(sql, header)
    except StorageError:
        return
    assert FORM.fullmatch(header), header
    positions = header.partition(";")[2]
    stmt = parse(sql)
    if positions in ("here", "scan"):  # SHOW TABLES, or a SELECT's part from a node naming no now (rv7 R7-4)
        assert isinstance(stmt, ast.Show | ast.Select) and part == stmt and (positions == "here" or
                                                                             isinstance(stmt, ast.Select))
        return
    if positions.startswith(("here;", "scan;")):  # a SELECT's part: the instant of its now, the vgroups routed here
        now, _, vgroups = positions[5:].partition(";")
        assert part == stmt and isinstance(stmt, ast.Select | ast.Show)
        if now:
            assert int(now) < 2**63 and isinstance(stmt, ast.Select)
        else:
            assert positions.startswith("here") and isinstance(stmt, ast.Show)
        assert len(set(vgroups.split(","))) == len(vgroups.split(","))
        return
    at = [int(p) for p in positions.split(",")]
    if isinstance(stmt, ast.Insert):
        assert isinstance(part, ast.Insert) and part.targets == tuple(stmt.targets[p] for p in at)
    elif isinstance(stmt, ast.DropTable):
        assert isinstance(part, ast.DropTable) and part.names == tuple(stmt.names[p] for p in at)
    else:
        assert at == [0] and part == stmt
