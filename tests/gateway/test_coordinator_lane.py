"""Issue 23's acceptance test for the coordinator lane: a slow storage-thread call does not delay the group
coordinator's answers.

A real client (aiokafka, in the test's loop) joins a group on an in-process gateway and consumes one record; then a
storage-thread call that blocks on an Event the test holds occupies the storage thread, and the consumer commits an
offset (OffsetCommit) and sends its heartbeats. With the coordinators on a lane of their own the commit is answered
while the Event is still held (ordering: the answer comes before the release); on a node where the coordinators run
on the storage thread it waits behind the blocked call. The wait for the answer is bounded only so that a node
without the lane fails instead of hanging; nothing is asserted about speed.

Marked ``xfail(strict=True)`` until the coordinators have their lane (issue 23): it fails today (the commit waits
behind the blocked call), and an unexpected pass fails the run, so whoever lands the lane removes the marker.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.structs import OffsetAndMetadata  # noqa: E402

BOUND_S = 10.0
"""How long the commit may wait behind the blocked storage thread before the test calls it blocked (a bound, not a
speed: an answered commit comes in milliseconds)."""


async def test_offset_commit_is_answered_while_the_storage_thread_is_busy(tmp_path: Path) -> None:
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        host, port = gateway.kafka_address
        bootstrap = f"{host}:{port}"
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("lane", 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait("lane", b"one", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("lane", bootstrap_servers=bootstrap, group_id="lane-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=30_000, heartbeat_interval_ms=500)
        await consumer.start()
        try:
            record = await asyncio.wait_for(consumer.getone(), 60)
            tp = TopicPartition(record.topic, record.partition)
            release = threading.Event()
            answered_while_held: list[bool] = []
            busy = asyncio.create_task(gateway._storage.call(release.wait, 120))  # the storage thread is busy
            try:
                await asyncio.sleep(0)  # the blocking call is submitted first
                commit = asyncio.create_task(consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "")}))
                done, _ = await asyncio.wait({commit}, timeout=BOUND_S)
                answered_while_held.append(commit in done and not release.is_set())
            finally:
                release.set()
                await busy
            await commit
            assert answered_while_held == [True], "OffsetCommit waited behind a blocked storage-thread call"
            assert await consumer.committed(tp) == record.offset + 1
        finally:
            await consumer.stop()
