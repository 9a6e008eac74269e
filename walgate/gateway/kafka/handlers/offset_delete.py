"""OffsetDelete (key 47) v0: drop a group's committed offsets of topics it does not subscribe to.

A failure (the disk refused the write: NOT_COORDINATOR, :mod:`.common`'s GROUP_WRITE) is the top-level error code.

ACLs (as Kafka): Delete on the group, else GROUP_AUTHORIZATION_FAILED; a topic the principal may not Read
answers TOPIC_AUTHORIZATION_FAILED in its partitions.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`). A share group's id answers GROUP_ID_NOT_FOUND, as Kafka's
share group refuses the offset APIs (:mod:`walgate.gateway.kafka.group_types`).
"""

from __future__ import annotations

from typing import cast

from walgate.coordinator.classic import Completion
from walgate.coordinator.offsets import delete_offsets
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, checker
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import share_group_code
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import GROUP_WRITE, answered
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import OffsetDeleteRequest, OffsetDeleteResponse, OffsetDeleteResponseTopic

API_KEY, MIN_VERSION, MAX_VERSION = 47, 0, 0


async def handle(broker: Broker, ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    svc = broker.groups
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]
    if not allowed(broker, ctx, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "topics": []}
    if code := await refusal(broker.coordinators, request.group_id) or share_group_code(broker, request.group_id):
        return {"throttle_time": 0, "error_code": code, "topics": []}
    readable = checker(broker, ctx, Operation.READ, ResourceType.TOPIC)
    denied = [t for t in topics if readable is not None and not readable(t[0])]
    topics = [t for t in topics if t not in denied]

    def delete(store: EngineOffsetStore) -> tuple[OffsetDeleteResponse, list[Completion]]:
        plan = delete_offsets(
            svc.groups.classic, store, group_id=request.group_id, topics=topics,
            topic_exists=lambda name: store.topic_partitions(name) is not None, now_ms=now_ms(),
            consumer=svc.groups.consumer,
        )
        store.delete(plan.group_id, plan.deletions)
        # the coordinator answers in the response's field names
        return cast(OffsetDeleteResponse, {"throttle_time": 0, **plan.response}), []

    answer = await answered(svc.with_store(delete), lambda code: {"throttle_time": 0, "error_code": code, "topics": []},
                            GROUP_WRITE)
    if denied and answer["error_code"] == ErrorCode.none:
        refused: list[OffsetDeleteResponseTopic] = [
            {"name": name, "partitions": [{"partition_index": i, "error_code": ErrorCode.topic_authorization_failed}
                                          for i in parts]} for name, parts in denied]
        answer = {**answer, "topics": [*answer["topics"], *refused]}
    return answer
