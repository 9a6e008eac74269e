"""DeleteRecords on a replicated partition (KIP-107, issue 25): three real ``walgate serve --cluster`` nodes with
``replication.enable=true`` over a real etcd (stopped by PID). Only the partition's leader moves its log start: the
request sent to a follower is answered NOT_LEADER_OR_FOLLOWER and moves nothing there (a follower's copy never moves
its log start by itself), an offset past the high watermark is OFFSET_OUT_OF_RANGE, and confluent-kafka's Admin
(which asks the leader) deletes the records before offset 4: answered once both followers took the new log start
(WalFetch v1, Kafka's DelayedDeleteRecords), low watermark 4. The leader then killed -9, the node elected next
answers 4 as the earliest offset: the deleted records are never served again (they were, before the followers
learnt the leader's log start)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import create_topics, eventually, no_traceback
from test_serve_cluster_reassignments import call
from test_serve_cluster_replicated_topics import KT_CONFIGS, bootstrap, described, three_nodes

from walgate.wire.errors import ErrorCode


def delete_before(port: int, offset: int) -> tuple[int, int]:
    """(error code, low watermark) of a DeleteRecords of ``dr``'s partition 0 before ``offset``, sent to ``port``."""
    answer = call(port, 21, 2, {"timeout": 30_000, "topics": [
        {"name": "dr", "partitions": [{"partition_index": 0, "offset": offset}]}]})
    part = answer.topics[0].partitions[0]
    return part.error_code, part.low_watermark


def test_only_the_leader_of_a_replicated_partition_deletes_records(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path)
        create_topics(bootstrap(nodes), NewTopic("dr", 1, 3, config=KT_CONFIGS))
        eventually("dr led, three replicas in sync", lambda: len(described(nodes[0], "dr")[0][2]) == 3)
        producer = Producer({"bootstrap.servers": bootstrap(nodes), "acks": "all"})
        for i in range(10):
            producer.produce("dr", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        leader = described(nodes[0], "dr")[0][0]
        follower = next(s for i, s in enumerate(nodes, 1) if i != leader)

        assert delete_before(follower.kafka_port, 4) == (ErrorCode.not_leader_or_follower, -1)
        assert delete_before(nodes[leader - 1].kafka_port, 11) == (ErrorCode.offset_out_of_range, -1)
        admin = AdminClient({"bootstrap.servers": bootstrap(nodes)})
        [deleted] = admin.delete_records([TopicPartition("dr", 0, 4)]).values()
        assert deleted.result(30).low_watermark == 4
        consumer = Consumer({"bootstrap.servers": bootstrap(nodes), "group.id": "dr"})
        try:
            assert consumer.get_watermark_offsets(TopicPartition("dr", 0), timeout=30) == (4, 10)
        finally:
            consumer.close()
        nodes[leader - 1].proc.kill()
        survivors = [s for i, s in enumerate(nodes, 1) if i != leader]
        eventually("another node leads dr", lambda: described(survivors[0], "dr")[0][0] not in (leader, -1))
        consumer = Consumer({"bootstrap.servers": bootstrap(survivors), "group.id": "dr"})
        try:
            eventually("the new leader's watermarks", lambda: _watermarks(consumer) is not None)
            assert _watermarks(consumer) == (4, 10)
        finally:
            consumer.close()
        for server in survivors:
            no_traceback(server)


def _watermarks(consumer: Consumer) -> tuple[int, int] | None:
    """(low, high) of ``dr``'s partition 0, None while its leadership moves (NOT_LEADER_OR_FOLLOWER)."""
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("dr", 0), timeout=30)
    except KafkaException:
        return None
    return low, high
