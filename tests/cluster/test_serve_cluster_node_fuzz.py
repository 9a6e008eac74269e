"""Generated hostile requests to the endpoints nodes forward to each other (``/rest/sql``, ``/influxdb/v1/write``,
``/csv/v1/write``, and ``/cluster/v1/tables`` which asks which tables exist; signed with the cluster's node token:
walgate.security.node_token, gateway/sql_forward.py), sent to a real ``walgate serve --cluster`` node (2 nodes over a
real etcd, stopped by PID).

* Forged: a request a node would sign, then one to three of: a node header left out, sent twice (the same value or
  another), its value replaced (empty, huge, non-ASCII bytes, negative or overflowing numbers, a time off the
  window, a signature of the wrong length or alphabet, another principal), the body changed, signed for the other
  node, with a token of no node, or too long ago or ahead: each answered 403 (Authentication failure).
* Signed as a node signs it, but with an ``X-Walgate-Forwarded`` value of no form a node sends (no node id, positions
  negative, repeated, out of range, of non-ASCII digits, ``here``/``scan`` on a write, positions on a line-protocol
  or CSV body or the tables question): each answered 400.

Then nothing any of them carried was written, neither node logged a traceback, and the node still takes a correctly
signed forwarded part and answers a SELECT through either node. Seeded and bounded (tests/storage/fuzzing.py's
settings: 60 requests; WALGATE_FUZZ_LONG=1: 20 times).
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from collections import Counter
from pathlib import Path

from etcd_cluster import EtcdCluster
from hypothesis import assume, given
from hypothesis import strategies as st
from serve_support import no_traceback, node_token, sql, two_nodes
from test_serve_cluster_sql_forward import sites_of, spread_database, tables_of

from livewalgate import WalgateServer
from walgate.security.node_token import (
    CATALOG_SEQ,
    CLIENT_HOST,
    HEAD_SIGNATURE,
    PRINCIPAL,
    SIGNATURE,
    TIME,
    VERSION,
    VERSION_HEADER,
    WINDOW_MS,
    Signed,
    head_signature,
    signature,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "storage"))
from fuzzing import fuzz_settings  # noqa: E402

FORWARDED = "X-Walgate-Forwarded"  # = sql_forward.FORWARDED (not imported: it would load aiohttp here)
NODE_HEADERS = [FORWARDED, PRINCIPAL, CLIENT_HOST, TIME, SIGNATURE, HEAD_SIGNATURE, CATALOG_SEQ, VERSION_HEADER]
TS = 1700000000000
SQL_PATH, LINES_PATH, CSV_PATH, TABLES_PATH = "/rest/sql", "/influxdb/v1/write", "/csv/v1/write", "/cluster/v1/tables"
QUERIES = {SQL_PATH: {}, LINES_PATH: {"db": "f", "precision": "ms"}, CSV_PATH: {"db": "f", "stable": "st"},
           TABLES_PATH: {}}
SENT = {SQL_PATH: "1;1", LINES_PATH: "1;", CSV_PATH: "1;", TABLES_PATH: "1;tables"}  # X-Walgate-Forwarded as sent
ODD_VALUES = st.sampled_from([b"", b"0", b"-1", b"9" * 20, b"9" * 5000, b"\xc3\xa9" * 32, b"\xff\xfe", b"\x00",
                              b"User:", b"User:root", b"1;0", b"2", b"0" * 64, b"0" * 63, b"G" * 64, b"x" * 7000,
                              b"18446744073709551616", b"-9223372036854775809", b" 1", b"1e3", b"\xd9\xa3"])


class Node:
    """How the test signs a request for node 2 (``token``: the cluster's), and what it would write there."""

    def __init__(self, server: WalgateServer, token: str) -> None:
        self.server, self.token = server, token
        self.table = tables_of(1, 1)[0]  # in vgroup 1: node 2's
        host, port = server.http_url.removeprefix("http://").split(":")
        self.address = (host, int(port))

    def body(self, path: str, value: int) -> bytes:
        """A body writing one row of ``value`` on node 2 (an INSERT's part at position 1), or asking whether tables
        exist there."""
        if path == SQL_PATH:
            other = tables_of(0, 1)[0]
            return (f"INSERT INTO f.{other} USING f.st TAGS (0) VALUES ({TS}, {value}) "
                    f"f.{self.table} USING f.st TAGS (1) VALUES ({TS + value}, {value})").encode()
        if path == TABLES_PATH:  # the question which tables exist (nothing written)
            return f'{{"tables": [["f", "{self.table}"], ["f", "x{value}"]]}}'.encode()
        if path == LINES_PATH:
            return f"m,site={sites_of(1, 1)[0]} v={value}i {TS + value}".encode()  # node 2's subtable of m
        return f"ts,v,tbname,site\n{TS + value},{value},{self.table},1".encode()

    def signed(self, path: str, body: bytes, forwarded: str, node: int = 2, token: str | None = None,
               skew_ms: int = 0) -> list[tuple[str, bytes]]:
        now = time.time_ns() // 1_000_000 + skew_ms
        signed = Signed(node, "POST", path, QUERIES[path], forwarded, "User:root", "127.0.0.1", now, body, 0)
        key = token or self.token
        return [(FORWARDED, forwarded.encode()), (PRINCIPAL, b"User:root"), (CLIENT_HOST, b"127.0.0.1"),
                (TIME, str(now).encode()), (SIGNATURE, signature(key, signed).encode()),
                (HEAD_SIGNATURE, head_signature(key, signed).encode()), (CATALOG_SEQ, b"0"),
                (VERSION_HEADER, VERSION.encode())]

    def send(self, path: str, headers: list[tuple[str, bytes]], body: bytes) -> tuple[int, bytes]:
        """POST ``body`` to ``path`` with exactly ``headers`` (any bytes, names repeated as given)."""
        query = "&".join(f"{k}={v}" for k, v in QUERIES[path].items())
        connection = http.client.HTTPConnection(*self.address, timeout=60)
        try:
            connection.putrequest("POST", path + (f"?{query}" if query else ""), skip_accept_encoding=True)
            for name, value in headers:
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def _positions_of_no_node(path: str) -> st.SearchStrategy[str]:
    sender = st.sampled_from(["1", "x", "", "-1", "+1", "\u0663", "1e0"])  # (no blank at the edge: HTTP trims it)
    if path == SQL_PATH:  # the INSERT has 2 targets: 0 is node 1's, 1 node 2's
        positions = st.sampled_from(["", "-1", "2", "1,1", " 1", "+1", "01", "\u0663", "1_0", "9" * 40, "here",
                                     "scan", "1;1", "0,,1"])
        return st.tuples(sender, positions).map(lambda h: f"{h[0]};{h[1]}").filter(
            lambda h: h not in ("1;1", "1;0"))  # (the forms a node sends)
    rest = "tables" if path == TABLES_PATH else ""
    return st.tuples(sender, st.sampled_from(["0", "1", "here", "x", ";", "TABLES", "tables;"])).map(
        lambda h: f"{h[0]};{h[1]}").filter(lambda h: h != f"1;{rest}") | st.sampled_from(["x;", "", "1", "\u0663;"])


@st.composite
def forged(draw: st.DrawFn, node: Node, value: int) -> tuple[str, list[tuple[str, bytes]], bytes, str]:
    """A request a node would sign, changed (module docstring); its path, headers, body and what was changed."""
    path = draw(st.sampled_from(list(QUERIES)))
    body = node.body(path, value)
    forwarded = SENT[path]
    how = draw(st.sampled_from(["headers", "headers", "headers", "body", "other node", "stranger", "stale"]))
    if how == "other node":
        return path, node.signed(path, body, forwarded, node=1), body, how
    if how == "stranger":
        return path, node.signed(path, body, forwarded, token="a-token-of-no-node-" + "x" * 30), body, how
    if how == "stale":
        skew = draw(st.sampled_from([WINDOW_MS + 60_000, -WINDOW_MS - 60_000, 10**14, -(10**12)]))
        return path, node.signed(path, body, forwarded, skew_ms=skew), body, how
    headers = node.signed(path, body, forwarded)
    original = list(headers)
    if how == "body":
        return path, headers, node.body(path, value + 1), how
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(headers) - 1))
        name, value_was = headers[i]
        change = draw(st.sampled_from(["drop", "twice", "twice other", "replace"]))
        if change == "drop":
            del headers[i]
        elif change == "twice":
            headers.insert(draw(st.integers(0, len(headers))), (name, value_was))
        else:
            odd = draw(ODD_VALUES.filter(lambda v: v != value_was))  # noqa: B023 (drawn now)
            if change == "replace":
                headers[i] = (name, odd)
            else:
                headers.insert(draw(st.integers(0, len(headers))), (name, odd))
        changes.append(f"{change} {name}")
        if not headers:
            break
    assume(sorted(headers) != sorted(original))  # the same headers in another order: still signed
    return path, headers, body, ", ".join(changes)


