"""Kafka-native topics of replication factor above 1 in ``walgate serve`` (issue 25): three real ``walgate serve
--cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID), unmodified clients.

A confluent-kafka Admin creates topics of replication factor 3 (``min.insync.replicas=2``) and 2, and adds a
partition to the second on two brokers it names; Metadata names each partition's three (two) replicas, all in the
ISR, and its leader; DescribeConfigs the topic's ``min.insync.replicas`` and its source, which
IncrementalAlterConfigs changes on the second topic, whose partition left with one in-sync replica by the kill below
then refuses acks=all NOT_ENOUGH_REPLICAS. At the end DeleteTopics of the second topic deletes its partition states
and every replica's files. An idempotent confluent-kafka producer (acks=all, bootstrapped on every node) keeps
producing unique values while a consumer assigned every partition keeps reading them; the leader of partition 0 is
killed with kill -9, the survivors elect another, and the dead node, restarted on its data dir, rejoins the ISR. The
producer's every send is acknowledged (its retries of batches the old leader may have appended are answered as
duplicates by the new leader, which built each producer's sequences from the WAL it copied), no error it reports is
fatal, and tests/cluster/history.py's checker finds nothing: every acknowledged value is read, at one offset, once,
in order, and a full read of each partition through each node holds them all.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from etcd_cluster import EtcdCluster
from history import Assign, FinalRead, Op, Poll, Send, Write, check
from replica_copies import replica_copies
from serve_support import all_ready, create_topics, eventually, leader_of, no_traceback, node, produce_to, wait_log
from test_serve_cluster_sql import catalog_records

from livewalgate import WalgateServer
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import Keys
from walgate.cluster.partition_codec import partitions_prefix

ARGS = ("--override", "replica.lag.time.max.ms=2000", "--override", "replication.enable=true",
        "--override", "default.replication.factor=2")
"""(default.replication.factor: what CreateTopics' replication_factor -1 asks for, Kafka's setting)"""
TOPIC, PARTITIONS = "kt", 2
KT_CONFIGS = {"min.insync.replicas": "2", "flush.messages": "1"}
"""flush.messages=1: group commit, each write fsynced before it counts for the high watermark (the minimum durable
position over the ISR); at the default flush.ms (3 s) an acks=all answer waits for the leader's and the followers'
periodic fsyncs, up to 3 s."""
KT_DB = f"kafka_{TOPIC}"  # (the database a Kafka-native topic's partitions are vgroups of)
PRODUCER, CONSUMER, FINAL = 1, 100, 200  # the history's process numbers (FINAL + node id: a full read through it)


def three_nodes(stack: ExitStack, etcd: EtcdCluster, tmp_path: Path, *args: str) -> list[WalgateServer]:
    """Nodes 1 (the controller, elected first), 2 and 3 with :data:`ARGS` and ``args``, stopped when ``stack``
    closes; once all three are ready."""
    n1 = stack.enter_context(node(etcd, tmp_path, 1, *ARGS, *args))
    wait_log(n1, "node 1: controller")
    nodes = [n1, *(stack.enter_context(node(etcd, tmp_path, i, *ARGS, *args)) for i in (2, 3))]
    all_ready(nodes)
    return nodes


def bootstrap(nodes: list[WalgateServer]) -> str:
    return ",".join(f"127.0.0.1:{s.kafka_port}" for s in nodes)


def described(server: WalgateServer, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """Partition -> (leader, replicas, ISR sorted) of ``topic``, as Metadata through ``server`` names them."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
    parts = admin.list_topics(topic, timeout=30).topics[topic].partitions
    return {p: (m.leader, list(m.replicas), sorted(m.isrs)) for p, m in parts.items()}


def partition_states(etcd: EtcdCluster) -> list[bytes]:
    """The keys of every partition state in etcd (``partitions/<database id>/<vgroup>``)."""
    async def read() -> list[bytes]:
        session = EtcdSession(etcd.endpoints)
        try:
            _, kvs = await session.get_prefix(partitions_prefix(Keys("walgate")))
            return [kv.key for kv in kvs]
        finally:
            await session.close()

    return asyncio.run(read())


def vnode_dirs(server: WalgateServer) -> set[str]:
    """The database directories holding vnodes in ``server``'s data dir."""
    return {p.parent.name for p in (server.data_dir / "db").glob("*/vnode*")}


