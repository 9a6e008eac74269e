"""Topic configs a producer feels (issue 5): LogAppendTime stamping and max.message.bytes, on walgate and Tansu."""

from __future__ import annotations

import time
import uuid

from compat_brokers import xfail_on_tansu
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap: str, configs: dict[str, str]) -> str:
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the future resolves
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=30)
    return topic


def send(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "message.max.bytes": 10_000_000})
    p.produce(topic, value, timestamp=1_000_000, on_delivery=lambda err, msg: reports.append(err))
    p.flush(20)
    assert len(reports) == 1
    return reports[0]


def test_log_append_time_topics_stamp_records_with_the_append_time(broker, request):
    if broker.name == "tansu":
        xfail_on_tansu(request, "ignores message.timestamp.type=LogAppendTime (FINDINGS.md)")
    topic = create(broker.bootstrap, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    assert send(broker.bootstrap, topic, b"stamped") is None
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cfg"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        msg = None
        while msg is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                msg = m
        assert msg is not None and msg.value() == b"stamped"
        kind, ts = msg.timestamp()
        assert kind == 2 and before - 1000 <= ts <= time.time() * 1000 + 1000, msg.timestamp()  # LOG_APPEND_TIME
    finally:
        c.close()


def test_a_record_above_max_message_bytes_is_refused(broker, request):
    if broker.name == "tansu":
        xfail_on_tansu(request, "ignores max.message.bytes (FINDINGS.md)")
    topic = create(broker.bootstrap, {"max.message.bytes": "2000"})
    err = send(broker.bootstrap, topic, b"x" * 5000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert send(broker.bootstrap, topic, b"x" * 100) is None
