"""One group-id space for consumer groups (classic and KIP-848) and share groups (KIP-932), as Kafka's group
coordinator keeps it: a group id that is one kind of group is refused to the other kind's joins. Kafka answers a
ShareGroupHeartbeat for a consumer group and a ConsumerGroupHeartbeat for a share group GROUP_ID_NOT_FOUND ("Group
... is not a share group." / "... not a consumer group."), a JoinGroup for a share group
INCONSISTENT_GROUP_PROTOCOL. The two kinds live in two coordinators here (the group service and the share service, both on the
coordinator lane, in calls of their own). A share join asks the group service; a consumer join reads the share
groups' ids the share service published at the end of its last call (it never waits for the share service), so a
join racing the other kind's first join of the same id may still pass."""

from __future__ import annotations

from collections.abc import Awaitable

from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import error_of
from walgate.wire.errors import ErrorCode

__all__ = ["consumer_id_taken", "share_id_taken"]


async def _refused(check: Awaitable[bool], code: int, message: str | None) -> tuple[int, str | None] | None:
    """(``code``, ``message``) when ``check`` is true, None when false, the error code of what it raised."""
    try:
        return (code, message) if await check else None
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        return error_of(exc), None


def share_id_taken(broker: Broker, group_id: str, code: int, message: str | None) -> tuple[int, str | None] | None:
    """(``code``, ``message``) when a share group has ``group_id`` (members or share-partition state, as the share
    service last published its ids), else None."""
    shares = broker.shares
    return (code, message) if shares is not None and group_id in shares.group_ids else None


async def consumer_id_taken(broker: Broker, group_id: str) -> tuple[int, str | None] | None:
    """GROUP_ID_NOT_FOUND when a consumer group has ``group_id``, else None (a failure: its error code)."""
    return await _refused(_is_consumer_group(broker, group_id), ErrorCode.group_id_not_found,
                          f"Group {group_id} is not a share group.")


async def _is_consumer_group(broker: Broker, group_id: str) -> bool:
    """A consumer group (classic or KIP-848: members or committed offsets) has this id; raises what the group
    service raises."""
    svc = broker.groups

    def exists(store: EngineOffsetStore) -> tuple[bool, list[object]]:
        described = svc.groups.describe([group_id], has_offsets=store.has_offsets, report_not_found=False)
        return any(g["group_state"] != "Dead" for g in described), []

    return await svc.with_store(exists)  # type: ignore[arg-type]
