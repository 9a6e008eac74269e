"""Partitions and vgroups of one copy moved to other nodes, in ``walgate serve`` (issue 26; KIP-455 moves an RF=1
partition as any other): three real ``walgate serve --cluster`` nodes with ``replication.enable=true`` over a real
etcd (stopped by PID), ``__consumer_offsets`` on node 1 alone.

* A Kafka-native topic of one copy on node 2 is moved to node 3 with AlterPartitionReassignments (asked of node 1,
  which holds none of it) while a producer writes: node 3 opens it empty and catches up, the move completes (the
  partition, now with a partition state, is led by node 3 with replication factor 1), node 2's copy is deleted, and
  every acknowledged value, written before and during the move, is read once, in order, through node 3.
* A ``REPLICA 1`` database's vgroup is moved with ``REDISTRIBUTE VGROUP`` to another node: its copy there catches up,
  the old copy is deleted, every row written before and after is counted through every node.
* ``walgate cluster decommission N --wait`` (``DROP DNODE N``) of a node holding vgroups of a ``REPLICA 1`` database
  moves them, and the other one-copy vgroups it holds, off it (on main it was refused: "has one copy ... its data
  cannot move"); every row is still counted through every node.
* The decommissioned node stopped and a node 4 started, ``walgate cluster rebalance --wait`` (``BALANCE VGROUP``)
  moves one-copy vgroups onto node 4; every row is still counted through every node.

No node logged a traceback.

Under kills: with the adding node paused, the move of a partition of one copy is listed in progress; the controller
and the partition's only copy (its leader, node 2) are killed -9 and started again on their data dirs, and node 2,
back under a new broker epoch, is elected again from the ELR (KIP-966) and takes writes; the adding node resumed,
the move completes, node 2's copy is deleted and every acknowledged value is read once, in order, through node 3."""

from __future__ import annotations

import json
import os
import signal
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback, node, sql
from test_serve_cluster_moves import move
from test_serve_cluster_reassignment_kills import controller, killed_and_started_again
from test_serve_cluster_reassignments import states
from test_serve_cluster_rebalance import OFFSETS_ONE_COPY, cluster_command, decommission
from test_serve_cluster_replicated_topics import ARGS, bootstrap, described, three_nodes

from livewalgate import WalgateServer, stop_process
from walgate.wire.errors import ErrorCode

SOLO = "solo"
TS = 1_700_000_000_000


def test_one_copy_partitions_and_vgroups_move(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path, *OFFSETS_ONE_COPY)
        topic_partition_moved(nodes)
        vgroup_redistributed(nodes)
        gone = node_decommissioned(nodes)
        for server in nodes:
            no_traceback(server)
        stop_process(nodes[gone - 1].proc)  # (the operator stops it once it holds nothing)
        nodes[gone - 1] = stack.enter_context(node(etcd1, tmp_path, 4, *ARGS, *OFFSETS_ONE_COPY))
        balanced_onto_a_new_node(nodes)
        for server in nodes:
            no_traceback(server)


def db_dirs(server: WalgateServer) -> set[Path]:
    return set((server.data_dir / "db").iterdir()) if (server.data_dir / "db").exists() else set()