def min_isr(server: WalgateServer, topic: str) -> tuple[str, ConfigSource]:
    """``topic``'s min.insync.replicas and its source, as DescribeConfigs through ``server`` answers them."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
    [future] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    entry = future.result(30)["min.insync.replicas"]
    return entry.value, ConfigSource(entry.source)


def acks_all_error(servers: str, topic: str, partition: int) -> KafkaError | None:
    """The error one acks=all send without retries to ``partition`` of ``topic`` is answered (None: written)."""
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "retries": 0, "message.timeout.ms": 30_000})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"x", partition=partition, on_delivery=lambda err, _: errors.append(err))
    assert producer.flush(30) == 0
    return errors[0]


class Reader(threading.Thread):
    """A consumer assigned every partition of :data:`TOPIC` from offset 0, polling until stopped: each poll's
    (offset, value) pairs as a :class:`Poll` of the history."""

    def __init__(self, servers: str, history: list[Op]) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": servers, "group.id": "kt-readers", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        self.history, self.stopped = history, threading.Event()

    def run(self) -> None:
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        self.history.append(Assign(CONSUMER))
        while not self.stopped.is_set():
            reads: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for msg in self.consumer.consume(100, 0.2):
                if msg.error() is None:
                    reads[str(msg.partition())].append((msg.offset(), int(msg.value())))
            if reads:
                self.history.append(Poll(CONSUMER, reads))
        self.consumer.close()

    def read(self) -> int:
        """How many values it read so far."""
        return sum(len(pairs) for op in list(self.history) if isinstance(op, Poll) for pairs in op.reads.values())

    def stop(self, acked: int) -> None:
        """Stop once it read ``acked`` values (at most 60 s: a consumer behind on a loaded machine catches up)."""
        deadline = time.monotonic() + 60
        while self.read() < acked and time.monotonic() < deadline and self.is_alive():
            time.sleep(0.1)
        self.stopped.set()
        self.join(30)


class Writer(threading.Thread):
    """An idempotent acks=all producer sending 0, 1, 2, ... round-robin over the partitions of :data:`TOPIC` until
    :meth:`stop`: each delivery a :class:`Send` of the history; ``failed``: the sends given up; ``errors``: what its
    ``error_cb`` was told (retriable errors are expected while leaderships move; a fatal one never is)."""

    def __init__(self, servers: str, history: list[Op]) -> None:
        super().__init__(daemon=True)
        self.history, self.failed, self.errors = history, list[KafkaError](), list[KafkaError]()
        self.producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120_000, "error_cb": self.errors.append})
        self.stopped = threading.Event()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        write = Write(str(msg.partition()), int(msg.value()), None if err else msg.offset())
        self.history.append(Send(PRODUCER, (write,), "info" if err else "ok"))
        if err is not None:
            self.failed.append(err)

    def run(self) -> None:
        for value in itertools.count():
            if self.stopped.is_set():
                return
            self.producer.produce(TOPIC, str(value).encode(), partition=value % PARTITIONS, on_delivery=self._delivered)
            self.producer.poll(0.01)

    def stop(self) -> None:
        """Stop sending and wait until every send was answered."""
        self.stopped.set()
        self.join(30)
        assert self.producer.flush(120) == 0, "every send answered"

    def acked(self) -> int:
        """How many sends were acknowledged so far."""
        return sum(isinstance(op, Send) and op.outcome == "ok" for op in self.history)


def checked(history: list[Op], writer: Writer, nodes: list[WalgateServer]) -> list[Send]:
    """The sends of ``history`` once checked: ``writer`` gave none up and was told no fatal error, every send
    acknowledged, and, with each partition read whole through each of ``nodes`` (at once), the history checker
    finds nothing (no acknowledged write lost or duplicated, one value per offset, every node's the same)."""
    assert [e for e in writer.errors if e.fatal()] == [] and writer.failed == [], (writer.errors, writer.failed)
    sends = [op for op in history if isinstance(op, Send)]
    assert sends and all(s.outcome == "ok" for s in sends)
    reads_of = [(k + 1, server, p) for k, server in enumerate(nodes) for p in range(PARTITIONS)]
    with ThreadPoolExecutor(len(reads_of)) as pool:
        history += pool.map(lambda r: FinalRead(FINAL + r[0], str(r[2]), full_read(r[1], r[2])), reads_of)
    assert check(history) == []
    return sends


def identical_replicas(stack: ExitStack, nodes: Mapping[int, WalgateServer], scratch: Path, topic: str = TOPIC,
                       partitions: int = PARTITIONS) -> None:
    """Every node of ``nodes`` (node id -> its server) stopped (``stack`` closed): each of their replicas of each
    partition of ``topic`` holds the others' WAL entries and offset index records, entry by entry, below the high
    watermark (the checker's replica-divergence, tests/cluster/replica_copies.py)."""
    database_id = next(r["db_id"] for r in catalog_records(next(iter(nodes.values())))
                       if r.get("op") == "create_kafka_topic" and r["name"] == topic)
    data_dirs = {i: s.data_dir for i, s in nodes.items()}
    stack.close()
    copies = replica_copies(data_dirs, database_id, partitions, scratch, key="{}")
    assert check(copies) == [] and all(c.entries and c.index for c in copies), copies


def full_read(server: WalgateServer, partition: int) -> list[tuple[int, int]]:
    """Every (offset, value) of ``partition`` from offset 0 to its end, read through ``server`` alone."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "kt-final",
                         "enable.auto.commit": False})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        out: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    out.append((msg.offset(), int(msg.value())))
        return out
    finally:
        consumer.close()


def test_replicated_topics_are_placed_described_and_survive_a_leaders_kill_9(etcd1: EtcdCluster,
                                                                             tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path)
        n1 = nodes[0]
        create_topics(bootstrap(nodes), NewTopic(TOPIC, PARTITIONS, 3, config=KT_CONFIGS),
                      NewTopic("kt2", PARTITIONS))  # (kt2's factor -1)
        admin = AdminClient({"bootstrap.servers": bootstrap(nodes)})
        for topic, factor in ((TOPIC, 3), ("kt2", 2)):  # kt2's: default.replication.factor
            eventually(f"{topic}'s partitions led, every replica in the ISR", lambda t=topic, f=factor: all(
                leader in replicas and len(replicas) == f and isr == sorted(replicas)
                for leader, replicas, isr in described(n1, t).values()))
        assert produce_to(nodes[1].kafka_port, "kt2", {0: [b"a", b"b"], 1: [b"c"]}) == {0: [0, 1], 1: [0]}
        assert min_isr(nodes[2], TOPIC) == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        # (the node's min.insync.replicas setting, 1, as every Kafka setting a node runs with: DescribeConfigs' static)
        assert min_isr(nodes[2], "kt2") == ("1", ConfigSource.STATIC_BROKER_CONFIG)
        [altered] = admin.incremental_alter_configs([ConfigResource("topic", "kt2", incremental_configs=[
            ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET)])]).values()
        altered.result(30)
        assert min_isr(nodes[2], "kt2") == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        [grown] = admin.create_partitions([NewPartitions("kt2", PARTITIONS + 1, replica_assignment=[[3, 1]])],
                                          request_timeout=30).values()
        grown.result(30)
        eventually("kt2's new partition on nodes 3 and 1 (as assigned), led by 3, both in sync",
                   lambda: described(n1, "kt2").get(PARTITIONS) == (3, [3, 1], [1, 3]))
        assert len(partition_states(etcd1)) == 2 * PARTITIONS + 1
        kt2_replicas = {p: replicas for p, (_, replicas, _) in described(n1, "kt2").items()}  # (3 partitions)
        eventually("a leader of each partition of kt", lambda: all(leader_of(nodes, KT_DB, p) for p in range(PARTITIONS)))

        history: list[Op] = []
        reader, writer = Reader(bootstrap(nodes), history), Writer(bootstrap(nodes), history)
        reader.start()
        writer.start()
        try:
            eventually("values acknowledged", lambda: writer.acked() > 20)
            first = leader_of(nodes, KT_DB, 0)
            assert first is not None
            first_epoch, dead = first
            dead_id = nodes.index(dead) + 1
            dead.proc.kill()
            dead.proc.wait(timeout=30)
            survivors = [s for s in nodes if s is not dead]
            eventually("a new leader of partition 0", lambda: leader_of(survivors, KT_DB, 0, first_epoch) is not None)
            acked = writer.acked()
            eventually("values acknowledged by the new leader", lambda: writer.acked() > acked + 50)
            lone = next(p for p, replicas in kt2_replicas.items() if dead_id in replicas)
            eventually(f"kt2-{lone}'s ISR without node {dead_id}", lambda: dead_id not in described(
                survivors[0], "kt2")[lone][2])  # one member left: below kt2's min.insync.replicas (altered to 2)
            assert acks_all_error(bootstrap(survivors), "kt2", lone).code() == KafkaError.NOT_ENOUGH_REPLICAS
            no_traceback(dead)
            back = stack.enter_context(node(etcd1, tmp_path / "again", dead_id, *ARGS, data_dir=dead.data_dir,
                                            kafka_port=dead.kafka_port))
            nodes[dead_id - 1] = back
            eventually("the restarted node back in the ISR of every partition",
                       lambda: all(isr == [1, 2, 3] for _, _, isr in described(survivors[0], TOPIC).values()))
        finally:
            writer.stop()
            reader.stop(writer.acked())
        sends = checked(history, writer, nodes)
        assert reader.read() >= len(sends), "the consumer read every acknowledged value"
        kept = {server.data_dir: vnode_dirs(server) for server in nodes}
        states = len(partition_states(etcd1))  # (__consumer_offsets' too, once a group's coordinator was asked)
        [deleted] = admin.delete_topics(["kt2"], request_timeout=30).values()
        deleted.result(30)
        eventually("kt2's partition states deleted", lambda: len(partition_states(etcd1)) == states - PARTITIONS - 1)
        for server in nodes:  # every replica's files of kt2 removed, the others kept
            eventually(f"kt2's vnodes gone from {server.data_dir}", lambda s=server: len(vnode_dirs(s)) == len(
                kept[s.data_dir]) - 1 and vnode_dirs(s) < kept[s.data_dir])
        for server in nodes:
            no_traceback(server)
        identical_replicas(stack, dict(enumerate(nodes, 1)), tmp_path / "replicas")
