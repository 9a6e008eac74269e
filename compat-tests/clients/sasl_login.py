"""Log in over SASL with one Python client library, produce one record to partition 0 and read it back.

Usage: sasl_login.py ck|kp|aio BOOTSTRAP MECHANISM USER PASSWORD TOPIC [CA]

Over SASL_PLAINTEXT; with CA (a PEM file of the CA certificate to trust), over SASL_SSL.

Prints one JSON line: ``{"event": "ok", "library": ..., "value": <the value read back>}``, or, when the broker
refuses (a wrong password), ``{"event": "error", "library": ..., "name": <the client's own error name>, "message"}``;
exit code 0 either way (a hang is the test's timeout).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import uuid


def emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


def confluent(bootstrap: str, mechanism: str, user: str, password: str, topic: str, value: str,
              ca: str | None) -> str:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    errors: list[KafkaError] = []
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": ca} if ca else {"security.protocol": "SASL_PLAINTEXT"}
    common = {"bootstrap.servers": bootstrap, "sasl.mechanism": mechanism, "sasl.username": user,
              "sasl.password": password, "error_cb": errors.append, **tls}
    producer = Producer(common)
    producer.produce(topic, value.encode(), partition=0)
    deadline = time.monotonic() + 15
    while len(producer) and time.monotonic() < deadline:  # delivered, or refused: librdkafka's error_cb says so
        producer.poll(0.1)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            raise KafkaException(auth[0])
    assert not len(producer), f"undelivered: {errors}"
    consumer = Consumer({**common, "group.id": f"sasl-{uuid.uuid4()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while True:
            msg = consumer.poll(15)
            assert msg is not None, "no record within 15 s"
            if msg.error() is None and msg.value().decode() == value:
                return value
    finally:
        consumer.close()


def kafka_python(bootstrap: str, mechanism: str, user: str, password: str, topic: str, value: str,
                 ca: str | None) -> str:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    tls = {"security_protocol": "SASL_SSL", "ssl_cafile": ca} if ca else {"security_protocol": "SASL_PLAINTEXT"}
    common = {"bootstrap_servers": bootstrap, "sasl_mechanism": mechanism, "sasl_plain_username": user,
              "sasl_plain_password": password, **tls}
    producer = KafkaProducer(**common, bootstrap_timeout_ms=5_000)
    producer.send(topic, value.encode(), partition=0).get(15)
    producer.close()
    consumer = KafkaConsumer(**common, consumer_timeout_ms=15000, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    try:
        for msg in consumer:
            if msg.value.decode() == value:
                return value
        raise AssertionError("no record within 15 s")
    finally:
        consumer.close()


async def aio(bootstrap: str, mechanism: str, user: str, password: str, topic: str, value: str,
              ca: str | None) -> str:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    tls = ({"security_protocol": "SASL_SSL", "ssl_context": create_ssl_context(cafile=ca)} if ca
           else {"security_protocol": "SASL_PLAINTEXT"})
    common = {"bootstrap_servers": bootstrap, "sasl_mechanism": mechanism, "sasl_plain_username": user,
              "sasl_plain_password": password, **tls}
    producer = AIOKafkaProducer(**common)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value.encode(), partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**common, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        async with asyncio.timeout(15):
            async for msg in consumer:
                if msg.value.decode() == value:
                    return value
        raise AssertionError("the topic ended")
    finally:
        await consumer.stop()


def main() -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)  # kafka-python logs a refused login, then times out
    library, bootstrap, mechanism, user, password, topic = sys.argv[1:7]
    ca = sys.argv[7] if len(sys.argv) > 7 else None
    value = f"hello from {library} over {mechanism}"
    try:
        if library == "ck":
            got = confluent(bootstrap, mechanism, user, password, topic, value, ca)
        elif library == "kp":
            got = kafka_python(bootstrap, mechanism, user, password, topic, value, ca)
        else:
            got = asyncio.run(aio(bootstrap, mechanism, user, password, topic, value, ca))
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the client's own error, reported for the test to judge
        name = exc.args[0].name() if library == "ck" and exc.args and hasattr(exc.args[0], "name") else type(exc).__name__
        emit(event="error", library=library, name=name, message=str(exc))
        return
    emit(event="ok", library=library, value=got)


if __name__ == "__main__":
    main()
