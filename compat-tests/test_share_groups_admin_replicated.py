"""Share groups' administration (KIP-932) on a 3-node cluster with ``replication.enable=true`` (livecluster.py: one
etcd member, nodes stopped by PID) through unmodified clients: confluent-kafka ``ShareConsumer`` workers consume, the
Java Admin of kafka-clients 4.3 (java/ShareGroupOffsetsAdmin.java) administers, bootstrapped on another node.

The group's coordinator answers from the share coordinator's records (docs/cluster.md "Share groups"), as Kafka's
group coordinator does: ``listShareGroupOffsets`` with no partitions names every share-partition with state (its
start offset and lag), ``deleteShareGroupOffsets`` of a topic the group never consumed fails with
UnknownTopicOrPartitionException (Kafka's "no offset information to delete", though its partitions are led by other
nodes), of the topic it consumed succeeds, and the group, without state or members, is no longer listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from compat_procs import Run
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_share_groups import bootstrap, drain, from_earliest, worker

from livecluster import LiveCluster, running_cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path / "cluster", 3, "--override", "replication.enable=true") as c:
        yield c


def admin(java: Callable[..., Run], cluster: LiveCluster, node_id: int, *ops: list[str]) -> list[list[dict[str, Any]]]:
    """The results of each operation, run in order by one Java Admin bootstrapped on node ``node_id``."""
    argv = [a for op in ops for a in ["--", *op]][1:]
    out: list[list[dict[str, Any]]] = []
    for line in java("ShareGroupOffsetsAdmin.java", cluster.endpoint(node_id), *argv).json_lines():
        if "op" in line:
            out.append([])
        else:
            out[-1].append(line)
    return out


def test_java_admin_describes_and_deletes_a_replicated_share_groups_recorded_offsets(
        cluster: LiveCluster, java: Callable[..., Run]) -> None:
    first = cluster.nodes[0]
    client = AdminClient({"bootstrap.servers": bootstrap(first)})  # (kept: its futures need its handle)
    for future in client.create_topics([NewTopic("rq", 2, 3), NewTopic("rn", 2, 3)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap(first), "acks": "all"})
    for i in range(10):
        producer.produce("rq", value=f"v{i}".encode(), partition=i % 2)  # offsets 0..4 in each partition
    assert producer.flush(30) == 0
    from_earliest(first, "rg")
    consumer = worker(first, "rg", "rq", **{"share.acknowledgement.mode": "explicit"})
    assert len(drain(consumer, 10)) == 10
    consumer.close()

    assert admin(java, cluster, 2, ["offsets", "rg"], ["list"], ["delete-offsets", "rg", "rn"],
                 ["delete-offsets", "rg", "rq"], ["offsets", "rg"], ["list"]) == [
        [{"tp": "rq:0", "start": 5, "lag": 0}, {"tp": "rq:1", "start": 5, "lag": 0}],
        [{"group": "rg", "type": "Share", "state": "Empty"}],
        [{"item": "rn", "error": "UnknownTopicOrPartitionException"}],
        [{"item": "rq"}],
        [],
        []]
    for node in cluster.nodes:
        assert "Traceback" not in node.log(), node.log()[-3000:]
