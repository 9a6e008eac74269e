"""Replicated partitions moved to nodes that did not hold them, in ``walgate serve`` (KIP-455, issue 26): four real
``walgate serve --cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID), started once for
both scenarios.

A topic of two partitions on nodes 1, 2 and 2, 1 (``min.insync.replicas=2``) takes an idempotent acks=all producer's
writes throughout. Partition 0 is moved to 2, 3 (through node 3, which holds no replica of it): node 3 opens it
empty and catches up from the leader, the move completes, node 1's copy of it is deleted (its other partition's
kept); then to 3, 1: node 1 opens it empty again and catches up, node 3 leads, node 2's copy is deleted. Every
acknowledged value is then read once, in order, from each new replica (the history checker, history.py), and no node
logged a traceback.

A ``REPLICA 3`` SQL database's vgroup on three of the four nodes is then moved (through its TDengine topic's
partition) to a set with the fourth: the fourth opens it empty and catches up, the node left out deletes its copy,
and every row written before and after is counted through every node.

A topic partition whose leader's retention deleted its first segments is then moved to the fourth node, which held
none of it and is made its leader: its copy starts at the leader's log start (Kafka's ``truncateFullyAndStartAt``),
catches up, and serves every value from the log start on.

A ``REPLICA 3`` SQL database's vgroup whose WAL retention deleted the segments creating its first subtables is then
moved to the node that did not hold it and the two followers (the leader left out), while rows go on being written into
a subtable made below the log start and into new ones: that node restores its copy from the leader's vnode snapshot
(docs/plans/vnode-snapshot.md), catches up, joins the ISR and leads; it then lists every subtable, those made below
the log start too, and holds every row acknowledged during the move."""

from __future__ import annotations

import threading
import time
import urllib.error
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from history import FinalRead, Send, check
from serve_support import create_topics, eventually, no_traceback, node, sql
from test_serve_cluster_reassignments import call
from test_serve_cluster_replicated_topics import (
    ARGS,
    FINAL,
    KT_CONFIGS,
    TOPIC,
    Writer,
    bootstrap,
    described,
    full_read,
    partition_states,
    three_nodes,
)

from livewalgate import WalgateServer
from walgate.wire.errors import ErrorCode


