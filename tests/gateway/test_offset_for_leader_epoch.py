"""OffsetForLeaderEpoch (api 23) answered from each vnode's leader-epoch cache (issue 25), over a real socket.

One in-process gateway: a Kafka-native topic that confluent-kafka produced 5 records to, and a TDengine topic of 3
rows; requests encoded and responses decoded by kio (Kafka's JSON schemas). Kafka's ``LeaderEpochFileCache.endOffsetFor``
is the reference: an epoch the log holds ends at the next epoch's start or, the latest, at the log end (here the
high watermark); an undefined epoch (-1: "no epoch", as a bootstrapping follower asks) and one above the latest are
UNDEFINED (-1/-1); a current leader epoch above the partition's is UNKNOWN_LEADER_EPOCH. The Java consumer's
truncation detection over the same answers is compat-tests/test_truncation_detection.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes, sql
from kio.schema.errors import ErrorCode

from walgate.gateway.server import Gateway

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

NATIVE, TDENGINE = "native", "tdt"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with gateway_thread(Path(tmp_path_factory.mktemp("epochs")) / "data") as gateway:
        host, port = gateway.kafka_address
        bootstrap = f"{host}:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(NATIVE, 1, 1)])[NATIVE].result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(5):
            producer.produce(NATIVE, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
        sql(gateway, "CREATE DATABASE d VGROUPS 1")
        sql(gateway, "CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (g INT)")
        sql(gateway, f"CREATE TOPIC {TDENGINE} AS SELECT ts, v FROM d.m")
        sql(gateway, "INSERT INTO d.a USING d.m TAGS (1) VALUES (1000, 1) (2000, 2) (3000, 3)")
        yield gateway


def ask(gateway: Gateway, version: int, topic: str, leader_epoch: int,
        current_leader_epoch: int = -1) -> tuple[ErrorCode, int, int]:
    """(error, leader epoch, end offset) of OffsetForLeaderEpoch ``version`` for partition 0 of ``topic``."""
    request_cls, _ = kio_classes(23, version)
    request = build(request_cls, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "leader_epoch": leader_epoch, "current_leader_epoch": current_leader_epoch}]}]})
    with KafkaConnection(gateway.kafka_address) as conn:
        (topic_result,) = conn.request(request).topics
    (p,) = topic_result.partitions
    return p.error_code, getattr(p, "leader_epoch", -1), p.end_offset


@pytest.mark.parametrize("topic", [NATIVE, TDENGINE])
@pytest.mark.parametrize("version", [2, 3, 4])
def test_each_epoch_is_answered_as_kafkas_leader_epoch_cache_answers_it(gateway: Gateway, topic: str, version: int):
    end = 5 if topic == NATIVE else 3
    assert ask(gateway, version, topic, 0) == (ErrorCode.none, 0, end)
    assert ask(gateway, version, topic, 0, current_leader_epoch=0) == (ErrorCode.none, 0, end)
    assert ask(gateway, version, topic, 1) == (ErrorCode.none, -1, -1)  # above the latest: UNDEFINED
    assert ask(gateway, version, topic, -1) == (ErrorCode.none, -1, -1)  # no epoch: UNDEFINED (main answered 0/end)
    assert ask(gateway, version, topic, 0, current_leader_epoch=1)[0] == ErrorCode.unknown_leader_epoch
