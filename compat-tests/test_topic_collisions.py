"""Kafka's topic name collisions, with real clients: two topic names that differ only in ``.`` against ``_``
(``alice.a`` beside ``alice_a``) cannot both exist, as Kafka's ``Topic.hasCollision`` rules (their metric names would
be one). One walgate with auto-creation on:

* the Java Admin (kafka-clients 4.3) and confluent-kafka's AdminClient: ``createTopics`` of the second name fails with
  InvalidTopicException / TOPIC_EXCEPTION and Kafka's message ``Topic 'alice_a' collides with existing topic:
  alice.a``; a name with neither character and an unrelated one are created;
* auto-creation: a confluent-kafka producer to the colliding name gets TOPIC_EXCEPTION (Metadata's
  INVALID_TOPIC_EXCEPTION), not a created topic nor a timeout;
* TDengine's ``CREATE TOPIC`` (it makes Kafka topics too) is refused the same way, and a Kafka topic that collides with
  a TDengine topic is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from compat_brokers import Walgate, serving_walgate
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


@pytest.fixture(scope="module")
def autocreating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    with serving_walgate(tmp_path_factory.mktemp("collisions"), "--auto-create-topic-partitions", "1") as walgate:
        yield walgate


def _create(bootstrap: str, name: str) -> KafkaError | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the future is done
    future = admin.create_topics([NewTopic(name, 1, 1)])[name]
    try:
        future.result(30)
    except KafkaException as e:
        return e.args[0]
    return None


def test_java_admin_refuses_a_colliding_name_with_kafkas_message(autocreating: Walgate, java) -> None:
    run = java("CreateTopics.java", autocreating.bootstrap, "alice.a", "alice_a", "alice-a", "alice.b", timeout=120)
    got = {d["topic"]: [d["error"], d["message"]] for d in map(json.loads, run.stdout.splitlines())}
    assert got == {"alice.a": [None, None],
                   "alice_a": ["InvalidTopicException", "Topic 'alice_a' collides with existing topic: alice.a"],
                   "alice-a": [None, None], "alice.b": [None, None]}, run.describe()


def test_confluent_kafka_admin_and_auto_creation_refuse_a_colliding_name(autocreating: Walgate) -> None:
    assert _create(autocreating.bootstrap, "bob_b") is None
    error = _create(autocreating.bootstrap, "bob.b")
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error
    assert error.str() == "Topic 'bob.b' collides with existing topic: bob_b", error
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": autocreating.bootstrap, "message.timeout.ms": 120_000})
    producer.produce("bob.b", b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(60)  # well under message.timeout.ms: only the broker's answer ends it in time
    assert len(reports) == 1 and reports[0] is not None and reports[0].code() == KafkaError.TOPIC_EXCEPTION, reports
    topics = AdminClient({"bootstrap.servers": autocreating.bootstrap}).list_topics(timeout=10).topics
    assert "bob_b" in topics and "bob.b" not in topics
    assert "Traceback" not in autocreating.log()


def test_tdengine_create_topic_collides_both_ways(autocreating: Walgate) -> None:
    autocreating.sql("CREATE DATABASE coll VGROUPS 1")
    autocreating.sql("CREATE STABLE coll.m (ts TIMESTAMP, v INT) TAGS (g INT)")
    assert _create(autocreating.bootstrap, "carol.c") is None
    with pytest.raises(AssertionError, match="Topic 'carol_c' collides with existing topic: carol.c"):
        autocreating.sql("CREATE TOPIC carol_c AS SELECT ts, v FROM coll.m")
    assert autocreating.sql("CREATE TOPIC dave_d AS SELECT ts, v FROM coll.m")["code"] == 0
    error = _create(autocreating.bootstrap, "dave.d")
    assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, error
    assert error.str() == "Topic 'dave.d' collides with existing topic: dave_d", error
