"""ShareGroupHeartbeat (key 76) v1: KIP-932 share-group membership; the coordinator owns the assignment
(:mod:`walgate.coordinator.share_group`: several members may share a partition).

Topics travel as names in the subscription and as ids in the assignment, translated through the topics snapshot in
the same coordinator-lane call as the coordinator's. A member that leaves (epoch -1) ends its share session and releases the records it
holds. A refused write of what that released is answered as an error code (:mod:`.common`).

In cluster mode the group's coordinator answers it (the node of its coordinator partition); another node answers
NOT_COORDINATOR and the client looks its coordinator up again (:mod:`walgate.gateway.kafka.group_coordinators`).

ACLs (as Kafka's ``handleShareGroupHeartbeat``): Read on the group, else GROUP_AUTHORIZATION_FAILED; Describe on
every subscribed topic, else TOPIC_AUTHORIZATION_FAILED naming the others. A join (epoch 0) to the id of a consumer
group is GROUP_ID_NOT_FOUND (:mod:`walgate.gateway.kafka.group_types`).
"""

from __future__ import annotations

from typing import cast

from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import consumer_id_taken
from walgate.gateway.kafka.handlers.common import answered
from walgate.gateway.kafka.shares import now_ms
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    ShareGroupHeartbeatResponseAssignment,
)

API_KEY, MIN_VERSION, MAX_VERSION = 76, 1, 1


def _refuse(error: int, message: str | None = None) -> ShareGroupHeartbeatResponse:
    return {"throttle_time": 0, "error_code": error, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


async def handle(broker: Broker, ctx: RequestContext,
                 request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    shares = broker.shares
    if shares is None:
        return _refuse(ErrorCode.unsupported_version, "Share groups are not enabled.")
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _refuse(ErrorCode.group_authorization_failed)
    names = request.subscribed_topic_names or ()
    hidden = sorted(set(names) - allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, names))
    if hidden:
        return _refuse(ErrorCode.topic_authorization_failed,
                       f"The following topics are not authorized: {', '.join(hidden)}")
    if code := await refusal(broker.coordinators, request.group_id):
        return _refuse(code)
    taken = await consumer_id_taken(broker, request.group_id) if request.member_epoch == 0 else None
    if taken is not None:
        return _refuse(*taken)
    client_id, client_host = ctx.client_id or "", f"/{ctx.peer}"

    def heartbeat(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> ShareGroupHeartbeatResponse:
        now = now_ms()
        response, left = coordinator.groups.heartbeat(
            group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
            subscribed_topic_names=request.subscribed_topic_names, partitions=shares.partitions,
            client_id=client_id, client_host=client_host, now_ms=now)
        if left:
            coordinator.member_left(request.group_id, request.member_id, now)
        # the coordinator answers in the response's field names but for the assignment's topics (by name) and the
        # interval (in ms)
        named = response.pop("assignment")
        assignment: ShareGroupHeartbeatResponseAssignment | None = None
        if named is not None:
            ids = [(topics.topic_id(t["topic_name"]), t["partitions"]) for t in named["topic_partitions"]]
            assignment = {"topic_partitions": [{"topic_id": topic_id, "partitions": partitions}
                                               for topic_id, partitions in ids if topic_id is not None]}
        response["heartbeat_interval"] = response.pop("heartbeat_interval_ms")
        answer = cast(ShareGroupHeartbeatResponse, {"throttle_time": 0, **response})
        return {**answer, "assignment": assignment}

    return await answered(shares.run(heartbeat), _refuse)
