"""SQL INSERTs forwarded to the nodes owning their tables: real ``walgate serve --cluster`` nodes over a real etcd
(stopped by PID), SQL through their HTTP APIs, the rows read back by a real Kafka client (confluent-kafka) from a
TDengine topic whose partitions are the database's vgroups, each served by its node.

A database of 2 vgroups is placed over both nodes (vgroup 0 on node 1, vgroup 1 on node 2). An INSERT with rows
for tables of both vgroups through either node writes every row, each on its owner; when the owner refuses its
part (a column it does not have), and when the owner is down (kill -9), the answer says which rows were written and
which were not, by node, vgroup and table; the rows said written are read back and the others are not there, also
after the owner restarted. A DROP TABLE list whose other node is down drops nothing (it cannot be asked whether its
tables exist).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import http.client
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from etcd_cluster import EtcdCluster
from serve_support import eventually, no_traceback, node, node_token, sql, two_nodes, wait_log

from livewalgate import WalgateServer, free_port, walgate_env
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import Keys
from walgate.security.node_token import Signed, head_signature, signature
from walgate.storage import lineproto
from walgate.storage.vnode import vnode_of

TS = 1700000000000


def tables_of(vgroup: int, count: int) -> list[str]:
    """``count`` table names of database ``f`` (2 vgroups) in ``vgroup``."""
    return [name for name in (f"t{i}" for i in range(200)) if vnode_of("f", name, 2) == vgroup][:count]


def spread_database(n1: WalgateServer, n2: WalgateServer, auth: tuple[str, str] | None = None) -> None:
    """Database ``f`` of 2 vgroups made through node 1 once it sees node 2: vgroup 0 on node 1, vgroup 1 on node 2."""
    eventually("node 1 sees node 2", lambda: [r[2] for r in sql(n1, "SHOW DNODES", auth=auth)] == ["ready"] * 2)
    sql(n1, "CREATE DATABASE f VGROUPS 2", auth=auth)
    assert [r[3] for r in sql(n1, "SHOW f.VGROUPS", auth=auth)] == [1, 2], "vgroup 0 on node 1, vgroup 1 on node 2"


def post(server: WalgateServer, statement: str, db: str | None = None, auth: tuple[str, str] | None = None,
         headers: dict[str, str] | None = None, source: str | None = None) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON answer of ``statement`` through ``server`` (``db``: ``/rest/sql/{db}``; ``auth``:
    HTTP Basic user and password; ``headers``: more; ``source``: the local address to connect from)."""
    url = server.http_url + "/rest/sql" + (f"/{db}" if db else "")
    request = urllib.request.Request(url, data=statement.encode(), method="POST", headers=headers or {})
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    opener = urllib.request.build_opener(*([_From(source)] if source else []))
    try:
        with opener.open(request, timeout=60) as r:
            return r.status, dict(json.load(r))
    except urllib.error.HTTPError as e:
        return e.code, dict(json.load(e))


class _From(urllib.request.HTTPHandler):
    """HTTP from the local address ``source`` (a loopback address other than the nodes': another client host)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(http.client.HTTPConnection, source_address=(self.source, 0)), req)


def rows(server: WalgateServer, partitions: dict[int, int]) -> dict[int, list[tuple[str, int]]]:
    """Topic ``tf``'s rows (table, v) of each partition up to the number ``partitions`` asks, read from offset 0 by a
    consumer bootstrapped on ``server``, and whatever more it finds meanwhile."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "reader",
                         "enable.auto.commit": False})
    seen: dict[int, list[tuple[str, int]]] = {p: [] for p in partitions}
    try:
        consumer.assign([TopicPartition("tf", p, 0) for p in partitions])
        for _ in range(60):  # bounded: 60 polls of at most 1 s
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen[msg.partition()].append((msg.key().decode(), json.loads(msg.value())["v"]))
            if all(len(seen[p]) >= n for p, n in partitions.items()):
                for _ in range(3):  # anything more would be a row that should not be there
                    msg = consumer.poll(0.3)
                    if msg is not None and msg.error() is None:
                        seen[msg.partition()].append((msg.key().decode(), json.loads(msg.value())["v"]))
                break
    finally:
        consumer.close()
    return seen


