"""Topic auto-creation is a switch (off by default): with it, a producer's Metadata request creates the topic."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from livewalgate import running_walgate


def produce_one(port: int, topic: str) -> list[KafkaError | None]:
    reports: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": 5000})
    p.produce(topic, b"v", on_delivery=lambda err, msg: reports.append(err))
    p.flush(15)
    return reports


def test_unknown_topics_are_not_created_by_default(tmp_path: Path) -> None:
    with running_walgate(tmp_path) as server:
        (err,) = produce_one(server.kafka_port, "nobody.made.me")
        assert err is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "x"})
        try:
            assert "nobody.made.me" not in c.list_topics(timeout=10).topics
        finally:
            c.close()


def test_with_the_switch_metadata_creates_a_kafka_native_topic(tmp_path: Path) -> None:
    with running_walgate(tmp_path, "--auto-create-topic-partitions", "3") as server:
        assert produce_one(server.kafka_port, "made.on.demand") == [None]
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "x"})
        try:
            assert len(c.list_topics("made.on.demand", timeout=10).topics["made.on.demand"].partitions) == 3
            assert sum(c.get_watermark_offsets(TopicPartition("made.on.demand", p), timeout=10)[1]
                       for p in range(3)) == 1
        finally:
            c.close()
