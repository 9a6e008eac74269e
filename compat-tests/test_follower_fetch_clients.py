"""Fetch from follower (KIP-392) with real clients on a 3-node walgate cluster (livecluster.py: one etcd member,
nodes stopped by PID) with ``replication.enable=true``, racks r1/r2/r3 (``broker.rack``) and
``replica.selector.class`` Kafka's ``RackAwareReplicaSelector``. Each topic has one partition placed on nodes 1, 2,
3 (node 1 its leader), written by an acks=all producer. Which node served the reads is each node's own
``kafka_server_brokertopicmetrics_bytesout_total{topic=...}`` (Kafka's BytesOutPerSec: what its Fetch served).

* The Java consumer (kafka-clients 4.3.0, java/ConsoleConsumer.java) with ``client.rack=r3`` reads every record from
  the follower in r3: bytes served on node 3 only, none on the leader (which answered its first fetch with
  ``preferred_read_replica`` 3 and no records).
* confluent-kafka (librdkafka) with ``client.rack=r2`` reads every record from the follower in r2; then node 2 is
  killed (kill -9): the client goes back to the leader, reads what is produced after, and nothing was lost or read
  twice (every value once, offsets 0..n-1 in order). This test kills a node: it runs last on the module's cluster.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from compat_procs import Run
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from livecluster import LiveCluster, running_cluster
from livewalgate import WalgateServer

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
TOPIC, JAVA_TOPIC, COUNT = "fff", "fff-java", 200
WAIT_S = 90.0


@pytest.fixture(scope="module")
def racked_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path_factory.mktemp("racked"), 3, "--override", "replication.enable=true",
                         "--override", f"replica.selector.class={RACK_AWARE}",
                         "--override", "broker.session.timeout.ms=4000",
                         node_args=lambda node: ("--override", f"broker.rack=r{node}")) as cluster:
        yield cluster


def bytes_out(server: WalgateServer, topic: str) -> float:
    """Record bytes ``server``'s Fetch served of ``topic`` (0 when it served none)."""
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30) as r:
        text = r.read().decode()
    found = re.search(rf'^kafka_server_brokertopicmetrics_bytesout_total\{{topic="{re.escape(topic)}"\}} ([0-9.e+]+)$',
                      text, re.M)
    return 0.0 if found is None else float(found[1])


def replicated_topic(cluster: LiveCluster, topic: str) -> None:
    """``topic``, one partition on nodes 1, 2, 3, led by node 1 with all three in sync, holding ``v0`` .. ``v199``."""
    admin = AdminClient({"bootstrap.servers": cluster.endpoint(1)})
    for future in admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]])]).values():
        future.result(WAIT_S)

    def in_sync() -> bool:
        partition = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
        return partition is not None and partition.leader == 1 and sorted(partition.isrs) == [1, 2, 3]
    wait_until(f"{topic}'s partition 0 led by node 1 with ISR [1, 2, 3]", in_sync)
    produce(cluster.endpoint(1), topic, 0)


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}")
        time.sleep(0.2)


def produce(bootstrap: str, topic: str, first: int) -> None:
    """Values ``v<first>`` .. ``v<first + COUNT - 1>`` to ``topic``, acks=all, each acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[object] = []
    for k in range(first, first + COUNT):
        producer.produce(topic, f"v{k}".encode(), on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(WAIT_S) == 0 and not errors, errors


def read(consumer: Consumer, got: list[tuple[int, bytes]], count: int) -> None:
    """Poll until ``got`` holds ``count`` (offset, value) pairs."""
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.offset(), msg.value()))


def test_the_java_consumer_in_rack_r3_reads_everything_from_the_follower_there(
        racked_cluster: LiveCluster, java: Callable[..., Run]) -> None:
    nodes = racked_cluster.nodes
    replicated_topic(racked_cluster, JAVA_TOPIC)
    run = java("ConsoleConsumer.java", "--bootstrap-server", racked_cluster.endpoint(1), "--topic", JAVA_TOPIC,
               "--group", "fff-java", "--from-beginning", "--max-messages", str(COUNT), "--timeout-ms", "30000",
               "--consumer-property", "client.rack=r3")
    assert run.stdout.splitlines() == [f"v{k}" for k in range(COUNT)]
    assert bytes_out(nodes[2], JAVA_TOPIC) > 0  # node 3 (rack r3) served the reads
    assert bytes_out(nodes[0], JAVA_TOPIC) == 0 and bytes_out(nodes[1], JAVA_TOPIC) == 0


def test_confluent_kafka_in_rack_r2_reads_from_the_follower_there_and_from_the_leader_once_it_is_killed(
        racked_cluster: LiveCluster) -> None:
    nodes = racked_cluster.nodes
    replicated_topic(racked_cluster, TOPIC)
    consumer = Consumer({"bootstrap.servers": ",".join(racked_cluster.endpoint(n) for n in (1, 2, 3)),
                         "group.id": "fff", "client.rack": "r2", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 200, "topic.metadata.refresh.interval.ms": 2000})
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read(consumer, got, COUNT)
        assert bytes_out(nodes[1], TOPIC) > 0  # node 2 (rack r2) served the reads
        assert bytes_out(nodes[0], TOPIC) == 0 and bytes_out(nodes[2], TOPIC) == 0

        nodes[1].proc.send_signal(signal.SIGKILL)  # kill -9 of node 2, by PID
        nodes[1].proc.wait(30)
        produce(racked_cluster.endpoint(1), TOPIC, COUNT)  # (acks=all: answered once node 2 is out of the ISR)
        read(consumer, got, 2 * COUNT)
    finally:
        consumer.close()
    assert got == [(k, f"v{k}".encode()) for k in range(2 * COUNT)]  # nothing lost, nothing twice, in order
    assert bytes_out(nodes[0], TOPIC) > 0 and bytes_out(nodes[2], TOPIC) == 0  # the leader (no replica left in r2)
    for node in (nodes[0], nodes[2]):
        assert "Traceback" not in node.log(), node.log()[-3000:]
