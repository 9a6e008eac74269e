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