def move(port: int, replicas: list[int], topic: str = TOPIC) -> tuple[int, int]:
    """(the request's, partition 0's) error code of a move of ``topic``'s partition 0 to ``replicas``."""
    answer = call(port, 45, 1, {"timeout": 30_000, "allow_replication_factor_change": True, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
    return answer.error_code, answer.responses[0].partitions[0].error_code


def new_db_id(etcd: EtcdCluster, before: set[str]) -> str:
    """The database id of the partition states made since ``before`` (one database's)."""
    [db_id] = {key.split(b"/")[-2].decode() for key in partition_states(etcd)} - before
    return db_id


def test_replicas_moved_to_nodes_not_holding_them_keep_every_write(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = [*three_nodes(stack, etcd1, tmp_path), stack.enter_context(node(etcd1, tmp_path, 4, *ARGS))]
        moves_of_a_topic(etcd1, nodes)
        move_of_a_databases_vgroup(etcd1, nodes)
        move_below_the_log_start(nodes)
        move_of_a_trimmed_vgroup(etcd1, nodes)
        for server in nodes:
            no_traceback(server)


def moves_of_a_topic(etcd: EtcdCluster, nodes: list[WalgateServer]) -> None:
    """The topic's partition 0 moved from 1, 2 to 2, 3, then to 3, 1, under an idempotent producer (the module
    docstring)."""
    n1, n2, n3, _ = nodes
    create_topics(bootstrap(nodes), NewTopic(TOPIC, 2, replica_assignment=[[1, 2], [2, 1]], config=KT_CONFIGS))
    eventually("both partitions led, both replicas in sync", lambda: described(n1, TOPIC) == {
        0: (1, [1, 2], [1, 2]), 1: (2, [2, 1], [1, 2])})
    db_id = new_db_id(etcd, set())
    copy = {n: n.data_dir / "db" / db_id for n in nodes}
    assert not copy[n3].exists()

    history: list[Send | FinalRead] = []
    writer = Writer(bootstrap(nodes), history)  # type: ignore[arg-type]
    writer.start()
    try:
        eventually("values acknowledged", lambda: writer.acked() > 20)
        assert move(n3.kafka_port, [2, 3]) == (ErrorCode.none, ErrorCode.none)
        eventually("moved to 2, 3: node 3 caught up from empty, node 2 leads",
                   lambda: described(n1, TOPIC)[0] == (2, [2, 3], [2, 3]))
        eventually("node 1's copy of partition 0 deleted", lambda: not (copy[n1] / "vnode0").exists())
        assert (copy[n1] / "vnode1").is_dir() and (copy[n3] / "vnode0").is_dir()
        acked = writer.acked()
        eventually("values acknowledged by the new replicas", lambda: writer.acked() > acked + 20)

        assert move(n2.kafka_port, [3, 1]) == (ErrorCode.none, ErrorCode.none)
        eventually("moved to 3, 1: node 1 caught up from empty again, node 3 leads",
                   lambda: described(n2, TOPIC)[0] == (3, [3, 1], [1, 3]))
        eventually("node 2's copy of partition 0 deleted", lambda: not (copy[n2] / "vnode0").exists())
        acked = writer.acked()
        eventually("values acknowledged after the second move", lambda: writer.acked() > acked + 20)
    finally:
        writer.stop()
    assert [e for e in writer.errors if e.fatal()] == [] and writer.failed == [], (writer.errors, writer.failed)
    finals = [FinalRead(FINAL + 3, "0", full_read(n3, 0)), FinalRead(FINAL + 1, "0", full_read(n1, 0))]
    history += finals
    assert check(history) == []  # type: ignore[arg-type]
    acknowledged = sorted((w.offset or 0, w.value) for op in history if isinstance(op, Send) and op.outcome == "ok"
                          for w in op.writes if w.key == "0")
    for final in finals:  # every acknowledged value once, in order, from each new replica
        assert [v for _, v in final.reads] == [v for _, v in acknowledged]


def replica3_vgroup(etcd: EtcdCluster, n1: WalgateServer, database: str, stable: str,
                    topic: str) -> tuple[set[str], list[int], int]:
    """A ``REPLICA 3`` database of one vgroup, its supertable and a topic over it made through ``n1`` by the three
    statements, once led with three replicas in sync: (the database ids of the partition states before it, its
    replicas, the node of the four holding none)."""
    before = {key.split(b"/")[-2].decode() for key in partition_states(etcd)}
    for statement in (database, stable, topic):
        sql(n1, statement)
    name = topic.split()[2]
    eventually(f"{name}'s vgroup led, three replicas in sync", lambda: len(described(n1, name)[0][2]) == 3)
    placed = list(described(n1, name)[0][1])
    [outsider] = {1, 2, 3, 4} - set(placed)
    return before, placed, outsider


def move_of_a_databases_vgroup(etcd: EtcdCluster, nodes: list[WalgateServer]) -> None:
    """A ``REPLICA 3`` database's vgroup moved to a set with the node that did not hold it (the module docstring)."""
    n1 = nodes[0]
    eventually("four ready nodes", lambda: [r[2] for r in sql(n1, "SHOW DNODES")] == ["ready"] * 4)
    before, placed, outsider = replica3_vgroup(etcd, n1, "CREATE DATABASE r VGROUPS 1 REPLICA 3",
                                               "CREATE STABLE r.st (ts TIMESTAMP, v BIGINT) TAGS (k INT)",
                                               "CREATE TOPIC rt AS DATABASE r")
    target, left_out = [outsider, *placed[:2]], placed[2]
    copy = {i: s.data_dir / "db" / new_db_id(etcd, before) / "vnode0" for i, s in enumerate(nodes, 1)}
    assert not copy[outsider].exists()
    sql(nodes[outsider - 1], "INSERT INTO r.t1 USING r.st TAGS (1) VALUES " + " ".join(
        f"({1_700_000_000_000 + i}, {i})" for i in range(100)))

    assert move(nodes[left_out - 1].kafka_port, target, "rt") == (ErrorCode.none, ErrorCode.none)
    eventually(f"moved to {target}", lambda: described(n1, "rt")[0][1:] == (target, sorted(target)))
    eventually(f"node {left_out}'s copy deleted", lambda: not copy[left_out].exists())
    assert copy[outsider].is_dir()
    sql(nodes[left_out - 1], "INSERT INTO r.t2 USING r.st TAGS (2) VALUES " + " ".join(
        f"({1_700_000_000_000 + i}, {i})" for i in range(50)))
    for server in nodes:
        assert sql(server, "SELECT COUNT(*), SUM(v) FROM r.st") == [[150, 4950 + 1225]]


def move_below_the_log_start(nodes: list[WalgateServer]) -> None:
    """A partition on nodes 1, 2 whose first segments retention deleted, moved to 4, 2 (the module docstring)."""
    n1, _, _, n4 = nodes
    configs = {**KT_CONFIGS, "segment.bytes": str(1 << 20), "retention.bytes": str(1 << 20)}
    create_topics(bootstrap(nodes), NewTopic("kr", 1, replica_assignment=[[1, 2]], config=configs))
    eventually("kr led, both replicas in sync", lambda: described(n1, "kr") == {0: (1, [1, 2], [1, 2])})
    producer = Producer({"bootstrap.servers": bootstrap(nodes), "acks": "all", "enable.idempotence": True})
    for i in range(400):  # 4 MB: 1 MiB segments, retention keeping about one
        producer.produce("kr", value=b"%d:" % i + b"x" * 10_000)
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{n4.kafka_port}", "group.id": "kr",
                         "enable.auto.commit": False})

    def watermarks() -> tuple[int, int]:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition("kr", 0), timeout=30)
            return low, high
        except KafkaException:  # (NOT_LEADER_OR_FOLLOWER while its leadership moves: asked again)
            return -1, -1
    try:
        eventually("retention deleted the first segments", lambda: watermarks()[0] > 0)
        assert move(n4.kafka_port, [4, 2], "kr") == (ErrorCode.none, ErrorCode.none)
        eventually("moved to 4, 2: node 4 started at the log start, caught up and leads",
                   lambda: described(n1, "kr")[0] == (4, [4, 2], [2, 4]))
        eventually("the watermarks from node 4", lambda: watermarks()[0] > 0)
        low, high = watermarks()
        assert 0 < low < high == 400
        consumer.assign([TopicPartition("kr", 0, low)])
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < high - low and time.monotonic() < deadline:
            values += [int(m.value().split(b":")[0]) for m in consumer.consume(500, 1.0) if m.error() is None]
    finally:
        consumer.close()
    assert values == list(range(low, high))
    assert "it starts at version" in n4.log()


