"""A replicated cluster's group coordinators fail over (issue 25, docs/plans/replication-wiring.md step 7): a group's
coordinator is the leader of its ``__consumer_offsets`` partition (replication factor 3 here), its commits are
answered once the in-sync replicas hold them, and after the coordinator's node is killed -9 the partition's new
leader loads it: FindCoordinator names that node, the group's committed offsets are there, and the group's consumer
goes on from them (real nodes and etcd, confluent-kafka).
"""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback, produce_to
from test_serve_cluster_replicated_topics import bootstrap, three_nodes

from coordinator_admin import described_groups

GROUP, TOPIC = "failover-group", "cf"
_MOVING = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
           KafkaError._TIMED_OUT)  # (librdkafka's: the request to a node that died meanwhile, or a loaded machine)


def _coordinator(servers: str) -> int:
    """The node FindCoordinator names for :data:`GROUP` (through AdminClient's describe); -1 while the describe gets a
    retriable error (COORDINATOR_LOAD_IN_PROGRESS while the new leader loads the partition) or is not answered within
    15 s (:mod:`coordinator_admin`: librdkafka's own timeout would abort the process here)."""
    answer = described_groups(servers, [GROUP], 15).get(GROUP)
    if isinstance(answer, KafkaException):
        if not answer.args[0].retriable() and answer.args[0].code() not in _MOVING:
            raise answer
        return -1
    return -1 if answer is None else int(answer.coordinator.id)


def _committed(servers: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)],
                                                                      timeout=20)}
    finally:
        consumer.close()


def _consume(servers: str, count: int) -> list[tuple[int, int]]:
    """``count`` records read by :data:`GROUP`'s member from its committed offsets, each committed synchronously."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            got.append((msg.partition(), msg.offset()))
            consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()
    return got


def test_a_groups_coordinator_moves_with_its_partition_and_keeps_the_commits(etcd1: EtcdCluster,
                                                                              tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path)
        servers = bootstrap(nodes)
        create_topics(servers, NewTopic(TOPIC, 2, 3))
        assert produce_to(nodes[0].kafka_port, TOPIC, {0: [b"%d" % i for i in range(10)],
                                                       1: [b"%d" % i for i in range(10)]})
        first = _consume(servers, 6)
        assert len(first) == 6
        before = _committed(servers)
        assert sum(max(o, 0) for o in before.values()) == 6, before  # (-1001: none committed there)
        coordinator = _coordinator(servers)
        victim = nodes[coordinator - 1]  # (nodes 1, 2, 3 in order)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        survivors = [s for s in nodes if s is not victim]
        left = bootstrap(survivors)
        eventually("another node coordinates the group", lambda: _coordinator(left) not in (coordinator, -1))
        assert _committed(left) == before  # the commits answered before the kill are on the new coordinator
        rest = _consume(left, 14)
        assert sorted(first + rest) == sorted((p, o) for p in (0, 1) for o in range(10))  # each record once
        for s in survivors:
            no_traceback(s)
