"""Producers that keep several requests in flight on one connection, against a factor-3 topic on a 3-node cluster
(walgate/gateway/kafka/answer_order.py: a connection's next Produce requests are appended while the first waits for
the high watermark, answered in request order).

confluent-kafka at librdkafka's defaults (acks=all, no idempotence: up to a million requests in flight, its batches
shrinking while acknowledgements take a replication round) and kafka-python (5 in flight, no idempotence) each send
:data:`RECORDS` records round-robin over 3 partitions whose leaders are the three nodes (the cluster and nodes of
tests/jepsen/replicated_workload.py: ``replication.enable=true``, one etcd member). Every record is acknowledged
without error, and a consumer reads each partition holding exactly the records sent to it, once each, in the order
they were sent: an answer written out of request order, or a later request appended before an earlier one, would
break that order or the offsets the producer was told.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from etcd_cluster import etcd_cluster  # noqa: E402
from replicated_workload import ready_nodes, wait_until  # noqa: E402

RECORDS = 6_000
PARTITIONS = 3


def _topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                        request_timeout=60)[name].result(timeout=90)


def _leaders(bootstrap: str, topic: str) -> list[int]:
    partitions = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions
    return [int(partitions[p].leader) if p in partitions else -1 for p in range(PARTITIONS)]


def _send_confluent(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) per partition as the delivery reports gave them; librdkafka's defaults but the bootstrap."""
    producer = Producer({"bootstrap.servers": bootstrap})
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    errors: list[str] = []

    def delivered(err, msg) -> None:  # noqa: ANN001 - confluent-kafka's callback
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, b"%06d" % i, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0, "records left unacknowledged"
    assert not errors, errors[:5]
    return acked


def _send_kafka_python(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5)
    futures = [(producer.send(topic, b"%06d" % i, partition=i % PARTITIONS)) for i in range(RECORDS)]
    producer.flush(120)
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for i, future in enumerate(futures):
        meta = future.get(timeout=60)
        acked[meta.partition].append((meta.offset, b"%06d" % i))
    producer.close(10)
    return acked


def _read(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    read: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for _ in range(600):  # (bounded: 0.5 s polls)
        if sum(map(len, read.values())) >= RECORDS:
            break
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            read[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()
    return read


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_pipelined_producers_get_every_record_acknowledged_once_in_order(tmp_path, client):
    with etcd_cluster(tmp_path / "etcd", 1) as etcd, ready_nodes(etcd, tmp_path) as nodes:
        bootstrap = nodes.bootstrap()
        topic = f"pipelined-{client}"
        _topic(bootstrap, topic)
        wait_until("every partition led", lambda: -1 not in _leaders(bootstrap, topic))
        acked = (_send_confluent if client == "confluent-kafka" else _send_kafka_python)(bootstrap, topic)
        read = _read(bootstrap, topic)
    for p in range(PARTITIONS):
        sent = [b"%06d" % i for i in range(p, RECORDS, PARTITIONS)]
        assert [v for _, v in read[p]] == sent, f"partition {p}: not every record once, in the order sent"
        assert [o for o, _ in read[p]] == list(range(len(sent)))
        assert sorted(acked[p]) == read[p], f"partition {p}: an acknowledged offset holds another record"
