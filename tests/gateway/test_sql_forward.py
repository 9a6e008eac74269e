"""A forwarded INSERT part's outcome (walgate/gateway/sql_forward.py), against an HTTP server in the test process
on 127.0.0.1 answering as an owner would: written with its rows; not written when the owner answers an error, is
not registered or refuses the connection; unknown when it answers 500 or nothing within the timeout. The caller's
principal and address, signed with the node token, and the part's positions are carried. The client's answer says which part was written and which not.
A merged SELECT's parts are read within sql.max.bytes, one budget for all nodes, and awaited for sql.timeout.ms.
Asked which tables exist, an owner's answer is the list, anything else a 503 naming it; the question's body, fuzzed,
is read or refused with InvalidValue, never another exception.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.gateway.http_api import _here  # the node asked's own part of the same answer
from walgate.gateway.sql_forward import (
    FORWARD_TIMEOUT_S,
    FORWARDED,
    TABLES_PATH,
    Caller,
    Outcome,
    PartsBudget,
    SelectPart,
    answer,
    merge_rows,
    parse_tables,
    select_here,
    select_part,
    select_timeout,
    send,
    tables_exist,
)
from walgate.security.node_token import (
    CATALOG_SEQ,
    CLIENT_HOST,
    HEAD_SIGNATURE,
    PRINCIPAL,
    SIGNATURE,
    TIME,
    VERSION_HEADER,
    Signed,
    head_refusal,
    refusal,
)
from walgate.storage.errors import (
    ClusterUnavailable,
    InvalidValue,
    LimitExceeded,
    NotAcknowledged,
    NotEnoughReplicas,
    StorageUnavailable,
)
from walgate.storage.insert_routing import Part
from walgate.storage.select_merge import ARROW_STREAM

PART = Part(2, (1, 3), (("f", 1),), ("f.b0", "f.b1"), 5)
HERE = Part(1, (0, 2), (("f", 0),), ("f.a0",), 2)
seen: list[dict[str, str]] = []
TOKEN = "node-token"
ALICE = Caller("User:alice", "10.0.0.7", TOKEN, catalog_seq=17)
NOBODY = Caller("User:ANONYMOUS", "10.0.0.8", TOKEN)


async def _owner(request: web.Request) -> web.Response:
    body, headers = await request.read(), request.headers
    assert headers[VERSION_HEADER] == "2" and headers[CATALOG_SEQ] == ("17" if "alice" in headers[PRINCIPAL] else "0")
    signed = [Signed(node, request.method, request.path, dict(request.query), headers[FORWARDED], headers[PRINCIPAL],
                     headers[CLIENT_HOST], int(headers[TIME]), body, int(headers[CATALOG_SEQ]))
              for node in (2, 3)]  # this server stands for both
    assert any(refusal([TOKEN], headers[SIGNATURE], s, s.time_ms) is None and
               head_refusal([TOKEN], headers[HEAD_SIGNATURE], s, s.time_ms) is None for s in signed), "for node 2 or 3"
    seen.append({"db": request.match_info["db"], "body": body.decode(), FORWARDED: headers[FORWARDED],
                 "caller": f"{headers[PRINCIPAL]}@{headers[CLIENT_HOST]}"})
    db = request.match_info["db"]
    if db == "ok":
        return web.json_response({"code": 0, "column_meta": [["affected_rows", "INT", 4]], "data": [[5]], "rows": 1})
    if db == "bad":
        return web.json_response({"code": 0x2603, "desc": "Invalid column name: w"}, status=400)
    if db == "select":
        return web.json_response({"code": 0, "column_meta": [["v", "INT", 4]], "data": [[1], [2]], "rows": 2})
    if db == "scan":  # a node's scanned rows: 8 MB of them
        return web.Response(body=bytes(8 << 20), content_type=ARROW_STREAM)
    if db == "lines":
        return web.Response(status=204, headers={"X-Walgate-Rows": "3"})
    if db in ("maybe", "unavailable"):  # a CREATE STABLE the catalog may still apply; a disk that refused it
        return web.json_response({"code": 0x21, "desc": "it may still be applied"} |
                                 ({"outcome": "unknown"} if db == "maybe" else {}), status=503)
    if db == "crash":
        return web.json_response({"code": 0xFFFF, "desc": "internal error"}, status=500)
    await asyncio.Event().wait()  # "hang": never answers
    raise AssertionError


async def _tables(request: web.Request) -> web.Response:
    """An owner asked which tables exist: those named ``a*``; the database ``bad`` is an error, ``odd`` a wrong
    answer."""
    assert request.headers[FORWARDED] == "1;tables"
    tables = parse_tables(await request.read())
    if tables[0][0] == "bad":
        return web.json_response({"code": 0x2662, "desc": "Database not exist: bad"}, status=400)
    exist = [name.startswith("a") for _, name in tables]
    return web.json_response({"code": 0, "exist": exist[:1] if tables[0][0] == "odd" else exist})


@pytest.fixture
async def owner() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/rest/sql/{db}", _owner)
    app.router.add_post(TABLES_PATH, _tables)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    seen.clear()
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_each_answer_of_an_owner_is_an_outcome(owner: str) -> None:
    sql = b"INSERT INTO a0 VALUES (1, 1) b0 VALUES (2, 2)"
    written = await send(PART, owner, "/rest/sql/ok", sql, 1, ALICE)
    assert written == Outcome(PART, "written", rows=5)
    assert seen == [{"db": "ok", "body": sql.decode(), FORWARDED: "1;1,3", "caller": "User:alice@10.0.0.7"}]
    refused = await send(PART, owner, "/rest/sql/bad", sql, 1, NOBODY)
    assert (refused.state, refused.status, refused.code) == ("not_written", 400, 0x2603)
    assert refused.desc == "node 2: Invalid column name: w"
    crashed = await send(PART, owner, "/rest/sql/crash", sql, 1, NOBODY)
    assert (crashed.state, crashed.status) == ("unknown", 500) and "may have been written" in crashed.desc
    maybe = await send(PART, owner, "/rest/sql/maybe", sql, 1, NOBODY)
    assert (maybe.state, maybe.status, maybe.code) == ("unknown", 503, 0x21), "not 'NOT written' (reviewer finding 6)"
    unavailable = await send(PART, owner, "/rest/sql/unavailable", sql, 1, NOBODY)
    assert (unavailable.state, unavailable.status) == ("not_written", 503)
    hung = await send(PART, owner, "/rest/sql/hang", sql, 1, NOBODY, timeout=0.5)
    assert (hung.state, hung.status) == ("unknown", 503) and "no answer" in hung.desc
    lines = Part(2, (), (("f", 1),), ("f.t_1",), 3, (2, 4, 5), b"\nm v=1 1\n\nm v=2 2\nm v=3 3")
    assert await send(lines, owner, "/rest/sql/lines", lines.body, 1, NOBODY) == Outcome(lines, "written", rows=3)
    assert seen[-1] == {"db": "lines", "body": lines.body.decode(), FORWARDED: "1;", "caller": "User:ANONYMOUS@10.0.0.8"}
    assert Outcome(lines, "not_written", code=1, desc="x").entry()["lines"] == [[2, 2], [4, 5]]


async def test_an_owner_down_or_not_registered_wrote_nothing() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = await send(PART, f"http://127.0.0.1:{port}", "/rest/sql", b"INSERT", 1, NOBODY)
    assert (down.state, down.status) == ("not_written", 503) and "cannot be reached" in down.desc
    gone = await send(PART, None, "/rest/sql", b"INSERT", 1, NOBODY)
    assert gone.state == "not_written" and "not registered" in gone.desc


async def test_an_owner_asked_which_tables_exist_answers_the_list_or_is_a_503_naming_it(owner: str) -> None:
    assert await tables_exist(2, owner, [("f", "a0"), ("f", "b0"), ("g", "a1")], 1, ALICE) == [True, False, True]
    for db, said in (("bad", "answered HTTP 400: Database not exist: bad"), ("odd", "answered HTTP 200")):
        with pytest.raises(StorageUnavailable, match=said) as refused:
            await tables_exist(2, owner, [(db, "a0"), (db, "b0")], 1, ALICE)
        assert refused.value.message.startswith(f"node 2 ({owner})") and "nothing was done" in refused.value.message
    with pytest.raises(StorageUnavailable, match="not registered"):
        await tables_exist(2, None, [("f", "a0")], 1, ALICE)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StorageUnavailable, match="cannot be reached"):
        await tables_exist(2, f"http://127.0.0.1:{port}", [("f", "a0")], 1, ALICE)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=12)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.one_of(st.binary(max_size=64), JSON.map(orjson.dumps),
                 st.dictionaries(st.just("tables"), JSON, min_size=1).map(orjson.dumps),
                 st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=5).map(
                     lambda t: orjson.dumps({"tables": t}))))
def test_a_question_which_tables_exist_is_read_or_refused(body: bytes) -> None:
    try:
        tables = parse_tables(body)
    except InvalidValue:
        return
    assert orjson.loads(body)["tables"] == [list(t) for t in tables]
    assert all(isinstance(db, str) and isinstance(name, str) for db, name in tables)


async def test_a_nodes_part_of_a_select_is_its_answer_or_a_503_naming_it(owner: str) -> None:
    part = SelectPart(now_ns=1_700_000_000_123_456_789, vgroups=(0, 2))
    status, answered = await select_here(2, owner, "/rest/sql/select", b"SELECT v FROM f.st", 1, ALICE, part=part)
    assert (status, answered["data"]) == (200, [[1], [2]])
    assert seen[-1] == {"db": "select", "body": "SELECT v FROM f.st", FORWARDED: "1;here;1700000000123456789;0,2",
                        "caller": "User:alice@10.0.0.7"}
    assert select_part(seen[-1][FORWARDED].partition(";")[2]) == part
    assert (await select_here(2, owner, "/rest/sql/bad", b"SELECT", 1, NOBODY))[0] == 400
    status, answered = await select_here(2, owner, "/rest/sql/hang", b"SELECT", 1, NOBODY, timeout=0.5)
    assert status == 503 and answered["desc"].startswith("node 2 (") and "no answer" in answered["desc"]
    status, answered = await select_here(2, owner, "/rest/sql/lines", b"SELECT", 1, NOBODY)  # 204: not walgate's
    assert status == 503 and "not walgate's" in answered["desc"]
    assert (await select_here(2, None, "/rest/sql", b"SELECT", 1, NOBODY))[0] == 503


async def test_the_parts_of_a_merged_select_are_read_within_one_budget_shared_by_the_nodes(owner: str) -> None:
    """sql.max.bytes bounds every node's part the node asked holds: counted as it is read, the part that passes it
    is refused (400 LimitExceeded naming its node) without being read to its end."""
    budget = PartsBudget(9 << 20)
    status, answered = await select_here(2, owner, "/rest/sql/scan", b"SELECT", 1, NOBODY, part=SelectPart(scan=True),
                                         budget=budget)
    assert status == 200 and answered == bytes(8 << 20) and budget.used == 8 << 20
    status, answered = await select_here(3, owner, "/rest/sql/scan", b"SELECT", 1, NOBODY, part=SelectPart(scan=True),
                                         budget=budget)
    assert status == 400 and isinstance(answered, dict) and answered["code"] == LimitExceeded.code
    assert answered["desc"].startswith("node 3: ") and "sql.max.bytes" in answered["desc"]
    assert budget.used < 12 << 20, "the second part was read to its end"  # 8 MB + at most a read buffer's worth


def test_a_selects_part_names_here_or_scan_the_instant_of_now_and_its_vgroups() -> None:
    """The node asked fixes ``now`` once; its header carries it to every node (ns below 2^63, ASCII digits, no
    leading zero), with the vgroups it routed to that node (distinct, none for a node that only merges), or the
    part is not a SELECT's; a node of the version before names no ``now`` (its part takes this node's clock: rv7
    R7-4) and no vgroups (every one it serves)."""
    assert select_part("scan;0") == SelectPart(True, 0) and select_part(f"here;{2**63 - 1}") == SelectPart(
        False, 2**63 - 1)
    assert select_part("here") == SelectPart() and select_part("scan") == SelectPart(scan=True)
    assert select_part("scan;1;2") == SelectPart(True, 1, (2,)) and select_part("here;;0,3,1") == SelectPart(
        vgroups=(0, 3, 1))
    assert select_part("here;5;") == SelectPart(now_ns=5, vgroups=())
    for part in (SelectPart(), SelectPart(True, 7), SelectPart(False, None, (4,)), SelectPart(True, 0, ())):
        assert select_part(part.positions()) == part, part
    for refused in ("here;", f"here;{2**63}", "here;01", "here;-1", "here;+1", "here; 1", "here;1 ",
                    "HERE;1", "scan;٣", "scan;1;2;", "scan;1;2,", "scan;1;,2", "scan;1;2,2", "scan;1;02",
                    "scan;1;2 ", "tables;1", "0;1", "here;1e3", "here;;;"):
        assert select_part(refused) is None, refused


def test_a_part_of_a_select_is_awaited_as_long_as_a_statement_may_run() -> None:
    assert select_timeout(None) is None  # sql.timeout.ms 0: no limit, as on one node
    assert select_timeout(45.0) == 45.0 + FORWARD_TIMEOUT_S


def test_plain_rows_are_merged_and_cut_to_the_limit() -> None:
    meta = [["v", "INT", 4]]
    answers = [{"column_meta": meta, "data": [[1], [2]]}, {"column_meta": meta, "data": [[3]]}]
    assert merge_rows(None, answers) == {"code": 0, "column_meta": meta, "data": [[1], [2], [3]], "rows": 3}
    assert merge_rows(2, answers)["data"] == [[1], [2]]


def test_the_answer_names_what_was_written_and_what_not() -> None:
    failed = Outcome(PART, "not_written", status=503, code=0x2601, desc="node 2 is not registered")
    status, body = answer([Outcome(HERE, "written", rows=2), failed])
    assert (status, body["code"]) == (503, 0x2601)
    assert body["written"] == [{"node": 1, "vgroups": [["f", 0]], "tables": ["f.a0"], "rows": 2}]
    assert body["not_written"] == [{"node": 2, "vgroups": [["f", 1]], "tables": ["f.b0", "f.b1"], "rows": 5,
                                    "code": 0x2601, "desc": "node 2 is not registered"}]
    assert body["unknown"] == []
    assert body["desc"] == ("INSERT spanning nodes, each node's part all or nothing: 2 rows of f.a0 on node 1: "
                            "written; 5 rows of f.b0, f.b1 on node 2: NOT written (node 2 is not registered)")
    drop = [Outcome(HERE, "written"), Outcome(PART, "unknown", status=503, desc="no answer")]
    assert answer(drop, "DROP TABLE")[1]["desc"] == (  # tables are done, not written (reviewer finding 12)
        "DROP TABLE spanning nodes, each node's part all or nothing: f.a0 on node 1: done; f.b0, f.b1 on node 2: "
        "outcome unknown (no answer)")


async def test_this_nodes_part_failing_is_an_outcome_never_an_exception() -> None:
    """The node asked's own part (http_api._here): a full or failing disk is 'not written' (the engine keeps
    nothing of a refused write), anything unexpected 'unknown'; the other parts' outcomes are still answered."""
    async def failing(exc: Exception) -> Outcome:
        raise exc

    full = await _here(HERE, 1, failing(OSError(errno.ENOSPC, "No space left on device")))
    assert (full.state, full.status) == ("not_written", 503) and "No space left" in full.desc
    refused = await _here(HERE, 1, failing(StorageUnavailable("fsync failed: nothing was kept")))
    assert (refused.state, refused.status, refused.code) == ("not_written", 503, StorageUnavailable.code)
    bug = await _here(HERE, 1, failing(KeyError("x")))
    assert (bug.state, bug.status) == ("unknown", 500)
    status, body = answer([full, Outcome(PART, "written", rows=5)])
    assert status == 503 and [p["node"] for p in body["written"]] == [2], "node 2's rows are said written"