def read_all(server: WalgateServer, topic: str) -> list[bytes]:
    """Every value of ``topic``'s partition 0 from offset 0 to its end, through ``server`` alone."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "solo-read",
                         "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        for _ in range(200):
            if len(values) >= end:
                break
            for message in consumer.consume(100, timeout=1):
                assert message.error() is None, message.error()
                assert message.offset() == len(values)
                values.append(message.value())
        return values
    finally:
        consumer.close()


def produce(producer: Producer, values: range) -> None:
    """``values`` written to :data:`SOLO`'s partition 0, each acknowledged (acks=all) before this returns."""
    failed: list[object] = []
    for i in values:
        producer.produce(SOLO, str(i).encode(), partition=0,
                         on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
    assert producer.flush(90) == 0 and failed == [], failed


def test_a_one_copy_move_survives_the_kill_9_of_the_controller_and_of_its_only_copy(etcd1: EtcdCluster,
                                                                                   tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path, *OFFSETS_ONE_COPY)
        n1, n2, n3 = nodes
        before = db_dirs(n2)
        create_topics(bootstrap(nodes), NewTopic(SOLO, 1, replica_assignment=[[2]]))
        eventually("the partition on node 2", lambda: described(n1, SOLO) == {0: (2, [2], [2])})
        [copy] = db_dirs(n2) - before
        producer = Producer({"bootstrap.servers": bootstrap(nodes), "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 90_000})
        produce(producer, range(100))
        os.kill(n3.proc.pid, signal.SIGSTOP)  # (registered for its session: the target is valid)
        stack.callback(lambda: n3.proc.poll() is None and os.kill(n3.proc.pid, signal.SIGCONT))
        assert move(n1.kafka_port, [3], SOLO) == (ErrorCode.none, ErrorCode.none)
        eventually("the move listed", lambda: states(n1.kafka_port) == {0: ([3, 2], [3], [2])})
        produce(producer, range(100, 200))
        killed_and_started_again(stack, etcd1, tmp_path, nodes, {2, controller(nodes)}, *OFFSETS_ONE_COPY)
        produce(producer, range(200, 300))  # (node 2 elected again from the ELR)
        os.kill(n3.proc.pid, signal.SIGCONT)
        eventually("the move completed", lambda: described(nodes[0], SOLO) == {0: (3, [3], [3])}
                   and states(nodes[0].kafka_port) == {})
        eventually("node 2's copy deleted", lambda: not (copy / "vnode0").exists())
        produce(producer, range(300, 400))
        for server in (n3, nodes[0]):
            assert read_all(server, SOLO) == [str(i).encode() for i in range(400)]
        for server in nodes:
            no_traceback(server)


def topic_partition_moved(nodes: list[WalgateServer]) -> None:
    n1, n2, n3 = nodes
    before = {n: db_dirs(n) for n in nodes}
    create_topics(bootstrap(nodes), NewTopic(SOLO, 1, replica_assignment=[[2]]))
    eventually("the partition on node 2", lambda: described(n1, SOLO) == {0: (2, [2], [2])})
    [copy] = db_dirs(n2) - before[n2]
    producer = Producer({"bootstrap.servers": bootstrap(nodes), "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60_000})
    produce(producer, range(100))

    assert move(n1.kafka_port, [3], SOLO) == (ErrorCode.none, ErrorCode.none)
    produce(producer, range(100, 200))  # (during the move: led by node 2, followed by node 3)
    eventually("moved to node 3, which leads it", lambda: described(n2, SOLO) == {0: (3, [3], [3])})
    eventually("node 2's copy deleted", lambda: not (copy / "vnode0").exists())
    assert (n3.data_dir / "db" / copy.name / "vnode0").is_dir()
    produce(producer, range(200, 300))
    for server in (n3, n1):
        assert read_all(server, SOLO) == [str(i).encode() for i in range(300)]
    # a second move, back to node 2 (where it was made): its state lived on
    assert move(n3.kafka_port, [2], SOLO) == (ErrorCode.none, ErrorCode.none)
    eventually("moved back to node 2", lambda: described(n1, SOLO) == {0: (2, [2], [2])})
    eventually("node 3's copy deleted", lambda: not (n3.data_dir / "db" / copy.name / "vnode0").exists())
    assert read_all(n2, SOLO) == [str(i).encode() for i in range(300)]


def vgroup_redistributed(nodes: list[WalgateServer]) -> None:
    n1 = nodes[0]
    before = {i: db_dirs(s) for i, s in enumerate(nodes, 1)}
    sql(n1, "CREATE DATABASE s VGROUPS 1 REPLICA 1")
    sql(n1, "CREATE STABLE s.st (ts TIMESTAMP, v BIGINT) TAGS (k INT)")
    sql(n1, "CREATE TOPIC sti AS DATABASE s")
    [(_, [holder], _)] = described(n1, "sti").values()
    other = 3 if holder != 3 else 2
    [copy] = [d for d in db_dirs(nodes[holder - 1]) - before[holder] if (d / "vnode0").exists()]
    sql(n1, "INSERT INTO s.t1 USING s.st TAGS (1) VALUES " + " ".join(f"({TS + i}, {i})" for i in range(100)))
    assert sql(nodes[other - 1], f"REDISTRIBUTE VGROUP s.0 DNODE {other}") == [[1]]
    sql(n1, "INSERT INTO s.t2 USING s.st TAGS (2) VALUES " + " ".join(f"({TS + i}, {i})" for i in range(30)))
    eventually(f"moved to node {other}", lambda: described(n1, "sti") == {0: (other, [other], [other])})
    eventually(f"node {holder}'s copy deleted", lambda: not (copy / "vnode0").exists())
    assert (nodes[other - 1].data_dir / "db" / copy.name / "vnode0").is_dir()
    sql(n1, "INSERT INTO s.t3 USING s.st TAGS (3) VALUES " + " ".join(f"({TS + i}, {i})" for i in range(20)))
    for server in nodes:
        assert sql(server, "SELECT COUNT(*), SUM(v) FROM s.st") == [[150, 4950 + 435 + 190]]


def node_decommissioned(nodes: list[WalgateServer]) -> int:
    n1 = nodes[0]
    sql(n1, "CREATE DATABASE d VGROUPS 4 REPLICA 1")
    sql(n1, "CREATE STABLE d.st (ts TIMESTAMP, v BIGINT) TAGS (k INT)")
    sql(n1, "CREATE TOPIC dti AS DATABASE d")
    for k in range(8):
        sql(n1, f"INSERT INTO d.t{k} USING d.st TAGS ({k}) VALUES " + " ".join(f"({TS + i}, {i})" for i in range(10)))
    placed = described(n1, "dti")
    gone = next(i for i in (3, 2) if any(p[1] == [i] for p in placed.values()))
    moved = sum(p[1] == [gone] for p in placed.values()) + _others(nodes, gone)
    done = decommission(n1, str(gone), "--wait", "--wait-timeout", "90", "--json")  # (DROP DNODE, then waits)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["statement"], report["vgroups_moving"], report["done"]) == (f"DROP DNODE {gone}", moved, True)
    for topic in ("dti", "sti", SOLO):
        assert all(gone not in p[1] and len(p[1]) == 1 and p[2] == p[1] for p in described(n1, topic).values())
    for server in nodes:
        assert sql(server, "SELECT COUNT(*), SUM(v) FROM d.st") == [[80, 8 * 45]]
    return gone


def balanced_onto_a_new_node(nodes: list[WalgateServer]) -> None:
    """Node 4 joins (in place of the decommissioned node): ``walgate cluster rebalance --wait`` (TDengine's BALANCE
    VGROUP) moves one-copy vgroups onto it until no two nodes' counts differ by more than one; every row is still
    counted through every node, node 4's included."""
    n1 = nodes[0]
    eventually("node 4 ready", lambda: [4, "ready"] in [[r[0], r[2]] for r in sql(n1, "SHOW DNODES")])
    balanced = cluster_command("rebalance", n1, "--wait", "--wait-timeout", "90", "--json")
    assert balanced.returncode == 0, balanced.stderr
    assert json.loads(balanced.stdout)["vgroups_moving"] >= 1
    placed = described(n1, "dti")
    assert any(p[1] == [4] and p[2] == [4] for p in placed.values()), placed
    assert all(len(p[1]) == 1 for p in placed.values()), "each vgroup still one copy"
    for server in nodes:
        assert sql(server, "SELECT COUNT(*), SUM(v) FROM d.st") == [[80, 8 * 45]]


def _others(nodes: list[WalgateServer], gone: int) -> int:
    """The vgroups of the other databases and topics on node ``gone`` that DROP DNODE moves too."""
    count = 0
    for topic in (SOLO, "sti"):
        count += sum(p[1] == [gone] for p in described(nodes[0], topic).values())
    return count
