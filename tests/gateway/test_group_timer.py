"""The gateway's group timer (GroupService) on a real engine and storage thread.

A tick that raises is logged in one line and the timer keeps ticking (it used to stop for good, silently);
the timer's periodic cleanup drops empty groups that have no committed offsets in the engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.offsets import delete_groups
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka import deadline_timer
from walgate.gateway.kafka import groups as groups_module
from walgate.gateway.kafka.groups import GroupService, now_ms
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine

WAIT_S = 10.0


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[tuple[Engine, StorageThread]]:
    storage = StorageThread()
    engine = await storage.call(Engine.open, tmp_path / "data")
    try:
        yield engine, storage
    finally:
        await storage.call(engine.close)
        storage.shutdown()


async def _until(condition: Callable[[], bool]) -> bool:
    for _ in range(int(WAIT_S / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


async def test_a_tick_that_raises_is_logged_and_the_timer_keeps_ticking(engine, monkeypatch, caplog) -> None:
    monkeypatch.setattr(deadline_timer, "TICK_RETRY_S", 0.01)
    coordinator = GroupCoordinator(cleanup_interval_ms=10, now_ms=now_ms())  # a deadline every 10 ms
    service = GroupService(*engine, coordinator)
    ticks: list[int] = []
    tick = coordinator.tick

    def failing_once(now: int, **kwargs: Any) -> Any:
        ticks.append(now)
        if len(ticks) == 1:
            raise OSError("injected")
        return tick(now, **kwargs)

    coordinator.tick = failing_once  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.INFO, logger="walgate.groups"):
            await service.run(lambda: (None, []))  # any coordinator call arms the timer
            assert await _until(lambda: len(ticks) >= 3)
        failed = [r for r in caplog.records if "group timer tick failed" in r.getMessage()]
        assert [(r.levelno, r.exc_info) for r in failed] == [(logging.ERROR, None)]
        assert "OSError: injected" in failed[0].getMessage()
    finally:
        service.close()


async def test_the_timer_drops_empty_groups_without_committed_offsets(engine) -> None:
    eng, storage = engine
    await storage.call(eng.create_kafka_topic, "t", 1, {})
    assert await storage.call(eng.commit_offsets, "kept", [("t", 0, 5, -1, None)], now_ms()) == [None]
    coordinator = GroupCoordinator(ClassicGroups(), cleanup_interval_ms=50, now_ms=now_ms())
    service = GroupService(eng, storage, coordinator)
    try:
        for rid, group in enumerate(("gone", "kept")):
            await service.run(lambda: (None, coordinator.join(  # refused (no protocols) but leaves an Empty group
                rid, topic_partitions=lambda topic: None, group_id=group, member_id="", group_instance_id=None,
                client_id="c", client_host="/127.0.0.1", protocol_type="consumer", protocols=[],
                session_timeout_ms=10_000, rebalance_timeout_ms=30_000, require_known_member_id=False,
                supports_skip_assignment=False, now_ms=now_ms(),
            )))
        assert coordinator.classic.group("gone") is not None
        assert await _until(lambda: coordinator.classic.group("gone") is None)
        assert coordinator.classic.group("kept") is not None
    finally:
        service.close()


async def test_a_request_after_a_due_deadline_sees_the_expired_members_first(engine, monkeypatch) -> None:
    """librdkafka's 0081_admin deletes a group exactly session.timeout.ms after its members left: on a starved
    event loop the DeleteGroups request used to run before the overdue session timer (NON_EMPTY_GROUP)."""
    eng, storage = engine
    await storage.call(eng.create_kafka_topic, "t", 1, {})
    coordinator = GroupCoordinator(now_ms=now_ms())
    service = GroupService(eng, storage, coordinator)
    store = EngineOffsetStore(eng)
    try:
        response = await service.run(lambda: coordinator.consumer_heartbeat(
            group_id="g", member_id="m1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30_000, subscribed_topic_names=["t"], server_assignor=None,
            topic_partitions=store.topic_partitions, owned=[], client_id="c", client_host="/127.0.0.1",
            now_ms=now_ms()))
        assert response["error_code"] == 0 and coordinator.consumer.has_members("g")
        assert await storage.call(eng.commit_offsets, "g", [("t", 0, 5, -1, None)], now_ms()) == [None]  # kept
        later = now_ms() + 10 * 60_000  # every session has ended; the loop's timer has not fired yet
        monkeypatch.setattr(groups_module, "now_ms", lambda: later)
        plan = await service.with_store(lambda s: (delete_groups(coordinator, s, group_ids=["g"], now_ms=later), []))
        assert plan.results == [{"group_id": "g", "error_code": 0}]
    finally:
        service.close()