def test_the_node_token_is_never_in_a_callers_repr() -> None:
    assert TOKEN not in repr(ALICE) and "User:alice" in repr(ALICE)


async def test_this_nodes_part_that_the_catalog_may_still_apply_is_unknown_not_unwritten() -> None:
    """This node's own part (http_api._here): a ClusterUnavailable that may still be applied (a CREATE STABLE whose
    publish timed out) is ``unknown``; one that applied nothing, and any other StorageUnavailable, ``not_written``."""
    async def failing(error: Exception) -> Outcome:
        raise error

    maybe = await _here(HERE, 1, failing(ClusterUnavailable("it may still be applied", maybe_applied=True)))
    assert (maybe.state, maybe.status, maybe.desc) == ("unknown", 503, "node 1: it may still be applied")
    for error in (ClusterUnavailable("nothing was done"), StorageUnavailable("disk full")):
        assert (await _here(HERE, 1, failing(error))).state == "not_written"


async def test_this_nodes_part_appended_but_not_acknowledged_by_the_isr_is_unknown_not_unwritten() -> None:
    """rv5 R5-3: this node's part of a write spanning nodes that was appended to a replicated vnode and whose high
    watermark wait timed out (or whose leader was deposed) may be kept: ``unknown``, reported "outcome unknown", as
    distinct from a part refused before its append (NotEnoughReplicas, a vgroup led elsewhere: "NOT written")."""
    async def failing(error: Exception) -> Outcome:
        raise error

    appended = await _here(HERE, 1, failing(NotAcknowledged("not acknowledged by the in-sync replicas")))
    assert (appended.state, appended.status, appended.code) == ("unknown", 503, StorageUnavailable.code)
    refused = await _here(HERE, 1, failing(NotEnoughReplicas("1 in-sync replica(s), fewer than MIN_INSYNC 2")))
    assert (refused.state, refused.status) == ("not_written", 503)
    status, body = answer([appended, refused, Outcome(PART, "written", rows=5)])
    assert status == 503 and [p["node"] for p in body["unknown"]] == [1] and len(body["not_written"]) == 1
    assert "outcome unknown" in body["desc"]