def _count(server: WalgateServer) -> int:
    """The rows of f.st and f.m through ``server``."""
    return sum(int(sql(server, f"SELECT COUNT(*) FROM f.{stable}")[0][0]) for stable in ("st", "m"))


def test_hostile_requests_between_nodes_are_refused_cleanly_and_the_node_still_serves(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        spread_database(n1, n2)
        sql(n1, "CREATE STABLE f.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        sql(n1, f"INSERT INTO f.{tables_of(1, 1)[0]} USING f.st TAGS (1) VALUES ({TS}, 0)")  # known on node 2 too
        sql(n1, "CREATE STABLE f.m (ts TIMESTAMP, v BIGINT) TAGS (site NCHAR(8))")  # the line protocol's
        node = Node(n2, node_token(etcd1))
        before = _count(n1)
        answers: Counter[str] = Counter()
        values = iter(range(1000, 10**6))  # each request's row its own value: any written one would be counted

        @fuzz_settings(40)
        @given(st.data())
        def forged_are_refused(data: st.DataObject) -> None:
            path, headers, body, how = data.draw(forged(node, next(values)))
            status, answer = node.send(path, headers, body)
            answers[f"forged {status}"] += 1
            assert status == 403 and b"Authentication failure" in answer, (how, headers, status, answer[:300])

        @fuzz_settings(20)
        @given(st.data())
        def malformed_parts_are_refused(data: st.DataObject) -> None:
            path = data.draw(st.sampled_from(list(QUERIES)))
            forwarded = data.draw(_positions_of_no_node(path))
            body = node.body(path, next(values))
            status, answer = node.send(path, node.signed(path, body, forwarded), body)
            answers[f"malformed {status}"] += 1
            assert status == 400, (path, forwarded, status, answer[:300])

        # the examples the fuzzing found first: a node header sent twice (accepted: the first value read, the
        # second unseen); a header past aiohttp's 8190 bytes (its own 400, logged with a traceback); a
        # line-protocol, CSV or tables-question part naming positions, or a sender that is no node id (accepted)
        body = node.body(SQL_PATH, next(values))
        headers = node.signed(SQL_PATH, body, "1;1")
        assert node.send(SQL_PATH, [headers[0], *headers], body)[0] == 403
        assert node.send(SQL_PATH, [*headers[:4], (SIGNATURE, b"0" * 20000), *headers[5:]], body)[0] in (400, 431)
        for path in (LINES_PATH, CSV_PATH, TABLES_PATH):
            for forwarded in ("x;", "1;0"):
                body = node.body(path, next(values))
                assert node.send(path, node.signed(path, body, forwarded), body)[0] == 400, (path, forwarded)
        forged_are_refused()
        malformed_parts_are_refused()
        print("\nanswers:", dict(answers))
        assert _count(n1) == before, "nothing any of them carried was written"
        for path in QUERIES:  # a correctly signed part of each kind is still taken
            body = node.body(path, next(values))
            status, answer = node.send(path, node.signed(path, body, SENT[path]), body)
            assert status in (200, 204), (path, status, answer[:300])
            assert path != TABLES_PATH or json.loads(answer)["exist"] == [True, False], answer
        assert _count(n1) == _count(n2) == before + 3
        for server in (n1, n2):
            no_traceback(server)