def move_of_a_trimmed_vgroup(etcd: EtcdCluster, nodes: list[WalgateServer]) -> None:
    """A ``REPLICA 3`` vgroup whose first segments WAL retention deleted, moved under writes (the module docstring)."""
    before, placed, outsider = replica3_vgroup(
        etcd, nodes[0], "CREATE DATABASE rk VGROUPS 1 REPLICA 3 WAL_SEGMENT_SIZE 1 WAL_RETENTION_PERIOD 0",
        "CREATE STABLE rk.st (ts TIMESTAMP, v BIGINT, pad VARCHAR(200)) TAGS (k INT)",
        "CREATE TOPIC rkt AS SELECT ts, v FROM rk.st WHERE k >= 0")
    n1 = nodes[0]
    leading = described(n1, "rkt")[0][0]
    target = [outsider, *(n for n in placed if n != leading)]  # (the leader left out: the outsider elected)
    leader = nodes[leading - 1]
    sql(leader, "INSERT INTO rk.w USING rk.st TAGS (-1) VALUES (1600000000000, -1, 'w')")  # (below the log start)
    pad = "p" * 200
    for t in range(24):  # ~5 MB: 1 MiB segments, the sealed ones deleted by retention
        sql(leader, f"INSERT INTO rk.t{t} USING rk.st TAGS ({t}) VALUES " + " ".join(
            f"({1_700_000_000_000 + i}, {i}, '{pad}')" for i in range(1000)))
    consumer = Consumer({"bootstrap.servers": bootstrap(nodes), "group.id": "rkt", "enable.auto.commit": False})
    try:
        def low() -> int:
            try:
                return int(consumer.get_watermark_offsets(TopicPartition("rkt", 0), timeout=30)[0])
            except KafkaException:
                return -1
        eventually("retention deleted rk's first segments", lambda: low() > 0)
    finally:
        consumer.close()
    acked: list[int] = []
    stop = threading.Event()

    def write() -> None:  # rows into w (made below the log start) and into new subtables, through any node
        for i in range(10_000):
            if stop.is_set():
                return
            server = nodes[i % len(nodes)]
            try:
                sql(server, f"INSERT INTO rk.w VALUES ({1_600_000_000_001 + i}, {i}, 'w') "
                            f"rk.n{i % 7} USING rk.st TAGS ({100 + i % 7}) VALUES ({1_600_000_000_001 + i}, {i}, 'n')")
                acked.append(i)
            except (urllib.error.URLError, OSError):  # (refused while leadership moves: not acknowledged)
                pass
            time.sleep(0.02)

    writer = threading.Thread(target=write, name="rk-writer")
    writer.start()
    try:
        eventually("rows acknowledged", lambda: len(acked) > 10)
        assert move(nodes[outsider - 1].kafka_port, target, "rkt") == (ErrorCode.none, ErrorCode.none)
        eventually(f"moved to {target}: node {outsider} restored from the snapshot, caught up and leads",
                   lambda: described(n1, "rkt")[0] == (outsider, target, sorted(target)))
        count = len(acked)
        eventually("rows acknowledged after the move", lambda: len(acked) > count + 10)
    finally:
        stop.set()
        writer.join(60)
    new = nodes[outsider - 1]
    assert "restored from its snapshot" in new.log()
    tables = {r[0] for r in sql(new, "SHOW rk.TABLES")}
    assert {"w", *(f"t{t}" for t in range(24)), *(f"n{k}" for k in range(7))} <= tables
    got = sorted(r[0] for r in sql(new, "SELECT v FROM rk.w WHERE v >= 0"))
    assert set(acked) <= set(got) and got == sorted(set(got)), (len(acked), len(got))
    assert new_db_id(etcd, before)
