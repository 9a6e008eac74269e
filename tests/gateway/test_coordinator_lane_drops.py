"""Issue 23: a topic's drop and its committed offsets' deletion across the two lanes.

The storage lane drops the topic's catalog record, publishes the topics snapshot without it, then deletes the
topic's committed offsets on the coordinator lane (waiting for it). Ordering, not timing, is checked: the test holds
the coordinator lane with a call blocked on an Event, queues the requests behind it (watching the lanes' queues), then
releases it. A commit that runs after the drop's publication is refused and leaves no offset; a topic re-created
behind the deletion keeps what is committed to it afterwards, across a restart. A real SIGKILL between the catalog
record and the deletion leaves offsets of a topic that is gone: the next start deletes them, and only them (a topic
whose catalog record was damaged is out of service, not dropped: ``walgate repair`` may bring it back, so its offsets
stay).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, kio_classes
from kio.schema.errors import ErrorCode

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine

GROUP = "drops"
WATCH_LIMIT = 10_000
"""Bound on the polls waiting for a request to reach a lane's queue (each 10 ms)."""


def request(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def create(conn: KafkaConnection, topic: str) -> int:
    response = request(conn, 19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                     "timeout": 30_000})
    return int(response.topics[0].error_code)


def delete(conn: KafkaConnection, topic: str) -> int:
    response = request(conn, 20, 4, {"topic_names": [topic], "timeout": 30_000})
    return int(response.responses[0].error_code)


def commit(conn: KafkaConnection, topic: str, offset: int) -> int:
    response = request(conn, 8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                                    "topics": [{"name": topic, "partitions": [
                                        {"partition_index": 0, "committed_offset": offset}]}]})
    return int(response.topics[0].partitions[0].error_code)


def fetched(conn: KafkaConnection, topic: str) -> int:
    response = request(conn, 9, 7, {"group_id": GROUP, "topics": [{"name": topic, "partition_indexes": [0]}]})
    return int(response.topics[0].partitions[0].committed_offset)


async def queued(lane: StorageThread, count: int) -> None:
    """Wait until ``lane`` has ``count`` calls queued (bounded)."""
    for _ in range(WATCH_LIMIT):
        if lane.queued >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{lane.name}: {lane.queued} calls queued, never {count}")


async def unpublished(gateway: Gateway, topic: str) -> None:
    """Wait until the topics snapshot no longer has ``topic`` (bounded): the drop is past its publication, waiting
    for its offsets' deletion on the coordinator lane (a call queued there alone does not say whose it is: the
    group commit's rounds on the coordinator logs run there too)."""
    engine = gateway._engine
    assert engine is not None
    for _ in range(WATCH_LIMIT):
        if topic not in engine.topics():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic!r} is still in the published topics snapshot")


def in_thread(address: tuple[str, int], fn: Callable[..., int], *args: Any) -> asyncio.Task[int]:
    """``fn(conn, *args)`` on a connection of its own, in a thread."""
    def run() -> int:
        with KafkaConnection(address) as conn:
            return fn(conn, *args)
    return asyncio.create_task(asyncio.to_thread(run))


def config(data: Path) -> Config:
    return Config(data_dir=data, kafka_port=0, http_port=0)


@contextlib.asynccontextmanager
async def committed_then_held(gateway: Gateway) -> AsyncIterator[StorageThread]:
    """Topic t created and offset 1 committed to it; then, inside, the coordinator lane held by a call blocked on an
    Event, released on leaving."""
    with KafkaConnection(gateway.kafka_address) as conn:
        assert await asyncio.to_thread(create, conn, "t") == ErrorCode.none
        assert await asyncio.to_thread(commit, conn, "t", 1) == ErrorCode.none
    lane, release = gateway._coordinator, threading.Event()
    held = asyncio.create_task(lane.call(release.wait, 120))
    try:
        await asyncio.sleep(0)
        yield lane
    finally:
        release.set()
        await held


async def test_a_commit_queued_behind_a_drop_is_refused_and_leaves_no_offset(tmp_path: Path) -> None:
    async with Gateway(config(tmp_path / "data")) as gateway:
        address = gateway.kafka_address
        async with committed_then_held(gateway) as lane:
            late_commit = in_thread(address, commit, "t", 5)
            await queued(lane, 1)  # the commit waits on the coordinator lane
            dropped = in_thread(address, delete, "t")
            await queued(lane, 2)  # the drop published its snapshot and waits for its offsets' deletion
        assert await dropped == ErrorCode.none
        assert await late_commit == ErrorCode.unknown_topic_or_partition  # it ran after the drop's publication
        with KafkaConnection(address) as conn:
            assert await asyncio.to_thread(create, conn, "t") == ErrorCode.none
            assert await asyncio.to_thread(fetched, conn, "t") == -1  # nothing of the dropped topic's offsets


async def test_a_topic_recreated_behind_the_deletion_keeps_its_new_offsets(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Gateway(config(data)) as gateway:
        address = gateway.kafka_address
        async with committed_then_held(gateway) as lane:
            dropped = in_thread(address, delete, "t")
            await unpublished(gateway, "t")
            await queued(lane, 1)  # the deletion waits on the coordinator lane (the storage lane waits for it)
            recreated = in_thread(address, create, "t")
            await queued(gateway._storage, 1)  # the re-creation waits on the storage lane, behind the deletion
        assert await dropped == ErrorCode.none
        assert await recreated == ErrorCode.none
        with KafkaConnection(address) as conn:
            assert await asyncio.to_thread(fetched, conn, "t") == -1
            assert await asyncio.to_thread(commit, conn, "t", 7) == ErrorCode.none
    async with Gateway(config(data)) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            assert await asyncio.to_thread(fetched, conn, "t") == 7


KILLED_BETWEEN = """
import os, signal, sys
from pathlib import Path
from walgate.storage.engine import Engine

engine = Engine.open(Path(sys.argv[1]))
engine.create_kafka_topic("t", 1, {})
engine.create_kafka_topic("kept", 1, {})
engine.create_kafka_topic("damaged", 1, {})
assert engine.commit_offsets("g", [("t", 0, 5, -1, None)], 1) == [None]
assert engine.commit_offsets("g", [("kept", 0, 3, -1, None)], 1) == [None]
assert engine.commit_offsets("g", [("damaged", 0, 9, -1, None)], 1) == [None]
engine.offsets.delete = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)  # after the catalog record
engine.drop_topic("t")
"""


async def test_a_kill_between_the_drop_and_the_deletion_is_finished_at_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    killed = subprocess.run([sys.executable, "-c", KILLED_BETWEEN, str(data)], capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    catalog = data / "catalog.log"
    raw = bytearray(catalog.read_bytes())
    at = raw.index(b'"create_kafka_topic","name":"damaged"') + len(b'"create_kafka_topic","name":"')
    raw[at] ^= 0x01  # the record's checksum fails: "damaged" is out of service until a repair
    catalog.write_bytes(bytes(raw))
    assert b'{"op":"drop_db","name":"kafka_t"}' in raw  # the drop is recorded; its offsets' deletion never ran
    async with Gateway(config(data)):
        pass
    assert "topic 't' was dropped before its committed offsets were deleted" in caplog.text
    engine = Engine.open(data)
    try:
        assert "damaged" not in engine.catalog.topics  # out of service: its offsets stay for a repair
        assert sorted((t, c.offset) for _, t, _, c in engine.all_committed()) == [("damaged", 9), ("kept", 3)]
    finally:
        engine.close()
