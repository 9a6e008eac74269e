"""confluent-kafka (librdkafka) round trip over a secured listener: create the topic, produce, read it back.

Usage: ck_secure.py BOOTSTRAP TOPIC COUNT [--size BYTES] [--timeout 30] [-X KEY=VALUE ...] (security.protocol,
ssl.*, sasl.* go in -X).

Creates TOPIC (1 partition; an existing one is fine), produces COUNT records (value i: BYTES bytes of the digit
i % 10, key "k<i>"), then assigns partition 0 from the beginning and reads COUNT records. Prints ``brokers``
(the Metadata answer: host:port of each broker), ``produced`` (count), ``consumed`` (count, and whether every
value came back as produced) and ``summary``. The first error the client reports (librdkafka's error callback:
a failed TLS handshake or authentication, a transport failure) is an ``error`` event (name, message) and exit
code 2.
"""

from __future__ import annotations

import argparse
import time

from common import emit, fail


def main() -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("count", type=int)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("-X", dest="config", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    errors: list[str] = []

    def on_error(err) -> None:  # noqa: ANN001
        errors.append(f"{err.name()}: {err.str()}")
        emit("error", name=err.name(), message=err.str())

    conf = {"bootstrap.servers": args.bootstrap, "socket.timeout.ms": 10000, "error_cb": on_error}
    conf.update(kv.split("=", 1) for kv in args.config)
    started = time.monotonic()
    try:
        admin = AdminClient(conf)
        metadata = admin.list_topics(timeout=args.timeout / 3)
        emit("brokers", brokers=[f"{b.host}:{b.port}" for b in metadata.brokers.values()])
        if args.topic not in metadata.topics:
            admin.create_topics([NewTopic(args.topic, 1)])[args.topic].result(args.timeout / 3)
    except KafkaException as exc:
        fail(errors[0] if errors else str(exc))
    values = [str(i % 10).encode() * args.size for i in range(args.count)]
    producer = Producer(conf | {"acks": "all"})
    for i, value in enumerate(values):
        producer.produce(args.topic, value, f"k{i}".encode(), partition=0)
    left = producer.flush(args.timeout / 3)
    if left:
        fail(errors[0] if errors else f"{left} records not delivered")
    emit("produced", count=len(values))
    consumer = Consumer(conf | {"group.id": "ck-secure", "enable.auto.commit": False})
    consumer.assign([TopicPartition(args.topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + args.timeout / 3
    while len(got) < len(values) and time.monotonic() < deadline:
        for message in consumer.consume(len(values) - len(got), timeout=1):
            if message.error():
                fail(f"{message.error().name()}: {message.error().str()}")
            got.append(message.value())
    consumer.close()
    emit("consumed", count=len(got), values_ok=got == values)
    emit("summary", seconds=round(time.monotonic() - started, 3))


if __name__ == "__main__":
    main()
