"""TDengine's REDISTRIBUTE VGROUP / BALANCE VGROUP [LEADER] / DROP DNODE and ``walgate cluster decommission`` in
``walgate serve`` (issue 26): three real ``walgate serve --cluster`` nodes with ``replication.enable=true`` over a
real etcd (stopped by PID), the statements sent to nodes that are not the controller.

A ``REPLICA 3`` database's vgroup is redistributed over its three nodes with node 2 first (no data moves: the move completes at once), then ``BALANCE VGROUP LEADER`` elects
node 2, its preferred replica, and ``BALANCE VGROUP`` (and ``walgate cluster rebalance --wait``) finds nothing to move; a node count other than the replicas, a vgroup or node that does not exist and a
``DROP DNODE`` with no other node to take the replicas are refused with TDengine's codes. No node logged a traceback.

The decommission itself, issue 26's "decommission of a node of a 4-node RF=3 cluster under load", moves replicas to
a node that held none of them (:func:`test_decommission_moves_every_replica_off_the_node`)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback, node, sql
from test_serve_cluster_reassignments import read_all
from test_serve_cluster_replicated_topics import ARGS, described, identical_replicas, three_nodes

from livewalgate import WALGATE, WalgateServer, stop_process, walgate_env

OFFSETS_ONE_COPY = ("--override", "offsets.topic.replication.factor=1")
"""__consumer_offsets on one node (the first): it does not fill every node, so one can be decommissioned."""


def refused(server: WalgateServer, statement: str) -> tuple[int, int, str]:
    """(HTTP status, TDengine code, message) of ``statement`` refused by ``server``."""
    request = urllib.request.Request(server.http_url + "/rest/sql", data=statement.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            raise AssertionError(f"{statement} answered {r.read()!r}")
    except urllib.error.HTTPError as e:
        body = json.load(e)
        return e.code, body["code"], body["desc"]


def vgroup(server: WalgateServer, name: str) -> dict[str, Any]:
    """Vgroup ``name`` (``db/N``, ``topic/N``) as ``server``'s console shows it (``/ui/api/cluster``)."""
    with urllib.request.urlopen(server.http_url + "/ui/api/cluster", timeout=30) as r:
        page = json.load(r)
    [found] = [p for p in page["partitions"] if f"{p['topic'] or p['database']}/{p['vgroup']}" == name]
    return dict(found)


