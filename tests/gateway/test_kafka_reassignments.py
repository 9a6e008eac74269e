"""AlterPartitionReassignments (45) and ListPartitionReassignments (46) on a single node, over a real socket: a
partition of one copy is not moved (INVALID_REPLICA_ASSIGNMENT, or NO_REASSIGNMENT_IN_PROGRESS for a cancellation),
an unknown one is UNKNOWN_TOPIC_OR_PARTITION, and nothing is listed as moving. The moves of replicated partitions:
tests/cluster/test_serve_cluster_reassignments.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes
from kio.schema.errors import ErrorCode


def call(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def test_one_copy_partitions_are_not_moved_and_nothing_is_listed(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        call(conn, 19, 7, {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1}], "timeout": 10_000})
        for version in (0, 1):
            moved = call(conn, 45, version, {"timeout": 10_000, "allow_replication_factor_change": True, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "replicas": [0]},
                                             {"partition_index": 1, "replicas": None},
                                             {"partition_index": 7, "replicas": [0]}]},
                {"name": "nowhere", "partitions": [{"partition_index": 0, "replicas": [0]}]}]})
            assert moved.error_code == ErrorCode.none
            answers = [(t.name, p.partition_index, p.error_code) for t in moved.responses for p in t.partitions]
            assert answers == [("t", 0, ErrorCode.invalid_replica_assignment),
                               ("t", 1, ErrorCode.no_reassignment_in_progress),
                               ("t", 7, ErrorCode.unknown_topic_or_partition),
                               ("nowhere", 0, ErrorCode.unknown_topic_or_partition)]
            assert "one copy" in (moved.responses[0].partitions[0].error_message or "")
        for topics in (None, [{"name": "t", "partition_indexes": [0, 1, 9]}, {"name": "nowhere", "partition_indexes": [0]}]):
            listed = call(conn, 46, 0, {"timeout": 10_000, "topics": topics})
            assert (listed.error_code, listed.topics) == (ErrorCode.none, ())
