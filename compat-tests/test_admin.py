"""Kafka-native topic administration with the real Java Admin client (issue 5), on walgate and on Tansu.

TopicsAdmin.java makes the calls of kafka-topics --create/--describe/--alter --partitions/--delete,
kafka-configs --describe/--alter and kafka-delete-records: createTopics (with a config), describeTopics,
describeConfigs, incrementalAlterConfigs (SET and DELETE), createPartitions, a producer, deleteRecords,
listOffsets(earliest), deleteTopics.
"""

from __future__ import annotations

import json
import uuid

import pytest
from compat_brokers import xfail_on_tansu

JAVA_CLIENTS = ["4.3.0", "3.9"]


def steps(run) -> dict[str, dict]:
    return {d["step"]: d for d in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))}


@pytest.mark.parametrize("clients", JAVA_CLIENTS)
def test_topics_admin_round_trip(broker, java, clients, request):
    if broker.name == "tansu":
        xfail_on_tansu(request, "see FINDINGS.md (Admin round trip)")
    topic = f"admin-{uuid.uuid4().hex[:8]}"
    run = java("TopicsAdmin.java", broker.bootstrap, topic, "3", clients=clients, timeout=120, check=False)
    got = steps(run)
    assert "error" not in got, run.describe()
    # partition, leader, replicas, in-sync replicas
    assert [[p, r, i] for p, _, r, i in got["described"]["partitions"]] == [[p, 1, 1] for p in range(3)], run.describe()
    configs = got["configs"]["configs"]
    assert configs["retention.ms"] == "86400000|DYNAMIC_TOPIC_CONFIG", run.describe()
    assert configs["cleanup.policy"] == "delete|DEFAULT_CONFIG", run.describe()
    altered = got["altered"]["configs"]
    assert altered["retention.bytes"] == "10485760|DYNAMIC_TOPIC_CONFIG", run.describe()
    assert altered["retention.ms"] == "604800000|DEFAULT_CONFIG", run.describe()
    assert len(got["grown"]["partitions"]) == 5 and got["grown"]["topic_id"] == got["described"]["topic_id"]
    assert got["produced"]["earliest"] == [0] * 5, run.describe()
    assert got["records_deleted"]["earliest"] == [4, 0, 0, 0, 0], run.describe()
    assert got["deleted"]["listed"] is False, run.describe()


def test_replica_counts_the_cluster_cannot_hold_are_refused(walgate_cluster):
    """Issue 25: on a 3-node cluster a replication factor of 4 (confluent-kafka, kafka-python) gets Kafka's placer
    error (INVALID_REPLICATION_FACTOR, 38) and SQL ``REPLICA 2`` TDengine's: no topic or database claims copies that
    cannot exist. (Factors 2 and 3 are served: test_replication_factor.py; refused on a cluster run with
    ``replication.enable=false``: tests/cluster/test_serve_cluster_assignments.py.)"""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import InvalidReplicationFactorError

    admin = AdminClient({"bootstrap.servers": walgate_cluster.bootstrap})
    [future] = admin.create_topics([NewTopic("rf4", 2, 4)], request_timeout=60).values()
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=60)
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICATION_FACTOR and error.str() == (
        "Unable to replicate the partition 4 time(s): The target replication factor of 4 cannot be reached because "
        "only 3 broker(s) are registered."), error
    kp = KafkaAdminClient(bootstrap_servers=walgate_cluster.bootstrap, request_timeout_ms=60_000)
    try:
        with pytest.raises(InvalidReplicationFactorError):
            kp.create_topics([KpNewTopic("kp-rf4", 1, 4)])
    finally:
        kp.close()
    with pytest.raises(AssertionError, match="Invalid option replications: 2, only 1, 3 allowed"):
        walgate_cluster.sql("CREATE DATABASE rf2 REPLICA 2")
    assert [r[0] for r in walgate_cluster.sql("SHOW TOPICS")["data"] if r[0].startswith(("rf", "kp-"))] == []
    assert "rf2" not in [r[0] for r in walgate_cluster.sql("SHOW DATABASES")["data"]]
