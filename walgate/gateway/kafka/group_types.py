"""One group-id space for consumer groups (classic and KIP-848) and share groups (KIP-932), as Kafka's group
coordinator keeps it: a group id that is one kind of group is refused to the other kind's joins. Kafka answers a
ShareGroupHeartbeat for a consumer group and a ConsumerGroupHeartbeat for a share group GROUP_ID_NOT_FOUND ("Group
... is not a share group." / "... not a consumer group."), a JoinGroup for a share group
INCONSISTENT_GROUP_PROTOCOL. The two kinds live in two coordinators here (the group service and the share service, both on the
coordinator lane, in calls of their own). A share join asks the group service; a consumer join reads the share
groups' ids the share service published at the end of its last call (it never waits for the share service), so a
join racing the other kind's first join of the same id may still pass.

Kafka's share group also refuses the consumer groups' offset APIs (``ShareGroup.validateOffsetCommit`` /
``validateOffsetFetch`` / ``validateOffsetDelete``): OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete of
a share group's id answer GROUP_ID_NOT_FOUND (:func:`share_group_code`).

In cluster mode a share group whose members all left may keep share-partition state only on other nodes (it
consumed only partitions placed there): its coordinator does not know it by itself. A consumer group's first join
(ConsumerGroupHeartbeat epoch 0, JoinGroup without a member id) of an id that is no consumer group here asks the other
nodes which share groups they keep state of (:func:`walgate.gateway.kafka.share_remote.groups_kept`: one small
node-only ListGroups per node, asked at once, whatever the number of partitions) and is refused when one keeps
this id; a node that does not answer within :data:`~walgate.gateway.kafka.share_remote.ASK_S` lets the join through
(refusing it would stop every new consumer group while any node is down, waiting the node links' 10 s would hold
each while one is stalled). That question is asked once in a group's life, at its first member's first join (a
group of this node's already answers it here). The offset APIs check only this node's share groups: asking every
node at each commit would cost a round trip per commit. In a replicated cluster no other node is asked: the
join's coordinator is the group's share coordinator and reads its records (:mod:`.share_records`)."""

from __future__ import annotations

from collections.abc import Awaitable

from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.share_records import group_records, persisted
from walgate.gateway.kafka.share_remote import groups_kept
from walgate.wire.errors import ErrorCode

__all__ = ["consumer_id_taken", "joined_share_id", "share_group_code", "share_id_taken"]



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


def share_group_code(broker: Broker, group_id: str) -> int:
    """GROUP_ID_NOT_FOUND when a share group of this node has ``group_id`` (an offset API of it is refused: the
    offset APIs carry no error message), else ``ErrorCode.none`` (0)."""
    return ErrorCode.group_id_not_found if share_id_taken(broker, group_id, 0, None) is not None else ErrorCode.none


async def joined_share_id(broker: Broker, group_id: str, code: int, message: str | None) -> tuple[int, str | None] | None:
    """(``code``, ``message``) refusing a consumer group's first join of ``group_id`` when a share group has it: on
    this node (:func:`share_id_taken`), or, in cluster mode, for an id that is no consumer group here, on another
    node that answers it keeps its state (see the module docstring); else None."""
    taken = share_id_taken(broker, group_id, code, message)
    if taken is not None or broker.links is None or broker.shares is None:
        return taken
    try:
        if await _is_consumer_group(broker, group_id):
            return None
    except Exception as exc:  # noqa: BLE001 - answered as its error code
        return error_of(exc), None
    shares = broker.shares
    if persisted(broker):  # a replicated cluster: the share coordinator (this node) records the group's state
        return (code, message) if await shares.lane.call(lambda: group_records(broker, [group_id])) else None
    return (code, message) if group_id in await groups_kept(broker.links, broker.node_id) else None


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
