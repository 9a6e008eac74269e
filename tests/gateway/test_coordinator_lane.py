"""Issue 23's acceptance test for the coordinator lane: a slow storage-thread call does not delay the group
coordinator's answers.

A real client (aiokafka, in the test's loop) joins a group on an in-process gateway and consumes one record; then a
storage-thread call that blocks on an Event the test holds occupies the storage thread, and the consumer commits an
offset (OffsetCommit) and sends its heartbeats. With the coordinators on a lane of their own the commit is answered
while the Event is still held (ordering: the answer comes before the release); on a node where the coordinators run
on the storage thread it waits behind the blocked call. The wait for the answer is bounded only so that a node
without the lane fails instead of hanging; nothing is asserted about speed.

The same for a classic group's Heartbeat and JoinGroup (kio's requests on a plain connection, in a thread).

The lane is observed as the storage thread is: a scrape of ``/metrics`` counts the calls a JoinGroup made on it
under ``lane="coordinator"`` (and its queue depth), while the storage thread's series keep their names.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from gateway_helpers import KafkaConnection, build, kio_classes
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.structs import OffsetAndMetadata  # noqa: E402

T = TypeVar("T")

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


async def answered_while_the_storage_thread_is_busy(gateway: Gateway, call: Callable[[], T]) -> tuple[bool, T]:
    """Run blocking ``call`` (a client's requests, in a thread) while a storage-thread call waits on an Event this
    holds: (whether ``call`` returned before the Event was set, what it returned)."""
    release = threading.Event()
    busy = asyncio.create_task(gateway._storage.call(release.wait, 120))
    try:
        await asyncio.sleep(0)  # the blocking call is submitted first
        task = asyncio.create_task(asyncio.to_thread(call))
        done, _ = await asyncio.wait({task}, timeout=BOUND_S)
        held = task in done and not release.is_set()
    finally:
        release.set()
        await busy
    return held, await task


def request(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def join(conn: KafkaConnection, group: str) -> Any:
    """JoinGroup v5 (a first join learns its member id, the second joins): the second's response."""
    values: dict[str, Any] = {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                              "member_id": "", "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}]}
    first = request(conn, 11, 5, values)
    assert first.error_code == ErrorCode.member_id_required
    return request(conn, 11, 5, {**values, "member_id": first.member_id})


def lane_config(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, group_initial_rebalance_delay_ms=0)


async def test_join_group_is_answered_while_the_storage_thread_is_busy(tmp_path: Path) -> None:
    async with Gateway(lane_config(tmp_path)) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            held, joined = await answered_while_the_storage_thread_is_busy(gateway, lambda: join(conn, "lane-join"))
        assert held, "JoinGroup waited behind a blocked storage-thread call"
        assert joined.error_code == ErrorCode.none and joined.leader == joined.member_id


async def test_heartbeat_is_answered_while_the_storage_thread_is_busy(tmp_path: Path) -> None:
    async with Gateway(lane_config(tmp_path)) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            joined = await asyncio.to_thread(join, conn, "lane-beat")
            member = {"group_id": "lane-beat", "generation_id": joined.generation_id, "member_id": joined.member_id}
            synced = await asyncio.to_thread(request, conn, 14, 3, {
                **member, "assignments": [{"member_id": joined.member_id, "assignment": b""}]})
            assert synced.error_code == ErrorCode.none
            held, beat = await answered_while_the_storage_thread_is_busy(
                gateway, lambda: request(conn, 12, 3, member))
        assert held, "Heartbeat waited behind a blocked storage-thread call"
        assert beat.error_code == ErrorCode.none


def scrape(gateway: Gateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` parsed by prometheus_client's own parser: (name, sorted labels) -> value."""
    host, port = gateway.http_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    samples: list[Sample] = [s for family in text_string_to_metric_families(text) for s in family.samples]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}


COORDINATOR = (("lane", "coordinator"),)
DRAIN_SCRAPES = 100
"""Bound on the scrapes (0.1 s apart) waiting for the coordinator lane's queue to drain."""
STORAGE = (("lane", "storage"),)


async def test_a_scrape_counts_the_coordinator_lanes_calls(tmp_path: Path) -> None:
    async with Gateway(lane_config(tmp_path)) as gateway:
        before = await asyncio.to_thread(scrape, gateway)
        with KafkaConnection(gateway.kafka_address) as conn:
            joined = await asyncio.to_thread(join, conn, "lane-metrics")
        assert joined.error_code == ErrorCode.none
        after = await asyncio.to_thread(scrape, gateway)
        for _ in range(DRAIN_SCRAPES):  # the depth is what is queued at the scrape: a group-commit round or a
            if after["walgate_lane_queue_depth", COORDINATOR] == 0:  # group timer may be; the lane drains to 0
                break
            await asyncio.sleep(0.1)
            after = await asyncio.to_thread(scrape, gateway)
    calls = "walgate_lane_call_seconds_count", COORDINATOR
    # at least the first scrape's read of the groups (counted after its histograms were rendered) and the two
    # JoinGroup requests (8 when measured: a join also arms and runs the group's timers there)
    assert after[calls] - before[calls] >= 3
    assert after["walgate_lane_call_queue_seconds_count", COORDINATOR] > before["walgate_lane_call_queue_seconds_count",
                                                                                COORDINATOR]
    assert after["walgate_lane_queue_depth", COORDINATOR] == 0
    # the storage thread: its own lane label, and its names from before the lanes still there (a storage call is
    # counted under both, the old names last, and rendered first: never more than the lane's)
    assert after["walgate_lane_call_seconds_count", STORAGE] >= after["walgate_storage_call_seconds_count", ()] > 0
    assert after["walgate_lane_queue_depth", STORAGE] == after["walgate_storage_queue_depth", ()]
