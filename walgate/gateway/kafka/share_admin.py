"""What the share-group administration handlers share: the topics snapshot as
:class:`~walgate.coordinator.share_admin.ShareTopics` (topic keys are topic ids as strings, as the share coordinator
keys its partitions), and the refusals of AlterShareGroupOffsets / DeleteShareGroupOffsets
before the coordinator (share groups off, no permission on the group, an empty group id), and their run on the
share service: audited, answered."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

from walgate.coordinator.share_admin import group_state, recorded_groups
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.audit import audit_kafka
from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import GROUP_WRITE, answered
from walgate.gateway.kafka.share_records import group_records, persisted
from walgate.gateway.kafka.share_remote import kept_elsewhere
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponseTopic,
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)
from walgate.wire.protocol import ZERO_UUID

__all__ = ["ASKED_AT_ONCE", "TOPIC_DENIED", "UNANSWERED", "SnapshotTopics", "Outcome", "change_offsets",
           "cluster_states", "held_change", "holding", "refused_group", "topic_uuid", "unanswered"]

Outcome = tuple[int, str | None, list[dict[str, Any]]]
"""What an offsets change on the share coordinator answers: (error code, message, the answer's topics, their ids as
topic keys)."""
Change = Callable[[TopicsSnapshot, ShareCoordinator], Outcome]
"""An offsets change on the share coordinator."""
Topic = TypeVar("Topic", AlterShareGroupOffsetsResponseTopic, DeleteShareGroupOffsetsResponseTopic)
"""A topic of an Alter/DeleteShareGroupOffsets answer."""
Answer = TypeVar("Answer", AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsResponse)
"""An Alter/DeleteShareGroupOffsets answer."""

TOPIC_DENIED = "Topic authorization failed."
UNANSWERED = "Unanswered"
"""The cluster state of a group its coordinator's node does not know while another node did not answer whether it
keeps state of it (down, unreachable): it may be an empty share group there, so it is neither deleted nor changed
nor answered GROUP_ID_NOT_FOUND, which Kafka's Admin takes as final, but COORDINATOR_NOT_AVAILABLE, retriable."""
ASKED_AT_ONCE = 8
"""How many group ids :func:`cluster_states` asks the other nodes about at a time."""


class SnapshotTopics:
    """Names, keys and partition counts of the topics in a topics snapshot (the coordinator lane's view)."""

    def __init__(self, topics: TopicsSnapshot) -> None:
        self._topics = topics

    def key(self, name: str) -> str | None:
        topic_id = self._topics.topic_id(name)
        return None if topic_id is None else str(topic_id)

    def name(self, key: str) -> str | None:
        return self._topics.topic_name(uuid.UUID(key))

    def partitions(self, name: str) -> int:
        return self._topics.partition_count(name) or 0  # (0: its database is out of service)


def topic_uuid(key: str | None) -> uuid.UUID:
    """The topic id on the wire of a topic key (the zero UUID for none)."""
    return ZERO_UUID if key is None else uuid.UUID(key)


