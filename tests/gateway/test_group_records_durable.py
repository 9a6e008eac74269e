"""Group state through the gateway (GroupService on a real engine and storage thread): a group's records are written
and fsynced before the responses they back are delivered, a refused write answers COORDINATOR_NOT_AVAILABLE and
records nothing, and a new service on the reopened data dir (a restart) has the group back at its generation."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from tests.storage.faults import Faults
from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.errors import GroupNotRecorded, NotCoordinatorNow
from walgate.gateway.kafka.groups import GroupService, now_ms
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.wire.errors import ErrorCode


async def start(data: Path) -> tuple[GroupService, Engine, StorageThread]:
    storage = StorageThread()
    engine = await storage.call(Engine.open, data)
    service = GroupService(engine, storage, GroupCoordinator(ClassicGroups(initial_rebalance_delay_ms=0),
                                                             now_ms=now_ms()))
    await service.load()
    return service, engine, storage


async def stop(service: GroupService, engine: Engine, storage: StorageThread) -> None:
    service.close()
    await storage.call(engine.close)
    storage.shutdown()


def join(service: GroupService, instance: str = "a") -> Any:
    return service.join(
        group_id="g", member_id="", group_instance_id=instance, client_id="c", client_host="/127.0.0.1",
        protocol_type="consumer", protocols=[("range", b"\x00\x01")], session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000, require_known_member_id=True, supports_skip_assignment=False, now_ms=now_ms(),
    )


def sync(service: GroupService, joined: dict[str, Any], assignment: bytes, instance: str = "a") -> Any:
    return service.parked(lambda rid: service.groups.sync(
        rid, group_id="g", generation_id=joined["generation_id"], member_id=joined["member_id"],
        group_instance_id=instance, protocol_type="consumer", protocol_name="range",
        assignments={joined["member_id"]: assignment} if assignment else {}, now_ms=now_ms(),
    ), "g")


def heartbeat(service: GroupService, joined: dict[str, Any]) -> Any:
    return service.run(lambda: (service.groups.heartbeat(
        group_id="g", generation_id=joined["generation_id"], member_id=joined["member_id"], group_instance_id="a",
        now_ms=now_ms()), []))


@pytest.mark.parametrize(("op", "error"), [("write", errno.ENOSPC), ("fsync", errno.EIO)])
async def test_a_sync_is_answered_only_once_its_group_is_durable(tmp_path: Path, op: str, error: int) -> None:
    service, engine, storage = await start(tmp_path)
    try:
        joined = await join(service, "a")
        assert joined["error_code"] == ErrorCode.none
        faults = Faults()
        with faults.active():
            faults.fail(op, error=error, times=10)
            with pytest.raises(GroupNotRecorded):  # the handler answers COORDINATOR_NOT_AVAILABLE
                await sync(service, joined, b"first")
            faults.clear()
        assert await storage.call(lambda: dict(engine.group_records())) == {}  # nothing recorded
        # The disk is back: the next call writes the group the failed one changed, before it answers.
        assert await heartbeat(service, joined) == ErrorCode.none
        recorded = await storage.call(lambda: dict(engine.group_records()))
        assert recorded["g"]["generation"] == joined["generation_id"]
    finally:
        await stop(service, engine, storage)


async def test_the_parked_syncs_a_refused_write_answered_get_coordinator_not_available(tmp_path: Path) -> None:
    service, engine, storage = await start(tmp_path)
    try:
        first, second = await asyncio.gather(join(service, "a"), join(service, "b"))
        leader, follower = (first, second) if first["leader"] == first["member_id"] else (second, first)
        instance = {first["member_id"]: "a", second["member_id"]: "b"}
        parked = asyncio.ensure_future(sync(service, follower, b"", instance[follower["member_id"]]))
        await asyncio.sleep(0.1)
        assert not parked.done()
        faults = Faults()
        with faults.active():
            faults.fail("fsync", error=errno.EIO)
            with pytest.raises(GroupNotRecorded):
                await sync(service, leader, b"x", instance[leader["member_id"]])
            assert (await asyncio.wait_for(parked, 10))["error_code"] == ErrorCode.coordinator_not_available
    finally:
        await stop(service, engine, storage)


async def test_a_restarted_service_has_the_group_back_and_its_member_goes_on(tmp_path: Path) -> None:
    service, engine, storage = await start(tmp_path)
    try:
        joined = await join(service, "a")
        assert (await sync(service, joined, b"mine"))["assignment"] == b"mine"
    finally:
        await stop(service, engine, storage)
    service, engine, storage = await start(tmp_path)
    try:
        assert await heartbeat(service, joined) == ErrorCode.none
        assert (await sync(service, joined, b""))["assignment"] == b"mine"
        group = service.groups.classic.group("g")
        assert group is not None and group.generation_id == joined["generation_id"]
    finally:
        await stop(service, engine, storage)


async def test_an_unloaded_group_answers_its_parked_join_not_coordinator_and_loads_back(tmp_path: Path) -> None:
    """A replicated cluster's coordinator moves a partition away (coordinator_replicas.py): the groups of it are
    dropped, a parked JoinGroup answered NOT_COORDINATOR (Kafka's onGroupUnloaded); loaded again from their records,
    the member goes on at its generation."""
    service, engine, storage = await start(tmp_path)
    try:
        joined = await join(service, "a")
        assert (await sync(service, joined, b"mine"))["assignment"] == b"mine"
        parked = asyncio.ensure_future(join(service, "b"))  # a rebalance: parked until "a" joins again
        await asyncio.sleep(0.1)
        assert not parked.done()
        recorded = await storage.call(engine.group_records)
        assert set(recorded) == {"g"}
        await service.unload_groups(lambda group_id: group_id == "g")
        with pytest.raises(NotCoordinatorNow):
            await asyncio.wait_for(parked, 10)
        assert service.groups.classic.group("g") is None and service.groups.recorded() == []
        await service.load_groups(recorded)
        group = service.groups.classic.group("g")
        assert group is not None and group.generation_id == joined["generation_id"]
        assert await heartbeat(service, joined) == ErrorCode.none
    finally:
        await stop(service, engine, storage)
