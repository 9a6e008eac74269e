"""The engine is only touched on the storage thread (issue 13, "found by reading the code").

Handlers used to read engine state (the catalog's topics, partition counts) on the event loop while the storage
thread could be changing it: a concurrent CreateTopics / DeleteTopics raised "dict changed size" or KeyError. Such a
race is rare by nature, so this test checks the invariant itself, deterministically: the gateway runs in-process
with its engine wrapped so that every attribute read or method call made off the storage thread is recorded, and
real clients (confluent-kafka: admin, producer, a classic and a KIP-848 consumer group; kafka-python's admin for
OffsetDelete) and the HTTP API exercise every handler family. Not one access may come from another thread. Handlers cannot even try: the group service
hands its offset store (and through it the engine) only to functions it runs on the storage thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway import server as server_module
from walgate.gateway.config import Config
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.server import Gateway
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic  # noqa: E402

kafka = pytest.importorskip("kafka")  # kafka-python: the only client here sending OffsetDelete
from kafka.admin import KafkaAdminClient  # noqa: E402

STORAGE_THREAD = "walgate-storage"


class StorageOnly:
    """An engine whose every use off the storage thread is recorded in ``violations`` (setting attributes is the
    gateway's wiring at start-up, before anything runs concurrently)."""

    def __init__(self, engine: Engine, violations: list[str]) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_violations", violations)

    def _check(self, what: str) -> None:
        thread = threading.current_thread().name
        if not thread.startswith(STORAGE_THREAD):
            where = "".join(traceback.format_stack(limit=6)[:-2])
            self._violations.append(f"engine.{what} on thread {thread}:\n{where}")

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._engine, name)
        if not callable(value):
            self._check(name)
            return value

        def checked(*args: Any, **kwargs: Any) -> Any:
            self._check(f"{name}()")
            return value(*args, **kwargs)

        return checked

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._engine, name, value)


def sql(http: str, statement: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{http}/rest/sql", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def consume(config: dict[str, Any], topic: str, want: int) -> Consumer:
    consumer = Consumer({**config, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 60
    while got < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    assert got == want, f"{config['group.id']} read {got} of {want} records of {topic}"
    consumer.commit(asynchronous=False)
    return consumer


def clients(bootstrap: str, http: str) -> None:
    """Every handler family, driven by unmodified clients."""
    sql(http, "CREATE DATABASE st VGROUPS 2")
    sql(http, "CREATE STABLE st.meters (ts TIMESTAMP, current DOUBLE) TAGS (location VARCHAR(16))")
    sql(http, "CREATE TOPIC rows_in AS STABLE st.meters")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("native", 2)])["native"].result(30)
    admin.create_partitions([NewPartitions("native", 3)])["native"].result(30)
    [configs] = admin.describe_configs([ConfigResource("topic", "native")]).values()
    assert configs.result(30)["cleanup.policy"].value == "delete"

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(6):
        producer.produce("native", value=b"v%d" % i, partition=i % 3)
        producer.produce("rows_in", key=b"d%d" % i, value=json.dumps({"current": i, "location": "SF"}).encode())
    assert producer.flush(30) == 0

    base = {"bootstrap.servers": bootstrap}
    classic = consume({**base, "group.id": "classic"}, "native", 6)
    assert [tp.offset for tp in classic.committed([TopicPartition("native", p) for p in range(3)], 30)] == [2, 2, 2]
    times = classic.offsets_for_times([TopicPartition("native", 0, 0)], 30)
    assert times[0].offset == 0
    classic.close()
    kip848 = consume({**base, "group.id": "kip848", "group.protocol": "consumer"}, "rows_in", 6)
    described = admin.describe_consumer_groups(["kip848", "classic"])
    assert {g: f.result(30).group_id for g, f in described.items()} == {"kip848": "kip848", "classic": "classic"}
    kip848.close()
    assert {g.group_id for g in admin.list_consumer_groups().result(30).valid} >= {"classic", "kip848"}
    [deleted] = admin.delete_records([TopicPartition("native", 0, 1)]).values()
    assert deleted.result(30).low_watermark == 1
    legacy = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)  # OffsetDelete
    try:
        gone = legacy.delete_group_offsets("classic", [kafka.TopicPartition("native", 2)])
    finally:
        legacy.close()
    assert [(tp.partition, error.errno) for tp, error in gone.items()] == [(2, 0)]
    admin.delete_consumer_groups(["classic"])["classic"].result(30)
    admin.delete_topics(["native"])["native"].result(30)
    assert sql(http, "SHOW TOPICS")["rows"] == 1
    assert sql(http, "SELECT COUNT(*) FROM st.meters")["data"] == [[6]]  # prepared here, run in a query worker


async def test_handlers_touch_the_engine_only_on_the_storage_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    violations: list[str] = []

    class Wrapped:
        @staticmethod
        def open(*args: Any, **kwargs: Any) -> StorageOnly:
            return StorageOnly(Engine.open(*args, **kwargs), violations)

    monkeypatch.setattr(server_module, "Engine", Wrapped)
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, group_initial_rebalance_delay_ms=0,
                    group_consumer_heartbeat_interval_ms=500)
    async with Gateway(config) as gateway:
        host, port = gateway.http_address
        await asyncio.to_thread(clients, f"127.0.0.1:{gateway.kafka_address[1]}", f"http://{host}:{port}")
    assert not violations, f"{len(violations)} engine uses off the storage thread; the first:\n{violations[0]}"


def test_the_group_service_exposes_neither_the_engine_nor_the_offset_store(tmp_path: Path) -> None:
    storage = StorageThread()
    try:
        engine = Engine.open(tmp_path / "data")
        service = GroupService(engine, storage)
        for owner in (service, EngineOffsetStore(engine)):
            public = {name: value for name, value in vars(owner).items() if not name.startswith("_")}
            assert not [name for name, value in public.items() if isinstance(value, (Engine, EngineOffsetStore))]
        service.close()
        engine.close()
    finally:
        storage.shutdown()