def refused_group(broker: Broker, ctx: RequestContext, group_id: str, op: Operation) -> tuple[int, str | None] | None:
    """The group-level (error code, message) refusing a change of ``group_id``'s offsets before the coordinator
    (share groups off, no ``op`` on the group: GROUP_AUTHORIZATION_FAILED, an empty id: INVALID_GROUP_ID), None
    when it may go on. The answer then has no topics."""
    if broker.shares is None:
        return ErrorCode.unsupported_version, "Share groups are not enabled."
    if not allowed(broker, ctx, op, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    return (ErrorCode.invalid_group_id, None) if not group_id else None


async def cluster_states(broker: Broker, group_ids: Sequence[str]) -> dict[str, str | None]:
    """In cluster mode, the state of each of ``group_ids`` as its coordinator (this node) sees it across the nodes
    (:func:`~walgate.coordinator.share_admin.group_state`): its own node's, else ``Empty`` when other nodes keep
    state of it (it consumed only partitions placed there), else :data:`UNANSWERED` when a node did not answer
    whether it keeps any, else None. In a replicated cluster no other node is asked: ``Empty`` when the share
    coordinator (this node) records a share-partition state of it (:mod:`.share_records`). Empty on a single node, or when the share service fails (the change asked then
    fails and answers it). The ids unknown here are asked :data:`ASKED_AT_ONCE` at a time (the summary RPC names
    one group), each of every other node at once."""
    return await _across(broker, group_ids, None)


@asynccontextmanager
async def holding(broker: Broker, group_ids: Sequence[str]) -> AsyncIterator[dict[str, str | None]]:
    """:func:`cluster_states` of ``group_ids``, those without members here held
    (:meth:`~walgate.coordinator.share_group.ShareGroups.hold`) from the coordinator call that reads their state until
    the block ends: no member joins them while the caller changes their state on other nodes (the check-then-act
    window, docs/cluster.md "Share groups"). Nothing is held on a single node, where the check and the change are
    one coordinator call."""
    held: list[str] = []
    try:
        yield await _across(broker, group_ids, held)
    finally:
        if group_ids and broker.links is not None and broker.shares is not None:
            # (after the holding call on the lane, whose ids ``held`` has by then, even when this task was cancelled
            # while it ran)
            await answered(broker.shares.run(lambda _topics, coordinator: coordinator.groups.release(held)),
                           lambda code: None)


async def held_change(broker: Broker, group_id: str, refused: tuple[int, str | None] | None,
                      change: Callable[[str | None], Awaitable[Answer]]) -> Answer:
    """An AlterShareGroupOffsets / DeleteShareGroupOffsets answer: the group-level refusal ``refused`` (no topics),
    else ``change`` of the group's state across the nodes (:func:`cluster_states`), run while the group is held
    (:func:`holding`: no member joins meanwhile), or COORDINATOR_NOT_AVAILABLE when a node did not answer whether it
    keeps state of it (:data:`UNANSWERED`)."""
    if refused is None:
        async with holding(broker, [group_id]) as states:
            state = states.get(group_id)
            if state != UNANSWERED:
                return await change(state)
        refused = unanswered(group_id)
    return cast(Answer, {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1], "responses": []})


async def _across(broker: Broker, group_ids: Sequence[str], held: list[str] | None) -> dict[str, str | None]:
    """:func:`cluster_states`; with ``held`` (not None) the ids without members here are held in the same
    coordinator call that reads their state, and put in ``held``."""
    shares = broker.shares
    if broker.links is None or shares is None or not group_ids:
        return {}

    def local(_topics: TopicsSnapshot, coordinator: ShareCoordinator) -> dict[str, str | None]:
        recorded = recorded_groups(group_records(broker, group_ids).items())  # (none unless persisted)
        states = {g: group_state(coordinator, g) or ("Empty" if g in recorded else None) for g in group_ids}
        if held is not None:
            held.extend(coordinator.groups.hold(states))
        return states

    states: dict[str, str | None] = await answered(shares.run(local), lambda code: {})
    if persisted(broker):  # the share coordinator's records are every share-partition state of its groups
        return states
    placed, bound = broker.topics(), asyncio.Semaphore(ASKED_AT_ONCE)

    async def across(group_id: str) -> str | None:
        async with bound:
            kept = await kept_elsewhere(broker.links, placed, broker.node_id, group_id)
        return UNANSWERED if kept is None else "Empty" if kept else None

    unknown = [g for g, state in states.items() if state is None]
    return states | dict(zip(unknown, await asyncio.gather(*(across(g) for g in unknown))))


def unanswered(group_id: str) -> tuple[int, str]:
    """The group-level (error code, message) of a group whose state is :data:`UNANSWERED`: retriable."""
    return (ErrorCode.coordinator_not_available,
            f"A node that may keep share-partition state of group {group_id} did not answer: try again later.")


async def change_offsets(broker: Broker, ctx: RequestContext, api: str, group_id: str, change: Change,
                         denied: list[Topic]) -> tuple[int, str | None, list[Topic]]:
    """``change`` run on the share service (its write durable; a refused one answers GROUP_WRITE's code), audited as
    ``api``: the answer's (error code, message, topics), its topics and the ``denied`` ones (their ids the zero
    UUID), none with a group-level error."""
    assert broker.shares is not None  # refused_group answered first
    code, message, results = await answered(broker.shares.run(change), lambda c: (c, None, []), GROUP_WRITE)
    audit_kafka(ctx, api, f"group {group_id}", code)
    if code != ErrorCode.none:
        return code, message, []
    # the coordinator answers in the response's field names, a topic's id as its key; a denied topic has none
    topics = [cast(Topic, {**t, "topic_id": topic_uuid(t["topic_id"])}) for t in results]
    return ErrorCode.none, None, topics + [{**t, "topic_id": topic_uuid(None)} for t in denied]
