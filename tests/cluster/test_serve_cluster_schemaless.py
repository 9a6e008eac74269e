"""Schemaless writes (line protocol) that create or widen a supertable of a database spread over 2 nodes: real
``walgate serve --cluster`` nodes over a real etcd (stopped by PID), line protocol through their HTTP APIs, the rows
read back by a real Kafka client (confluent-kafka) and by SELECT through either node.

The node asked makes the supertable change through the cluster's catalog stream (every node applies it), then
writes or forwards the rows. A TDengine topic of one table of that database is compiled on the table's node, and a
consumer bootstrapped on the other node reads it (its partition there is empty). Two nodes making the same change at once both write their rows; with a field of
another type one write is refused with the single node's type-conflict error. Without etcd's majority a write
needing a change is refused with 503, nothing written, while writes needing none go on.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from etcd_cluster import EtcdCluster
from serve_support import eventually, no_traceback, node, sql, two_nodes, wait_log
from test_serve_cluster_sql_forward import post, spread_database

from livewalgate import WalgateServer
from walgate.storage import lineproto
from walgate.storage.vnode import vnode_of

TS = 1700000000000


def sites_of(measurement: str, vgroup: int, count: int, db: str = "f", vgroups: int = 2) -> list[str]:
    """``count`` values of tag ``site`` whose subtable of ``measurement`` is in ``vgroup`` of ``db``."""
    return [s for s in (f"s{i}" for i in range(400))
            if vnode_of(db, lineproto.child_table_name(measurement, (("site", s),)), vgroups) == vgroup][:count]


def influx(server: WalgateServer, body: str, db: str = "f") -> tuple[int, dict[str, Any], str | None]:
    """Status, JSON answer (empty for 204) and ``X-Walgate-Rows`` of a line-protocol ``body`` into ``db``."""
    request = urllib.request.Request(server.http_url + f"/influxdb/v1/write?db={db}&precision=ms",
                                     data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, {}, r.headers.get("X-Walgate-Rows")
    except urllib.error.HTTPError as e:
        return e.code, dict(json.load(e)), None


def read(server: WalgateServer, topic: str, partitions: dict[int, int]) -> dict[int, list[dict[str, Any]]]:
    """The records (JSON values) of each partition of ``topic``, up to the number ``partitions`` asks, read from
    offset 0 by a consumer bootstrapped on ``server`` (bounded: 60 polls of at most 1 s); an error is a failure."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "reader",
                         "enable.auto.commit": False})
    seen: dict[int, list[dict[str, Any]]] = {p: [] for p in partitions}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is not None:
                raise AssertionError(f"reading {topic}: {msg.error()}")
            if msg is not None:
                seen[msg.partition()].append(json.loads(msg.value()))
            if all(len(seen[p]) >= n for p, n in partitions.items()):
                break
    finally:
        consumer.close()
    return seen


def described(server: WalgateServer, stable: str) -> list[tuple[str, str]]:
    return [(str(r[0]), str(r[1])) for r in sql(server, f"DESCRIBE f.{stable}")]


