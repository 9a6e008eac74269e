"""confluent-kafka (librdkafka) against walgate's ACLs: sets them up as a super user, or meets them as one who is not.

Usage: ck_acls.py BOOTSTRAP setup | denied

``setup``: AdminClient.create_topics ``open`` and ``secret``, then create_acls: User:ANONYMOUS may Write and Read
topic ``open`` and Read group ``readers``; prints ``acls`` (what describe_acls lists). ``denied``: a producer
writes to ``open`` and to ``secret``, list_topics, create_topics ``new``, a consumer of ``open`` in group
``strangers``; prints one event per outcome with librdkafka's error name. Exit 2 on an unexpected exception.
"""

from __future__ import annotations

import sys
import time

from common import emit, fail
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

ME = "User:ANONYMOUS"


def setup(admin: AdminClient) -> None:
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in ("open", "secret")]).values():
        future.result(30)
    acls = [AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, ME, "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.READ)]
    acls.append(AclBinding(ResourceType.GROUP, "readers", ResourcePatternType.LITERAL, ME, "*", AclOperation.READ,
                           AclPermissionType.ALLOW))
    for future in admin.create_acls(acls).values():
        future.result(30)
    listed = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                  AclOperation.ANY, AclPermissionType.ANY)).result(30)
    emit("acls", acls=sorted([b.restype.name, b.name, b.operation.name, b.permission_type.name] for b in listed))


def denied(bootstrap: str, admin: AdminClient) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000})
    for topic in ("open", "secret"):
        outcome: list[str] = []
        producer.produce(topic, b"v", callback=lambda err, _msg, out=outcome: out.append(err.name() if err else "NONE"))
        producer.flush(30)
        emit("produced", topic=topic, error=outcome[0] if outcome else "no delivery report")
    emit("listed", topics=sorted(admin.list_topics(timeout=15).topics))
    try:
        admin.create_topics([NewTopic("new", 1, 1)])["new"].result(30)
        emit("created", error="NONE")
    except KafkaException as exc:
        emit("created", error=exc.args[0].name())
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strangers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["open"])
    deadline, error = time.monotonic() + 30, "no error"
    while time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
            error = msg.error().name()
            break
    consumer.close()
    emit("consumed", error=error)


def main() -> None:
    bootstrap, mode = sys.argv[1], sys.argv[2]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        setup(admin) if mode == "setup" else denied(bootstrap, admin)
    except Exception as exc:  # noqa: BLE001 - reported as an event
        fail(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