def values(table: str, tag: int, vs: list[int], qualified: bool = True) -> str:
    name = f"f.{table}" if qualified else table
    stable = "f.st" if qualified else "st"
    return f"{name} USING {stable} TAGS ({tag}) VALUES " + " ".join(f"({TS + v}, {v})" for v in vs)


def test_an_insert_through_either_node_writes_each_row_on_its_owner_and_says_what_an_owner_did_not_write(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    a0, a1 = tables_of(0, 2)
    b0, b1 = tables_of(1, 2)
    kafka2, data2 = free_port(), tmp_path / "node2" / "data"
    with node(etcd1, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, data_dir=data2, kafka_port=kafka2) as n2:
            spread_database(n1, n2)
            sql(n1, "CREATE STABLE f.st (ts TIMESTAMP, v INT) TAGS (site INT)")
            sql(n1, "CREATE TOPIC tf AS STABLE f.st")
            eventually("node 2 knows f.st", lambda: [r[0] for r in sql(n2, "SHOW f.STABLES")] == ["st"])

            # through node 1, rows for both vgroups: each written on its owner
            status, answer = post(n1, "INSERT INTO " + " ".join(
                [values(a0, 1, [1, 2]), values(b0, 2, [3, 4, 5]), values(a1, 3, [6]), values(b1, 4, [7])]))
            assert (status, answer.get("data")) == (200, [[7]]), answer
            # through node 2, unqualified names in the request's database: forwarded the other way
            status, answer = post(n2, "INSERT INTO " + " ".join(
                [values(a0, 1, [8], qualified=False), values(b0, 2, [9], qualified=False)]), db="f")
            assert (status, answer.get("data")) == (200, [[2]]), answer
            got = rows(n1, {0: 4, 1: 5})
            assert sorted(got[0]) == sorted([(a0, 1), (a0, 2), (a1, 6), (a0, 8)]), got
            assert sorted(got[1]) == sorted([(b0, 3), (b0, 4), (b0, 5), (b1, 7), (b0, 9)]), got

            # node 2 refuses its part (no column w): node 1's part is written, the answer says which was not
            status, answer = post(n1, f"INSERT INTO {values(a1, 3, [10])} f.{b1} (ts, w) VALUES ({TS + 11}, 11)")
            assert status == 400, answer
            assert [(p["node"], p["tables"], p["rows"]) for p in answer["written"]] == [(1, [f"f.{a1}"], 1)]
            assert [(p["node"], p["vgroups"], p["tables"], p["rows"]) for p in answer["not_written"]] == [
                (2, [["f", 1]], [f"f.{b1}"], 1)], answer
            assert "w" in answer["not_written"][0]["desc"] and answer["unknown"] == [], answer
            assert answer["code"] == answer["not_written"][0]["code"] != 0
            assert f"1 rows of f.{b1} on node 2: NOT written" in answer["desc"], answer["desc"]

            # a plain SELECT through either node: each node's rows, merged by the node asked
            for server, statement, db in ((n1, "SELECT v, tbname FROM f.st", None), (n2, "SELECT v, tbname FROM st", "f")):
                status, answer = post(server, statement, db=db)
                assert status == 200 and answer["rows"] == 10, answer
                assert sorted(answer["data"]) == sorted(
                    [[1, a0], [2, a0], [8, a0], [3, b0], [4, b0], [5, b0], [9, b0], [6, a1], [10, a1], [7, b1]])
                assert [c[0] for c in answer["column_meta"]] == ["v", "tbname"]
            status, answer = post(n1, "SELECT v FROM f.st WHERE v > 2 LIMIT 4")
            assert status == 200 and answer["rows"] == 4 and all(v > 2 for v, in answer["data"]), answer
            status, answer = post(n1, "SELECT COUNT(*), SUM(v) FROM f.st")  # merged from both nodes' rows
            assert (status, answer.get("data")) == (200, [[10, 55]]), answer
            status, answer = post(n2, "SHOW f.TABLES")
            assert status == 200 and [r[0] for r in answer["data"]] == sorted([a0, a1, b0, b1]), answer

            n2.proc.kill()  # kill -9 of node 2
            n2.proc.wait(timeout=30)
            status, answer = post(n1, "INSERT INTO " + " ".join([values(a0, 1, [12]), values(b1, 4, [13, 14])]))
            assert status == 503, answer
            assert [(p["node"], p["tables"], p["rows"]) for p in answer["written"]] == [(1, [f"f.{a0}"], 1)], answer
            assert [(p["node"], p["tables"], p["rows"]) for p in answer["not_written"]] == [
                (2, [f"f.{b1}"], 2)], answer
            assert answer["unknown"] == [], answer
            assert sorted(rows(n1, {0: 6})[0]) == sorted([(a0, 1), (a0, 2), (a1, 6), (a0, 8), (a1, 10), (a0, 12)])
            for statement in ("SELECT v FROM f.st", "SELECT COUNT(*) FROM f.st GROUP BY site",
                              "SELECT v FROM f.st ORDER BY ts DESC LIMIT 2", "SHOW f.TABLES"):
                status, answer = post(n1, statement)  # never a partial answer
                assert status == 503 and "node 2" in answer["desc"] and "data" not in answer, (statement, answer)
            status, answer = post(n1, f"DROP TABLE f.{a0}, f.{b1}")  # node 2 cannot be asked: nothing dropped
            assert status == 503 and "node 2" in answer["desc"] and "nothing was done" in answer["desc"], answer
        with node(etcd1, tmp_path, 2, data_dir=data2, kafka_port=kafka2) as n2:
            got = rows(n1, {1: 5})
            assert sorted(got[1]) == sorted([(b0, 3), (b0, 4), (b0, 5), (b1, 7), (b0, 9)]), \
                "what node 2 refused or never got is not there"
            assert sorted(r[0] for r in sql(n1, "SHOW f.TABLES")) == sorted([a0, a1, b0, b1])
            no_traceback(n2)
        no_traceback(n1)


def test_a_large_insert_planned_in_a_worker_is_forwarded_too(etcd1: EtcdCluster, tmp_path: Path) -> None:
    a0, b0 = tables_of(0, 1)[0], tables_of(1, 1)[0]
    per_table = 30_000  # a body over the ingest workers' 1 MiB (PLAN_IN_WORKER_BYTES)
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        spread_database(n1, n2)
        sql(n1, "CREATE STABLE f.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        sql(n1, "CREATE TOPIC tf AS STABLE f.st")
        eventually("node 2 knows f.st", lambda: [r[0] for r in sql(n2, "SHOW f.STABLES")] == ["st"])
        statement = "INSERT INTO " + values(a0, 1, list(range(per_table))) + " " + values(b0, 2, list(range(per_table)))
        assert len(statement) > 1 << 20
        status, answer = post(n2, statement)
        assert (status, answer.get("data")) == (200, [[2 * per_table]]), answer
        assert counts(n1) == {0: per_table, 1: per_table}
        for server in (n1, n2):
            no_traceback(server)


def test_create_and_drop_table_through_either_node_run_on_each_tables_owner(etcd1: EtcdCluster,
                                                                           tmp_path: Path) -> None:
    a0 = tables_of(0, 1)[0]
    b0, b1, gone = tables_of(1, 3)
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        spread_database(n1, n2)
        sql(n1, "CREATE STABLE f.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        eventually("node 2 knows f.st", lambda: [r[0] for r in sql(n2, "SHOW f.STABLES")] == ["st"])
        # a subtable and a normal table of node 2's vgroup through node 1; one of node 1's through node 2, unqualified
        for server, statement, db in ((n1, f"CREATE TABLE f.{b0} USING f.st TAGS (1)", None),
                                      (n1, f"CREATE TABLE f.{b1} (ts TIMESTAMP, v INT)", None),
                                      (n2, f"CREATE TABLE {a0} (ts TIMESTAMP, v INT)", "f"),
                                      (n1, f"CREATE TABLE IF NOT EXISTS f.{b0} USING f.st TAGS (2)", None)):
            status, answer = post(server, statement, db=db)
            assert (status, answer.get("data")) == (200, [[0]]), (statement, answer)
        status, answer = post(n1, f"CREATE TABLE f.{b0} USING f.st TAGS (2)")  # node 2 refuses: it exists
        assert (status, answer["code"], answer["written"]) == (400, 0x0602, []), answer
        assert [(p["node"], p["vgroups"], p["tables"]) for p in answer["not_written"]] == [
            (2, [["f", 1]], [f"f.{b0}"])], answer
        # each table is where its vgroup is: rows without USING or columns go in
        status, answer = post(n1, f"INSERT INTO f.{b0} VALUES ({TS}, 1) f.{b1} VALUES ({TS}, 2) f.{a0} VALUES ({TS}, 3)")
        assert (status, answer.get("data")) == (200, [[3]]), answer
        assert sorted(r[0] for r in sql(n1, "SHOW f.TABLES")) == sorted([a0, b0, b1])
        # a supertable named like node 1's normal table: refused through node 2 too (node 1 is asked), nothing made
        status, answer = post(n2, f"CREATE STABLE f.{a0} (ts TIMESTAMP, v INT) TAGS (site INT)")
        assert (status, answer["code"]) == (400, 0x0602) and "already exists" in answer["desc"], answer
        new = tables_of(0, 2)[1]  # a name of node 1's vgroup no table has: made through node 2, known to both once
        status, answer = post(n2, f"CREATE STABLE f.{new} (ts TIMESTAMP, v INT) TAGS (site INT)")  # answered
        assert (status, answer.get("data")) == (200, [[0]]), answer
        for server in (n1, n2):
            assert sorted(r[0] for r in sql(server, "SHOW f.STABLES")) == sorted(["st", new])

        # one of node 2's tables does not exist: refused whole before any part is sent, as one node refuses it
        status, answer = post(n1, f"DROP TABLE f.{a0}, f.{b0}, f.{gone}")
        assert (status, answer) == (400, {"code": 0x2662, "desc": f"Table does not exist: f.{gone}"}), answer
        wait_log(n1, f"DROP TABLE DROP TABLE f.{a0}, f.{b0}, f.{gone}: failed: Table does not exist: f.{gone}")
        assert sorted(r[0] for r in sql(n2, "SHOW f.TABLES")) == sorted([a0, b0, b1]), "nothing dropped"
        status, answer = post(n2, f"DROP TABLE IF EXISTS {a0}, {b0}, {gone}", db="f")  # IF EXISTS kept on each node
        assert (status, answer.get("data")) == (200, [[0]]), answer
        assert [r[0] for r in sql(n1, "SHOW f.TABLES")] == [b1]
        # a DROP TABLE of tables only, every part dropped, waits for no catalog record: answered 200 and audited
        # with the cluster's etcd gone (it used to wait 30 s for the catalog, then answer 503, unaudited)
        sql(n1, f"CREATE TABLE f.{a0} (ts TIMESTAMP, v INT)")
        etcd1.stop()
        status, answer = post(n1, f"DROP TABLE f.{a0}, f.{b1}")
        assert (status, answer.get("data")) == (200, [[0]]), answer
        wait_log(n1, f"DROP TABLE DROP TABLE f.{a0}, f.{b1}: ok")
        for server in (n1, n2):
            no_traceback(server)


def counts(server: WalgateServer) -> dict[int, int]:
    """The number of records of each partition of topic ``tf``, read through a consumer bootstrapped on ``server``
    until it has read nothing for 3 s after its first record (bounded: 60 s; a loaded machine may take longer than
    3 s to give the first one)."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "counter",
                         "enable.auto.commit": False})
    seen = {0: 0, 1: 0}
    try:
        consumer.assign([TopicPartition("tf", p, 0) for p in seen])
        quiet, deadline = 0, time.monotonic() + 60
        while quiet < 3 and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10_000, 1.0) if m.error() is None]
            quiet = 0 if batch else quiet + 1 if any(seen.values()) else 0
            for m in batch:
                seen[m.partition()] += 1
    finally:
        consumer.close()
    return seen


def test_the_callers_identity_is_carried_and_checked_on_the_owner(etcd1: EtcdCluster, tmp_path: Path) -> None:
    a0, b0 = tables_of(0, 1)[0], tables_of(1, 1)[0]
    root, alice, bob, carol = (("root", "Root-pass-1"), ("alice", "Secret-123"), ("bob", "Secret-123"),
                               ("carol", "Secret-123"))
    env = walgate_env() | {"WALGATE_ROOT_PASSWORD": root[1], "WALGATE_HTTP_AUTH": "basic"}
    acls = ["--override", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--override", "super.users=User:root;User:ANONYMOUS"]  # ANONYMOUS: the Kafka reader (PLAINTEXT)
    with node(etcd1, tmp_path, 1, *acls, env=env) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *acls, env=env) as n2:
            spread_database(n1, n2, auth=root)
            for statement in ("CREATE STABLE f.st (ts TIMESTAMP, v INT) TAGS (site INT)",
                              "CREATE TOPIC tf AS STABLE f.st", "CREATE USER alice PASS 'Secret-123'",
                              "CREATE USER bob PASS 'Secret-123'", "GRANT WRITE ON f.* TO alice"):
                sql(n1, statement, auth=root)
            eventually("node 2 knows alice's grant", lambda: post(
                n2, f"INSERT INTO {values(b0, 2, [0])}", auth=alice)[0] == 200)
            statement = "INSERT INTO " + values(a0, 1, [1, 2]) + " " + values(b0, 2, [3])
            status, answer = post(n1, statement, auth=alice)  # node 2 authenticates alice and checks her ACLs
            assert (status, answer.get("data")) == (200, [[3]]), answer
            status, answer = post(n1, statement, auth=bob)  # refused by node 1 before anything is sent
            assert status == 403 and "written" not in answer, answer
            # carol may write from 127.0.0.2 only: checked with her address on node 2 too (not node 1's)
            sql(n1, "CREATE USER carol PASS 'Secret-123'", auth=root)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{n1.kafka_port}"})
            for done in admin.create_acls([AclBinding(ResourceType.TOPIC, "f.", ResourcePatternType.PREFIXED,
                                                      "User:carol", "127.0.0.2", operation,
                                                      AclPermissionType.ALLOW)
                                           for operation in (AclOperation.WRITE, AclOperation.CREATE)]).values():
                done.result(30)
            eventually("node 2 knows carol's ACL", lambda: post(
                n2, f"INSERT INTO {values(b0, 2, [20])}", auth=carol, source="127.0.0.2")[0] == 200)
            statement = "INSERT INTO " + values(a0, 1, [21]) + " " + values(b0, 2, [22])
            status, answer = post(n1, statement, auth=carol, source="127.0.0.2")
            assert (status, answer.get("data")) == (200, [[2]]), answer
            status, answer = post(n1, statement, auth=carol)  # from 127.0.0.1: refused before anything is sent
            assert status == 403 and "written" not in answer, answer
            # a CREATE TABLE of node 2's vgroup through node 1: carol's, from her address, made on node 2
            create = f"CREATE TABLE f.{tables_of(1, 2)[1]} (ts TIMESTAMP, v INT)"
            for who, source, status in ((alice, None, 403), (carol, None, 403), (carol, "127.0.0.2", 200)):
                assert post(n1, create, auth=who, source=source)[0] == status, (who, source)
            assert post(n2, create, auth=root)[1]["code"] == 0x0602, "made on node 2"
            # a forwarded part sent straight to its owner without the cluster's node token: refused, whoever asks,
            # whoever it claims to be for
            forged = {"X-Walgate-Forwarded": "1;1", "X-Walgate-Principal": "User:root",
                      "X-Walgate-Client-Host": "127.0.0.1", "X-Walgate-Time": str(time.time_ns() // 1_000_000),
                      "X-Walgate-Signature": "0" * 64}
            for who, headers in ((bob, {"X-Walgate-Forwarded": "1;1"}), (alice, {"X-Walgate-Forwarded": "1;1"}),
                                 (None, {"X-Walgate-Forwarded": "1;1"}), (None, forged), (bob, forged),
                                 (None, forged | {"X-Walgate-Signature": "\u00e9" * 64}),  # not hex: 403, not 500
                                 (None, forged | {"X-Walgate-Time": "9" * 5000}),
                                 (None, signed_part(etcd1, 1, "User:alice", statement))):  # signed for node 1
                status, answer = post(n2, statement, auth=who, headers=headers)
                assert (status, answer["code"]) == (403, 0x0357) and "signed" in answer["desc"], answer
            # a node of the version before (no version header): refused, saying so
            old = signed_part(etcd1, 2, "User:root", statement)
            del old["X-Walgate-Signature-Version"]
            status, answer = post(n2, statement, headers=old)
            assert status == 403 and "same walgate version" in answer["desc"], answer
            # forged headers announcing 8 MiB: refused before the body is read (none is sent)
            host, port = n2.http_url.removeprefix("http://").split(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            try:
                connection.putrequest("POST", "/rest/sql")
                for name, value in (forged | {"Content-Length": str(8 << 20), "X-Walgate-Catalog-Seq": "0",
                                              "X-Walgate-Head-Signature": "0" * 64,
                                              "X-Walgate-Signature-Version": "2"}).items():
                    connection.putheader(name, value)
                connection.endheaders()
                response = connection.getresponse()
                assert response.status == 403 and b"Head-Signature" in response.read()
            finally:
                connection.close()
            # a part whose sender applied a catalog record this node has not yet: applied first, then the user
            # checked (dave, made through node 1 meanwhile, is a user: refused by the ACLs, not as no user)
            seq = asyncio.run(catalog_seq(etcd1)) + 1
            dave = "INSERT INTO " + values(a0, 1, [31]) + " " + values(b0, 2, [30])  # part 1;1: b0, node 2's
            waiting = concurrent.futures.ThreadPoolExecutor(1).submit(
                post, n2, dave, headers=signed_part(etcd1, 2, "User:dave", dave, seq))
            sql(n1, "CREATE USER dave PASS 'Secret-123'", auth=root)
            status, answer = waiting.result(90)
            assert status == 403 and "not a user" not in answer["desc"] and "dave" in answer["desc"], answer
            # validly signed for a caller that is no user (what a node without http.auth in front would send):
            # this node authenticates every request, so it refuses it, though User:ANONYMOUS is a super user here
            status, answer = post(n2, statement, headers=signed_part(etcd1, 2, "User:ANONYMOUS", statement))
            assert (status, answer["code"]) == (403, 0x0357) and "not a user" in answer["desc"], answer
            assert counts(n1) == {0: 3, 1: 4}, "alice's and carol's rows; none of bob's or the forged ones"
            for server in (n1, n2):
                no_traceback(server)


async def catalog_seq(etcd: EtcdCluster) -> int:
    """The cluster's last catalog record (etcd's ``catalog/seq``)."""
    session = EtcdSession(etcd.endpoints)
    try:
        answer = await session.get(Keys("walgate").seq)
        return int(answer.value) if answer is not None else 0
    finally:
        await session.close()


def signed_part(etcd: EtcdCluster, node_id: int, principal: str, statement: str, seq: int = 0,
                forwarded: str = "1;1") -> dict[str, str]:
    """The headers of ``statement``'s part ``forwarded`` (``X-Walgate-Forwarded``) sent to ``/rest/sql`` of node
    ``node_id`` for ``principal`` at 127.0.0.1 by a node that applied catalog record ``seq``, signed with the
    cluster's node token as a node signs it (read from etcd, as a node reads it)."""
    now = time.time_ns() // 1_000_000
    signed = Signed(node_id, "POST", "/rest/sql", {}, forwarded, principal, "127.0.0.1", now, statement.encode(), seq)
    key = node_token(etcd)
    return {"X-Walgate-Forwarded": forwarded, "X-Walgate-Principal": principal, "X-Walgate-Client-Host": "127.0.0.1",
            "X-Walgate-Time": str(now), "X-Walgate-Signature": signature(key, signed),
            "X-Walgate-Head-Signature": head_signature(key, signed), "X-Walgate-Catalog-Seq": str(seq),
            "X-Walgate-Signature-Version": "2"}


def sites_of(vgroup: int, count: int) -> list[str]:
    """``count`` values of tag ``site`` whose line-protocol subtable of measurement ``m`` is in ``vgroup`` of ``f``."""
    return [s for s in (f"s{i}" for i in range(200))
            if vnode_of("f", lineproto.child_table_name("m", (("site", s),)), 2) == vgroup][:count]


def influx(server: WalgateServer, body: str) -> tuple[int, dict[str, Any], str | None]:
    """Status, JSON answer (empty for 204) and ``X-Walgate-Rows`` of a line-protocol ``body`` into ``f``."""
    request = urllib.request.Request(server.http_url + "/influxdb/v1/write?db=f&precision=ms", data=body.encode(),
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, {}, r.headers.get("X-Walgate-Rows")
    except urllib.error.HTTPError as e:
        return e.code, dict(json.load(e)), None


def csv(server: WalgateServer, body: str, **params: str) -> tuple[int, dict[str, Any]]:
    """Status and JSON answer of a CSV ``body`` into ``f`` (``params``: ``table=`` or ``stable=``)."""
    query = "&".join(f"{k}={v}" for k, v in params.items())
    request = urllib.request.Request(server.http_url + f"/csv/v1/write?db=f&{query}", data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, dict(json.load(r))
    except urllib.error.HTTPError as e:
        return e.code, dict(json.load(e))


def test_line_protocol_and_csv_through_either_node_are_written_on_each_rows_owner(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    (a, a2), (b, b2) = sites_of(0, 2), sites_of(1, 2)
    ta, tb = tables_of(0, 1)[0], tables_of(1, 1)[0]
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        spread_database(n1, n2)
        sql(n1, "CREATE STABLE f.m (_ts TIMESTAMP, v DOUBLE) TAGS (site NCHAR(16))")
        sql(n1, "CREATE TOPIC tf AS STABLE f.m")
        eventually("node 2 knows f.m", lambda: [r[0] for r in sql(n2, "SHOW f.STABLES")] == ["m"])
        lines = [f"m,site={a} v=1 {TS + 1}", f"m,site={b} v=2 {TS + 2}", "# a comment", f"m,site={a2} v=3 {TS + 3}",
                 f"m,site={b2} v=4 {TS + 4}", f"m,site={b} v=5 {TS + 5}"]
        assert influx(n1, "\n".join(lines)) == (204, {}, "5")
        assert influx(n2, "\n".join(lines[:2])) == (204, {}, "2")  # the other way; the same rows again
        assert counts(n1) == {0: 3, 1: 4}
        records = f"_ts,v,site,tbname\n{TS + 7},7,x,{ta}\n{TS + 8},8,y,{tb}\n{TS + 9},9,y,{tb}\n"
        assert csv(n2, records, stable="m") == (200, {"code": 0, "rows": 3})
        assert csv(n1, f"_ts,v\n{TS + 10},10\n", table=tb) == (200, {"code": 0, "rows": 1})  # all on node 2
        assert counts(n1) == {0: 4, 1: 7}

        status, answer, _ = influx(n1, f"m,site={a} v=1 {TS + 1}\nm,site={b} v=2 {TS + 2}\nm,site={b} v=x {TS + 6}")
        assert status == 400 and "line 3" in answer["desc"] and "written" not in answer, "a bad line: nothing sent"

        n2.proc.kill()  # kill -9 of node 2
        n2.proc.wait(timeout=30)
        status, answer, _ = influx(n1, "\n".join(lines))
        assert status == 503, answer
        assert [(p["node"], p["rows"], p["lines"]) for p in answer["written"]] == [(1, 2, [[1, 1], [4, 4]])], answer
        assert [(p["node"], p["vgroups"], p["rows"], p["lines"]) for p in answer["not_written"]] == [
            (2, [["f", 1]], 3, [[2, 2], [5, 6]])], answer
        status, answer = csv(n1, records, stable="m")
        assert status == 503, answer
        assert [(p["node"], p["tables"], p["lines"]) for p in answer["written"]] == [(1, [f"f.{ta}"], [[2, 2]])]
        assert [(p["node"], p["tables"], p["rows"], p["lines"]) for p in answer["not_written"]] == [
            (2, [f"f.{tb}"], 2, [[3, 4]])], answer
        assert counts(n1) == {0: 7, 1: 0}
        no_traceback(n1)
