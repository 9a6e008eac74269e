"""SQL databases, supertables and TDengine topics are the cluster's: real ``walgate serve --cluster`` nodes over a
real etcd (stopped by PID), SQL through their HTTP APIs, a real Kafka client (confluent-kafka).

A database, supertable and TDengine topic created through node 2 are listed by node 1; the database placed with
``VGROUPS 1`` on node 2 takes INSERTs through node 2, and a consumer bootstrapped on node 1 reads its topic (Metadata
names node 2, and lists every live node even with no topic at all). ALTER STABLE through node 1 is seen on both;
DROP DATABASE removes its vnodes from both. A node stopped during DDL catches up when it starts again (its vnode
gets the ALTER's meta entry, a database dropped meanwhile leaves its data dir). Without an etcd majority DDL is
refused with a clear error while INSERT and SELECT go on.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from etcd_cluster import EtcdCluster
from serve_support import eventually, no_traceback, node, sql, two_nodes, wait_log

from livewalgate import WalgateServer
from walgate.storage import lines

STABLE = "CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (site INT)"


def brokers(server: WalgateServer) -> set[int]:
    """The brokers of the Metadata a client bootstrapped on ``server`` reads."""
    return set(AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"}).list_topics(timeout=30).brokers)


def names(server: WalgateServer, statement: str) -> list[str]:
    return sorted(str(row[0]) for row in sql(server, statement))


def vgroup_nodes(server: WalgateServer, db: str) -> list[int]:
    return [row[3] for row in sql(server, f"SHOW {db}.VGROUPS")]


def db_dirs(server: WalgateServer, db_id: str) -> list[str]:
    return sorted(p.name for p in (server.data_dir / "db" / db_id).glob("vnode*"))


def db_id(server: WalgateServer, db: str) -> str:
    return str(next(r["id"] for r in catalog_records(server) if r.get("op") == "create_db" and r["name"] == db))


def catalog_records(server: WalgateServer) -> list[dict[str, Any]]:
    """The records of ``server``'s catalog.log."""
    return [record for _, _, record in lines.scan((server.data_dir / "catalog.log").read_bytes()).records]


def columns(server: WalgateServer) -> list[str]:
    return [str(row[0]) for row in sql(server, "DESCRIBE d.st")]


