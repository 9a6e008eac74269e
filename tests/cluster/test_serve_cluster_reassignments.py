"""Moving a replicated partition's replicas in ``walgate serve`` (KIP-455, issue 26): three real ``walgate serve
--cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID), AlterPartitionReassignments and
ListPartitionReassignments sent to a node that is not the controller.

A topic of replication factor 3 (``min.insync.replicas=2``) gets acknowledged writes; its partition is moved to
nodes 1 and 2 (the replication factor lowered: the target in sync, the move completes at once, node 3 stops
replicating it and deletes its copy) and written to again. With node 3 paused, a move back to all three is listed as
in progress (node 3 adding; ``walgate cluster reassign --list`` shows it too) and cancelled with ``walgate cluster
reassign --cancel`` (back to 1 and 2). Node 3 resumed, the move to 3, 1, 2 completes once node 3, an adding replica
opening the partition empty, caught up from the leader; a preferred election makes it the leader, from which every
acknowledged value is read in order. A target naming a node that is not registered is refused, as is a cancellation
with no move in progress; nothing is listed as moving at the end; no node logged a traceback.
(test_serve_cluster_moves.py: moves to nodes that never held the partition, under load.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback, produce_to
from test_serve_cluster_replicated_topics import described, three_nodes

from livewalgate import WALGATE, WalgateServer, walgate_env
from tests.gateway.gateway_helpers import KafkaConnection, build, kio_classes
from walgate.wire.errors import ErrorCode

TOPIC = "moved"
LONG_SESSION = ("--override", "broker.session.timeout.ms=10000")
"""Node 3, paused (SIGSTOP) as an adding replica, stays registered while the move is listed and cancelled."""


def call(port: int, api_key: int, version: int, values: dict[str, Any]) -> Any:
    with KafkaConnection(("127.0.0.1", port)) as conn:
        return conn.request(build(kio_classes(api_key, version)[0], values))


def reassign(port: int, replicas: list[int] | None) -> tuple[int, int]:
    """(the request's, partition 0's) error code of a move of ``TOPIC``'s partition 0 to ``replicas``."""
    answer = call(port, 45, 1, {"timeout": 30_000, "allow_replication_factor_change": True, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
    return answer.error_code, answer.responses[0].partitions[0].error_code


def moving(port: int) -> tuple[Any, ...]:
    return call(port, 46, 0, {"timeout": 30_000, "topics": None}).topics


def cli(server: WalgateServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``walgate cluster reassign ARGS`` against ``server`` (bounded)."""
    return subprocess.run([*WALGATE, "cluster", "reassign", *args, "-b", f"127.0.0.1:{server.kafka_port}"],
                          check=False, capture_output=True, text=True, timeout=60, env=walgate_env())


def read_all(port: int, count: int, topic: str = TOPIC) -> list[bytes]:
    """At least ``count`` values of ``topic``'s partition 0 read from its beginning through the node at ``port``
    (fewer after 60 s)."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        return got
    finally:
        consumer.close()


def states(port: int) -> dict[int, tuple[list[int], list[int], list[int]]]:
    """Partition -> (replicas, adding, removing) of every partition ListPartitionReassignments through ``port``
    names as moving."""
    return {p.partition_index: (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in moving(port) for p in t.partitions}


def test_a_partition_moved_off_a_node_and_back_keeps_every_acknowledged_write(etcd1: EtcdCluster,
                                                                              tmp_path: Path) -> None:
    with ExitStack() as stack:
        n1, n2, n3 = three_nodes(stack, etcd1, tmp_path, *LONG_SESSION)
        stack.callback(os.kill, n3.proc.pid, signal.SIGCONT)  # (before the nodes stop: a stopped one cannot)
        create_topics(f"127.0.0.1:{n1.kafka_port}", NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"}))
        eventually("three in sync", lambda: described(n2, TOPIC)[0][2] == [1, 2, 3])
        first = [f"a{i}".encode() for i in range(50)]
        produce_to(n1.kafka_port, TOPIC, {0: first})

        assert reassign(n2.kafka_port, [1, 2]) == (ErrorCode.none, ErrorCode.none)  # in sync: completes at once
        eventually("replicas 1 and 2", lambda: described(n3, TOPIC)[0][1:] == ([1, 2], [1, 2]))
        eventually("node 3's copy deleted", lambda: not any((n3.data_dir / "db").glob("*/vnode0")))
        second = [f"b{i}".encode() for i in range(50)]
        produce_to(n2.kafka_port, TOPIC, {0: second})

        os.kill(n3.proc.pid, signal.SIGSTOP)  # registered for the session timeout, but never catching up
        assert reassign(n2.kafka_port, [1, 2, 3]) == (ErrorCode.none, ErrorCode.none)
        eventually("the move listed", lambda: states(n2.kafka_port) == {0: ([1, 2, 3], [3], [])})
        assert described(n1, TOPIC)[0][1:] == ([1, 2, 3], [1, 2])
        assert json.loads(cli(n1, "--list", "--json").stdout) == [{
            "topic": TOPIC, "partition": 0, "replicas": [1, 2, 3], "adding_replicas": [3], "removing_replicas": []}]
        cancelled = cli(n1, "--cancel", "-p", f"{TOPIC}/0", "--json")
        assert json.loads(cancelled.stdout)[0]["result"] == "cancelled", cancelled.stderr
        eventually("back to 1 and 2", lambda: states(n2.kafka_port) == {} and described(n2, TOPIC)[0][1] == [1, 2])
        os.kill(n3.proc.pid, signal.SIGCONT)

        assert reassign(n2.kafka_port, [3, 1, 2]) == (ErrorCode.none, ErrorCode.none)  # node 3 preferred, stale copy
        eventually("node 3 back in sync", lambda: described(n1, TOPIC)[0][1:] == ([3, 1, 2], [1, 2, 3]))
        elected = call(n3.kafka_port, 43, 2, {"election_type": 0, "timeout": 30_000, "topic_partitions": [
            {"topic": TOPIC, "partitions": [0]}]})
        assert elected.replica_election_results[0].partition_result[0].error_code == ErrorCode.none
        eventually("node 3 leads", lambda: described(n2, TOPIC)[0][0] == 3)
        assert read_all(n3.kafka_port, 100) == first + second

        assert reassign(n2.kafka_port, [4, 2]) == (ErrorCode.none, ErrorCode.invalid_replica_assignment)
        assert reassign(n2.kafka_port, None) == (ErrorCode.none, ErrorCode.no_reassignment_in_progress)
        assert states(n1.kafka_port) == {}
        for server in (n1, n2, n3):
            no_traceback(server)