def test_schemaless_changes_and_a_topic_of_one_table_through_either_node_of_a_spread_database(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        spread_database(n1, n2)
        eventually("node 2 knows f", lambda: "f" in [r[0] for r in sql(n2, "SHOW DATABASES")])
        made_through_node_2_widened_through_node_1_and_a_topic_of_one_table_read_anywhere(n1, n2)
        racing_nodes_both_write_and_a_type_conflict_refuses_one(n1, n2)
        for server in (n1, n2):
            no_traceback(server)


def made_through_node_2_widened_through_node_1_and_a_topic_of_one_table_read_anywhere(
        n1: WalgateServer, n2: WalgateServer) -> None:
    """Line protocol through node 2 makes measurement ``m`` (rows on both nodes), through node 1 a new field and tag
    widen it; the rows read by confluent-kafka through node 1 and by SELECT through either node. A topic of one table
    made on node 2 is read by a consumer bootstrapped on node 1."""
    (a, a2), (b, b2) = sites_of("m", 0, 2), sites_of("m", 1, 2)
    lines = [f"m,site={a} v=1 {TS + 1}", f"m,site={b} v=2 {TS + 2}", f"m,site={a2} v=3 {TS + 3}",
             f"m,site={b2} v=4 {TS + 4}"]
    assert influx(n2, "\n".join(lines)) == (204, {}, "4"), "a new measurement, rows on both nodes"
    for server in (n1, n2):  # applied on both before the answer: node 1 wrote its rows under it
        assert described(server, "m") == [("_ts", "TIMESTAMP"), ("v", "DOUBLE"), ("site", "NCHAR")]
    # a new field and a new tag through node 1: an ALTER through the stream, then the rows
    assert influx(n1, f"m,site={a},rack=r1 v=5,w=\"x\" {TS + 5}\nm,site={b} v=6,w=\"y\" {TS + 6}") == (
        204, {}, "2")
    for server in (n1, n2):
        assert [c for c, _ in described(server, "m")] == ["_ts", "v", "w", "site", "rack"]
    assert influx(n2, f"m,site={b2} v=7 {TS + 7}") == (204, {}, "1"), "no change needed: written as ever"

    sql(n2, "CREATE TOPIC tm AS STABLE f.m")
    got = read(n1, "tm", {0: 3, 1: 4})  # a consumer bootstrapped on node 1 reads node 2's partition too
    assert sorted(r["v"] for r in got[0]) == [1.0, 3.0, 5.0], got
    assert sorted(r["v"] for r in got[1]) == [2.0, 4.0, 6.0, 7.0], got
    assert [r.get("w") for r in sorted(got[1], key=lambda r: r["v"])] == [None, None, "y", None], got
    for server, statement in ((n1, "SELECT v, w FROM f.m"), (n2, "SELECT v, w FROM m")):  # merged SELECT
        status, answer = post(server, statement, db=None if server is n1 else "f")
        assert status == 200, answer
        assert sorted(answer["data"], key=lambda r: r[0]) == [
            [1.0, None], [2.0, None], [3.0, None], [4.0, None], [5.0, "x"], [6.0, "y"], [7.0, None]], answer

    # a topic of one table of this database: compiled on node 2 (the table's), read through node 1
    (table,) = [t for t in (f"t{i}" for i in range(200)) if vnode_of("f", t, 2) == 1][:1]
    sql(n2, f"CREATE TABLE f.{table} (ts TIMESTAMP, v INT)")
    sql(n2, f"CREATE TOPIC tt AS SELECT v FROM f.{table}")
    eventually("node 1 knows tt", lambda: "tt" in [r[0] for r in sql(n1, "SHOW TOPICS")])
    status, answer = post(n1, f"INSERT INTO f.{table} VALUES ({TS + 1}, 1) ({TS + 2}, 2)")  # forwarded to node 2
    assert (status, answer.get("data")) == (200, [[2]]), answer
    metadata = Consumer({"bootstrap.servers": f"127.0.0.1:{n1.kafka_port}", "group.id": "meta"})
    try:
        partitions = metadata.list_topics("tt", timeout=30).topics["tt"].partitions
    finally:
        metadata.close()
    assert {p: partitions[p].leader for p in partitions} == {0: 1, 1: 2}, "each vgroup's node"
    got = read(n1, "tt", {0: 0, 1: 2})
    assert (got[0], sorted(r["v"] for r in got[1])) == ([], [1, 2]), got


def race(sends: list[tuple[WalgateServer, str]], db: str = "f") -> list[tuple[int, dict[str, Any], str | None]]:
    """The answers to line-protocol bodies sent to their servers at once (threads started at a barrier)."""
    answers: dict[int, tuple[int, dict[str, Any], str | None]] = {}
    start = threading.Barrier(len(sends))

    def send(k: int, server: WalgateServer, body: str) -> None:
        start.wait(timeout=30)
        answers[k] = influx(server, body, db)

    threads = [threading.Thread(target=send, args=(k, s, body)) for k, (s, body) in enumerate(sends)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    return [answers[k] for k in range(len(sends))]


def racing_nodes_both_write_and_a_type_conflict_refuses_one(n1: WalgateServer, n2: WalgateServer) -> None:
    """The same new measurement, the same new column, different new columns through both nodes at once: every write
    written, no column lost; one new column of two types at once: one write refused with the type conflict. (Whether
    two writes overlap is up to timing: these outcomes hold either way; the refused change caught up with and the
    write planned again are shown step by step in tests/storage/test_schemaless_stream.py.)"""
    (a,), (b,) = sites_of("r", 0, 1), sites_of("r", 1, 1)
    # the same new measurement through both nodes at once: both written
    assert race([(n1, f"r,site={a} v=1i {TS + 1}"), (n2, f"r,site={b} v=2i {TS + 2}")]) == [(204, {}, "1")] * 2
    # the same new column through both nodes at once: both written
    assert race([(n1, f"r,site={a} v=3i,w=1.5 {TS + 3}"), (n2, f"r,site={b} v=4i,w=2.5 {TS + 4}")]) == [
        (204, {}, "1")] * 2
    # different new columns at once: both written, neither column lost
    assert race([(n1, f"r,site={a} x=1i {TS + 5}"), (n2, f"r,site={b} y=true {TS + 6}")]) == [(204, {}, "1")] * 2
    for server in (n1, n2):
        eventually("both see every column", lambda s=server: sorted(c for c, _ in described(s, "r")) == sorted(
            ["_ts", "v", "w", "x", "y", "site"]))
    # one new column, two types at once: one write is refused with the single node's type conflict
    answers = race([(n1, f"r,site={a} z=1i {TS + 7}"), (n2, f"r,site={b} z=\"text\" {TS + 8}")])
    assert sorted(status for status, _, _ in answers) == [204, 400], answers
    refused = next(answer for status, answer, _ in answers if status == 400)
    assert "Measurement r: field z is" in refused["desc"] and "but the column is" in refused["desc"], refused
    status, answer = post(n1, "SELECT v, w FROM f.r")
    assert status == 200 and sorted(answer["data"], key=str) == sorted(
        [[1, None], [2, None], [3, 1.5], [4, 2.5], [None, None], [None, None], [None, None]], key=str), answer


def test_without_an_etcd_majority_a_write_needing_a_change_is_refused_and_others_go_on(
        etcd3: EtcdCluster, tmp_path: Path) -> None:
    (s,) = sites_of("m", 0, 1, db="g", vgroups=1)
    with node(etcd3, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        sql(n1, "CREATE DATABASE g VGROUPS 1")
        assert influx(n1, f"m,site={s} v=1 {TS + 1}", db="g") == (204, {}, "1")
        etcd3.members[0].kill()
        etcd3.members[1].kill()
        answers = race([(n1, f"n,site={s} v=1 {TS + 2}"), (n1, f"m,site={s} v=2,w=3 {TS + 2}")], "g")
        for status, answer, _ in answers:  # a new measurement, a new field
            assert status == 503 and "cluster's catalog" in answer["desc"], answers
        assert influx(n1, f"m,site={s} v=4 {TS + 4}", db="g") == (204, {}, "1"), "no change needed: written"
        assert sql(n1, "SELECT v FROM g.m") == [[1.0], [4.0]], "nothing of the refused writes"
        assert [r[0] for r in sql(n1, "SHOW g.STABLES")] == ["m"]
        no_traceback(n1)
