"""Each part of the engine is touched only by its owner lane (issue 13, "found by reading the code"; issue 23).

Handlers used to read engine state (the catalog's topics, partition counts) on the event loop while the storage
thread could be changing it: a concurrent CreateTopics / DeleteTopics raised "dict changed size" or KeyError. Since
issue 23 the node has two lanes: ``walgate-storage`` owns the engine (catalog, vnodes, topics),
``walgate-coordinator`` owns the coordinator log (``store.coordinator``: committed offsets, group records). Such a
race is rare by nature, so this test checks the invariant itself, deterministically: the gateway runs in-process
with its engine wrapped so that every attribute read or method call is checked against its owner lane (the storage
lane; on the coordinator lane only the entry points that reach the coordinator log, the published topics snapshot
or the locked producer ids), and its coordinator log wrapped so that every use off the coordinator lane is recorded;
real clients (confluent-kafka: admin, producer, a classic and a KIP-848 consumer group; kafka-python's admin for
OffsetDelete) and the HTTP API (SHOW CONSUMERS / SUBSCRIPTIONS, DROP CONSUMER GROUP) exercise every handler family.
Not one access may come from a lane that does not own it. Handlers cannot even try: the group service hands its
offset store (and through it the engine) only to functions it runs on the coordinator lane.
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
from gateway_helpers import KafkaConnection
from test_kafka_share_groups import acquired, call, earliest, join, share_ack, share_fetch, topic_with_records

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

from coordinator_admin import deleted_groups, described_groups  # noqa: E402

kafka = pytest.importorskip("kafka")  # kafka-python: the only client here sending OffsetDelete
from kafka.admin import KafkaAdminClient  # noqa: E402

STORAGE_THREAD = "walgate-storage"
COORDINATOR_THREAD = "walgate-coordinator"
ON_COORDINATOR_LANE = frozenset({
    # the coordinator log (their storage-lane callers reach it through the lane bridge)
    "commit_offsets", "committed", "delete_offsets", "all_committed",
    "write_group_records", "group_records", "coordinator_logs", "coordinator_partitions", "take_coordinator_unsynced",
    "topics",  # the published snapshot (immutable)
    "producer_ids",  # locked: both lanes allocate
    "data_dir", "damage_log", "syncs",  # the transaction log's open (at start)
    "share_state_log",  # share groups' durable state: the share coordinator is the coordinator lane's
    "clock",  # immutable: the share coordinator's expiry reads it
})
"""Engine entry points the coordinator lane may use."""
ANY_THREAD = frozenset({
    "topics",  # the published snapshot (immutable): CreateTopics reads it on the loop, and so do Produce, Fetch and
    # ListOffsets to name the vnodes they hold (Broker.call_on)
    "prepare_kafka_topic", "drop_prepared",  # a new topic's files, which no catalog record names yet (CreateTopics)
})
"""Engine entry points every thread may use."""


class OwnedBy:
    """An object whose every use off its owner lane(s) is recorded in ``violations`` (setting attributes is the
    gateway's wiring at start-up, before anything runs concurrently): the engine (the storage lane's, but for
    :data:`ON_COORDINATOR_LANE`, and :data:`ANY_THREAD` anywhere) or the coordinator log (the coordinator lane's)."""

    def __init__(self, target: Any, what: str, violations: list[str], owner: str,
                 also: tuple[str, frozenset[str]] = ("", frozenset()), anywhere: frozenset[str] = frozenset()) -> None:
        for name, value in (("_target", target), ("_what", what), ("_violations", violations), ("_owner", owner),
                            ("_also", also), ("_anywhere", anywhere)):
            object.__setattr__(self, name, value)

    def _check(self, what: str, name: str) -> None:
        thread = threading.current_thread().name
        if (thread.startswith(self._owner) or (thread.startswith(self._also[0] or "\0") and name in self._also[1])
                or name in self._anywhere):
            return
        where = "".join(traceback.format_stack(limit=6)[:-2])
        self._violations.append(f"{self._what}.{what} on thread {thread}:\n{where}")

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            self._check(name, name)
            return value

        def checked(*args: Any, **kwargs: Any) -> Any:
            self._check(f"{name}()", name)
            return value(*args, **kwargs)

        return checked

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


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
    described = described_groups(bootstrap, ["kip848", "classic"], 30)
    assert {g: d.group_id for g, d in described.items()} == {"kip848": "kip848", "classic": "classic"}
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
    assert {row[1] for row in sql(http, "SHOW CONSUMERS")["data"]} <= {"classic", "kip848"}
    assert any(row[1] == "classic" for row in sql(http, "SHOW SUBSCRIPTIONS")["data"])
    sql(http, "DROP CONSUMER GROUP IF EXISTS classic ON native")
    assert deleted_groups(bootstrap, ["classic"], 30) == {"classic": None}
    admin.delete_topics(["native"])["native"].result(30)
    assert sql(http, "SHOW TOPICS")["rows"] == 1
    assert sql(http, "SELECT COUNT(*) FROM st.meters")["data"] == [[6]]  # prepared here, run in a query worker


def share_clients(address: tuple[str, int]) -> None:
    """A share group's membership, fetch (its read on the storage lane), acknowledgement and offsets (kio's
    requests: the share coordinator on the coordinator lane)."""
    with KafkaConnection(address) as conn:
        topic_id = topic_with_records(conn, "queue", 2)
        earliest(conn, "workers")
        assert join(conn, "workers", "queue").error_code == 0
        assert acquired(share_fetch(conn, "workers", 0, topic_id)) == [(0, 1, 1)]
        assert share_ack(conn, "workers", 1, topic_id, 0, 1).error_code == 0
        [group] = call(conn, 90, 1, {"groups": [{"group_id": "workers", "topics": None}]}).groups
        assert [(p.start_offset, p.lag) for t in group.topics for p in t.partitions] == [(2, 0)]


async def test_each_part_is_touched_only_by_its_owner_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    violations: list[str] = []

    class Wrapped:
        @staticmethod
        def open(*args: Any, **kwargs: Any) -> OwnedBy:
            engine = Engine.open(*args, **kwargs)
            engine.store.coordinator = OwnedBy(engine.store.coordinator, "store.coordinator", violations,
                                               COORDINATOR_THREAD)  # type: ignore[assignment]
            return OwnedBy(engine, "engine", violations, STORAGE_THREAD, (COORDINATOR_THREAD, ON_COORDINATOR_LANE),
                           ANY_THREAD)

    monkeypatch.setattr(server_module, "Engine", Wrapped)
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, group_initial_rebalance_delay_ms=0,
                    group_consumer_heartbeat_interval_ms=500)
    async with Gateway(config) as gateway:
        host, port = gateway.http_address
        await asyncio.to_thread(clients, f"127.0.0.1:{gateway.kafka_address[1]}", f"http://{host}:{port}")
        await asyncio.to_thread(share_clients, gateway.kafka_address)
    assert not violations, f"{len(violations)} uses off the owner lane; the first:\n{violations[0]}"


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
