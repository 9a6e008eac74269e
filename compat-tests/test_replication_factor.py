"""A replicated Kafka topic as the Java kafka-clients 4.3.0 makes and writes it (issue 25), on a 3-node walgate
cluster with ``replication.enable=true`` (livecluster.py: one etcd member, nodes stopped by PID).

java/ReplicatedTopic.java: the Admin creates a topic of replication factor 3 with ``min.insync.replicas=2`` (the
CreateTopics answer names factor 3);
describeTopics names, for each partition, a leader among three replicas (one on each node) all in sync;
describeConfigs answers ``min.insync.replicas`` 2 set on the topic (DYNAMIC_TOPIC_CONFIG); a KafkaProducer with
acks=all (idempotent: the client's default) sends every record without an error, and listOffsets' latest offsets
count them all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from compat_procs import Run

from livecluster import LiveCluster, running_cluster

PARTITIONS, COUNT = 3, 300


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with running_cluster(tmp_path_factory.mktemp("replicated"), 3, "--override", "replication.enable=true") as c:
        yield c


def test_java_admin_creates_describes_and_writes_a_replication_factor_3_topic(
        replicated_cluster: LiveCluster, java: Callable[..., Run]) -> None:
    run = java("ReplicatedTopic.java", replicated_cluster.endpoint(1), "rf3", str(PARTITIONS), str(COUNT))
    steps = {e["step"]: e for e in (json.loads(line) for line in run.stdout.splitlines() if line.startswith("{"))}
    assert "error" not in steps, steps
    assert steps["create"] == {"step": "create", "partitions": PARTITIONS, "replication_factor": 3}
    partitions = steps["describe"]["partitions"]
    assert [p["partition"] for p in partitions] == list(range(PARTITIONS))
    for p in partitions:
        assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3], p
        assert p["leader"] in p["replicas"]
    assert len({p["replicas"][0] for p in partitions}) == PARTITIONS, "the preferred leaders spread over the nodes"
    assert (steps["config"]["value"], steps["config"]["source"]) == ("2", "DYNAMIC_TOPIC_CONFIG")
    assert steps["produce"] == {"step": "produce", "sent": COUNT, "errors": 0}
    assert steps["ends"]["offsets"] == [COUNT // PARTITIONS] * PARTITIONS
    for node in replicated_cluster.nodes:
        assert "Traceback" not in node.log(), node.log()[-3000:]
