"""Fetch from follower (KIP-392) with a real client: confluent-kafka (librdkafka, which implements KIP-392) on a
3-node walgate cluster (livecluster.py: one etcd member, nodes stopped by PID) with ``replication.enable=true``,
racks r1/r2/r3 (``broker.rack``) and ``replica.selector.class`` Kafka's ``RackAwareReplicaSelector``.

A topic of one partition is placed on nodes 1, 2, 3 (node 1 its leader); a producer writes it with acks=all. A
consumer with ``client.rack=r2`` reads every record, and the reads were served by the follower in r2: the nodes'
own ``kafka_server_brokertopicmetrics_bytesout_total{topic=...}`` (Kafka's BytesOutPerSec, what Fetch served
there) counts bytes on node 2 only, none on the leader (which answered the client's first fetch with
``preferred_read_replica`` 2 and no records). Then node 2 is killed (kill -9): the client goes back to the leader,
reads what is produced after, and nothing was lost or read twice (every value once, offsets 0..n-1 in order).
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from livecluster import LiveCluster, running_cluster
from livewalgate import WalgateServer

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
TOPIC, COUNT = "fff", 200
WAIT_S = 90.0


@pytest.fixture
def racked_cluster(tmp_path: Path) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path, 3, "--override", "replication.enable=true",
                         "--override", f"replica.selector.class={RACK_AWARE}",
                         "--override", "broker.session.timeout.ms=4000",
                         node_args=lambda node: ("--override", f"broker.rack=r{node}")) as cluster:
        yield cluster


def bytes_out(server: WalgateServer) -> float:
    """Record bytes ``server``'s Fetch served of :data:`TOPIC` (0 when it served none)."""
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30) as r:
        text = r.read().decode()
    found = re.search(rf'^kafka_server_brokertopicmetrics_bytesout_total\{{topic="{TOPIC}"\}} ([0-9.e+]+)$', text,
                      re.M)
    return 0.0 if found is None else float(found[1])


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}")
        time.sleep(0.2)


def produce(bootstrap: str, first: int) -> None:
    """Values ``v<first>`` .. ``v<first + COUNT - 1>``, acks=all, each acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[object] = []
    for k in range(first, first + COUNT):
        producer.produce(TOPIC, f"v{k}".encode(), on_delivery=lambda err, _msg: errors.append(err) if err else None)
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


def test_a_consumer_in_rack_r2_reads_from_the_follower_there_and_from_the_leader_once_it_is_killed(
        racked_cluster: LiveCluster) -> None:
    nodes = racked_cluster.nodes
    bootstrap = ",".join(racked_cluster.endpoint(n) for n in (1, 2, 3))
    admin = AdminClient({"bootstrap.servers": racked_cluster.endpoint(1)})
    for future in admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])]).values():
        future.result(WAIT_S)

    def in_sync() -> bool:
        partition = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.get(0)
        return partition is not None and partition.leader == 1 and sorted(partition.isrs) == [1, 2, 3]
    wait_until("partition 0 led by node 1 with ISR [1, 2, 3]", in_sync)
    produce(racked_cluster.endpoint(1), 0)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fff", "client.rack": "r2",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 200, "topic.metadata.refresh.interval.ms":
                         2000})
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        read(consumer, got, COUNT)
        assert bytes_out(nodes[1]) > 0  # node 2 (rack r2) served the reads
        assert bytes_out(nodes[0]) == 0 and bytes_out(nodes[2]) == 0

        nodes[1].proc.send_signal(signal.SIGKILL)  # kill -9 of node 2, by PID
        nodes[1].proc.wait(30)
        produce(racked_cluster.endpoint(1), COUNT)  # (acks=all: answered once node 2 is fenced out of the ISR)
        read(consumer, got, 2 * COUNT)
    finally:
        consumer.close()
    assert got == [(k, f"v{k}".encode()) for k in range(2 * COUNT)]  # nothing lost, nothing twice, in order
    assert bytes_out(nodes[0]) > 0 and bytes_out(nodes[2]) == 0  # back on the leader (no replica left in r2)
    for node in (nodes[0], nodes[2]):
        assert "Traceback" not in node.log(), node.log()[-3000:]