def cluster_command(command: str, server: WalgateServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``walgate cluster <command> args`` through ``server``'s HTTP API."""
    return subprocess.run([*WALGATE, "cluster", command, *args, "--url", server.http_url], check=False,
                          capture_output=True, text=True, timeout=120, env=walgate_env())


def decommission(server: WalgateServer, *args: str) -> subprocess.CompletedProcess[str]:
    return cluster_command("decommission", server, *args)


def test_statements_within_the_placed_nodes_and_their_refusals(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        n1, n2, n3 = three_nodes(stack, etcd1, tmp_path, *OFFSETS_ONE_COPY)
        sql(n1, "CREATE DATABASE r REPLICA 3 VGROUPS 1")
        eventually("r/0 in sync", lambda: vgroup(n2, "r/0")["isr"] == [1, 2, 3])
        assert vgroup(n2, "r/0")["replicas"] == [1, 2, 3]

        assert sql(n2, "REDISTRIBUTE VGROUP r.0 DNODE 2 DNODE 3 DNODE 1") == [[1]]
        eventually("node 2 preferred", lambda: vgroup(n3, "r/0")["replicas"] == [2, 3, 1])
        assert sql(n3, "BALANCE VGROUP LEADER") == [[1]]
        eventually("node 2 leads", lambda: vgroup(n1, "r/0")["leader"] == 2)
        assert sql(n3, "BALANCE VGROUP LEADER") == [[0]]
        assert sql(n1, "BALANCE VGROUP") == [[0]]  # (one replica and one preferred leadership per node)
        balanced = subprocess.run([*WALGATE, "cluster", "rebalance", "--wait", "--json", "--url", n3.http_url],
                                  check=False, capture_output=True, text=True, timeout=120, env=walgate_env())
        assert json.loads(balanced.stdout) == {"statement": "BALANCE VGROUP", "vgroups_moving": 0, "done": True}, \
            balanced.stderr

        assert refused(n2, "REDISTRIBUTE VGROUP r.0 DNODE 1 DNODE 2") == (
            400, 0x03B7, "Invalid vgroup replica: vgroup r/0 has 3 replica(s): name as many distinct dnodes (given "
                         "[1, 2])")
        assert refused(n2, "REDISTRIBUTE VGROUP r.1 DNODE 1 DNODE 2 DNODE 3")[:2] == (400, 0x0332)
        assert refused(n2, "REDISTRIBUTE VGROUP r.0 DNODE 1 DNODE 2 DNODE 9") == (
            400, 0x0331, "Dnode does not exist: node 9 is not registered now")
        status, code, message = refused(n2, "DROP DNODE 3")
        assert (status, code) == (400, 0x0334) and message.startswith(
            "Out of dnodes: DROP DNODE 3: no live node can take vgroup r/0's replica from node 3"), message
        sql(n1, "DROP DATABASE r")

        for server in (n1, n2, n3):
            no_traceback(server)


def test_decommission_moves_every_replica_off_the_node(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """Issue 26's decommission of a node of a 4-node RF=3 cluster under load: an idempotent acks=all producer
    (bootstrapped on the nodes staying) writes to partition 0 throughout ``walgate cluster decommission N --wait``,
    and a consumer reads it from its beginning throughout; the node's replicas move to the node that held none of
    them, which catches up; the consumer read every acknowledged value once, in order, at offsets 0, 1, 2, ... and
    nothing else, and a read through a staying node afterwards gives the same. Then the node is stopped, a fifth node
    joins and ``walgate cluster rebalance --wait`` moves a replica onto it (issue 26's "adding a node and
    rebalancing vgroups onto it"), which serves every value too; at the end every replica of partition 0 holds the
    others' WAL entries and offset index records (tests/cluster/replica_copies.py)."""
    with ExitStack() as stack:
        n1, n2, n3 = three_nodes(stack, etcd1, tmp_path, *OFFSETS_ONE_COPY)
        n4 = stack.enter_context(node(etcd1, tmp_path, 4, *ARGS, *OFFSETS_ONE_COPY))
        nodes = [n1, n2, n3, n4]
        eventually("four ready nodes", lambda: [r[2] for r in sql(n1, "SHOW DNODES")] == ["ready"] * 4)
        create_topics(f"127.0.0.1:{n1.kafka_port}", NewTopic("three", 2, 3, config={"min.insync.replicas": "2"}))
        eventually("three in sync", lambda: all(len(p[2]) == 3 for p in described(n2, "three").values()))
        replicas = described(n2, "three")[0][1]
        gone = max(replicas)  # (not node 1, which holds __consumer_offsets' one copy)
        staying = [s for i, s in enumerate(nodes, 1) if i != gone]
        acked: list[bytes] = []
        errors: list[Any] = []
        stop = threading.Event()

        def load() -> None:
            producer = Producer({"bootstrap.servers": ",".join(f"127.0.0.1:{s.kafka_port}" for s in staying),
                                 "enable.idempotence": True, "acks": "all", "message.timeout.ms": 60000})

            def report(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    acked.append(msg.value())

            i = 0
            while not stop.is_set():
                producer.produce("three", f"v{i}".encode(), partition=0, on_delivery=report)
                producer.poll(0.01)
                i += 1
            producer.flush(60)

        read: list[tuple[int, bytes]] = []
        read_enough = threading.Event()

        def consume() -> None:
            consumer = Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{s.kafka_port}" for s in staying),
                                 "group.id": "decommission-reader", "enable.auto.commit": False})
            try:
                consumer.assign([TopicPartition("three", 0, 0)])
                deadline = time.monotonic() + 300
                while not read_enough.is_set() and time.monotonic() < deadline:
                    read.extend((m.offset(), m.value()) for m in consumer.consume(500, 0.5) if m.error() is None)
            finally:
                consumer.close()

        writer, reader = threading.Thread(target=load, name="load"), threading.Thread(target=consume, name="read")
        writer.start()
        reader.start()
        try:
            eventually("some writes", lambda: len(acked) > 50)
            done = decommission(staying[0], str(gone), "--wait", "--wait-timeout", "90", "--json")
        finally:
            stop.set()
            writer.join(90)
            try:
                eventually("every acknowledged value read", lambda: len(read) >= len(acked))
            finally:
                read_enough.set()
                reader.join(90)
        assert [v for _, v in read] == acked and [o for o, _ in read] == list(range(len(acked)))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["statement"] == f"DROP DNODE {gone}" and report["vgroups_moving"] >= 1 and report["done"]
        for _, now, isr in described(n1, "three").values():
            assert gone not in now and len(now) == 3 and sorted(isr) == sorted(now)
        assert errors == []
        assert read_all(staying[0].kafka_port, len(acked), "three") == acked

        stop_process(nodes[gone - 1].proc)  # (the operator stops it once it holds nothing)
        n5 = stack.enter_context(node(etcd1, tmp_path, 5, *ARGS, *OFFSETS_ONE_COPY))
        eventually("node 5 ready", lambda: [5, "ready"] in [[r[0], r[2]] for r in sql(n1, "SHOW DNODES")])
        balanced = cluster_command("rebalance", n1, "--wait", "--wait-timeout", "90", "--json")
        assert balanced.returncode == 0, balanced.stderr
        assert json.loads(balanced.stdout)["vgroups_moving"] >= 1
        eventually("node 5 in sync", lambda: any(5 in p[2] for p in described(n1, "three").values()))
        assert read_all(n5.kafka_port, len(acked), "three") == acked
        for server in [*staying, n5]:
            no_traceback(server)
        identical_replicas(stack, {i: s for i, s in enumerate([*nodes, n5], 1) if i != gone}, tmp_path / "replicas",
                           "three", 1)  # (partition 1 holds nothing to compare)