def read(server: WalgateServer, topic: str, partition: int, count: int) -> list[Any]:
    """``count`` records of ``topic``'s ``partition`` from offset 0, by a consumer bootstrapped on ``server``: (key,
    value, headers)."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "reader",
                         "enable.auto.commit": False})
    seen: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        for _ in range(120):  # bounded: 120 polls of at most 1 s
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen.append((msg.key(), msg.value(), dict(msg.headers() or [])))
            if len(seen) >= count:
                break
    finally:
        consumer.close()
    return seen


def test_sql_ddl_through_one_node_is_the_clusters_and_its_topic_is_read_through_the_other(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path) as (n1, n2, _, _):
        eventually("node 2 sees both", lambda: [r[2] for r in sql(n2, "SHOW DNODES")] == ["ready"] * 2)
        eventually("Metadata lists every live node, with no topic at all", lambda: brokers(n1) == {1, 2})
        sql(n2, "CREATE DATABASE a VGROUPS 1")  # the first goes to node 1 (equal counts: the smaller id)...
        sql(n2, "CREATE DATABASE d VGROUPS 1")  # ...so this one to node 2
        assert vgroup_nodes(n2, "a") == [1] and vgroup_nodes(n2, "d") == [2]
        sql(n2, STABLE)
        sql(n2, "CREATE TOPIC tq AS STABLE d.st")
        eventually("node 1 lists them", lambda: {"a", "d"} <= set(names(n1, "SHOW DATABASES"))
                   and names(n1, "SHOW d.STABLES") == ["st"] and names(n1, "SHOW TOPICS") == ["tq"])
        assert vgroup_nodes(n1, "d") == [2] and db_dirs(n1, db_id(n1, "d")) == [], "node 1 holds none of d"
        sql(n2, "INSERT INTO d.s1 USING d.st TAGS (1) VALUES (1700000000000, 1) (1700000000001, 2) (1700000000002, 3)")
        got = read(n1, "tq", 0, 3)  # bootstrapped on node 1: Metadata names node 2, which serves it
        assert [(k, json.loads(v)["v"]) for k, v, _ in got] == [(b"s1", 1), (b"s1", 2), (b"s1", 3)], got

        sql(n1, "ALTER STABLE d.st ADD COLUMN w INT")  # through node 1, which holds no vnode of d
        assert columns(n1)[-2:] == ["w", "site"]
        eventually("node 2 has the column", lambda: columns(n2)[-2:] == ["w", "site"])
        sql(n2, "INSERT INTO d.s1 (ts, v, w) VALUES (1700000000003, 4, 40)")
        assert sql(n2, "SELECT v, w FROM d.st WHERE w IS NOT NULL") == [[4, 40]]

        d = db_id(n2, "d")
        assert db_dirs(n2, d) == ["vnode0"]
        sql(n1, "DROP TOPIC tq")
        sql(n1, "DROP DATABASE d")
        eventually("node 2 dropped d and deleted its vnode", lambda: "d" not in names(n2, "SHOW DATABASES")
                   and not (n2.data_dir / "db" / d).exists())
        assert "d" not in names(n1, "SHOW DATABASES")
        for server in (n1, n2):
            no_traceback(server)


def test_a_node_stopped_during_ddl_catches_up_when_it_starts_again(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2) as n2:
            eventually("node 1 sees node 2", lambda: len(sql(n1, "SHOW DNODES")) == 2)
            sql(n1, "CREATE DATABASE d VGROUPS 2")
            sql(n1, "CREATE DATABASE old VGROUPS 2")
            assert vgroup_nodes(n1, "d") == [1, 2] and vgroup_nodes(n1, "old") == [1, 2]
            sql(n1, STABLE)
            sql(n1, "CREATE TOPIC tm WITH META AS DATABASE d")
            eventually("node 2 applied them", lambda: names(n2, "SHOW TOPICS") == ["tm"])
            old = db_id(n2, "old")
            assert db_dirs(n2, old) == ["vnode1"]
            data_dir, port = n2.data_dir, n2.kafka_port
        sql(n1, "ALTER STABLE d.st ADD COLUMN w INT")  # while node 2 is down
        sql(n1, "DROP DATABASE old")
        with node(etcd1, tmp_path, 2, data_dir=data_dir, kafka_port=port) as n2:
            assert columns(n2)[-2:] == ["w", "site"], "caught up before it was ready"
            assert "old" not in names(n2, "SHOW DATABASES") and not (data_dir / "db" / old).exists()
            assert not (n1.data_dir / "db" / old).exists(), "nor in node 1's"
            got = read(n2, "tm", 1, 1)  # node 2's partition of d: the ALTER's meta entry, written at its apply
            assert [(h.get("meta"), json.loads(v)["stable"]) for _, v, h in got] == [(b"alter_stable", "st")], got
            no_traceback(n2)
        no_traceback(n1)


def test_without_an_etcd_majority_ddl_is_refused_and_inserts_and_selects_go_on(etcd3: EtcdCluster,
                                                                              tmp_path: Path) -> None:
    with node(etcd3, tmp_path, 1) as n1:
        wait_log(n1, "node 1: controller")
        sql(n1, "CREATE DATABASE d VGROUPS 1")
        sql(n1, STABLE)
        sql(n1, "INSERT INTO d.s1 USING d.st TAGS (1) VALUES (1700000000000, 1)")
        etcd3.members[0].kill()
        etcd3.members[1].kill()
        refused: dict[str, tuple[int, str]] = {}

        def ddl(statement: str) -> None:
            request = urllib.request.Request(n1.http_url + "/rest/sql", data=statement.encode(), method="POST")
            try:
                urllib.request.urlopen(request, timeout=120)
            except urllib.error.HTTPError as e:
                refused[statement] = (e.code, json.load(e)["desc"])

        statements = ["CREATE DATABASE x VGROUPS 1", "CREATE STABLE d.s2 (ts TIMESTAMP, v INT) TAGS (k INT)",
                      "ALTER STABLE d.st ADD COLUMN w INT", "CREATE TOPIC tq AS STABLE d.st", "DROP DATABASE d"]
        threads = [threading.Thread(target=ddl, args=(s,)) for s in statements]  # waited for together
        for t in threads:
            t.start()
        sql(n1, "INSERT INTO d.s1 VALUES (1700000000001, 2)")  # meanwhile: data goes on
        assert sql(n1, "SELECT v FROM d.st") == [[1], [2]]
        for t in threads:
            t.join(timeout=150)
        assert sorted(refused) == sorted(statements), refused
        for statement, (code, desc) in refused.items():
            assert code == 503 and "The cluster's catalog did not take the change" in desc, (statement, desc)
        databases = names(n1, "SHOW DATABASES")
        assert "d" in databases and "x" not in databases and names(n1, "SHOW d.STABLES") == ["st"]
        assert columns(n1) == ["ts", "v", "site"] and names(n1, "SHOW TOPICS") == []
        sql(n1, "INSERT INTO d.s1 VALUES (1700000000002, 3)")
        assert sql(n1, "SELECT count(*) FROM d.st") == [[3]]
        no_traceback(n1)
