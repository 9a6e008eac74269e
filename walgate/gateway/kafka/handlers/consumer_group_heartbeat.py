"""ConsumerGroupHeartbeat (key 68) v0–v1: KIP-848 membership; the coordinator owns the assignment.

Topics travel as ids on the wire and as names in the coordinator: owned
partitions of ids this node does not know are dropped (the topic is gone), the
assignment is answered with the catalog's ids. v1 members generate their own
member id (KIP-1082): an empty one is refused. Regex subscriptions are not
supported (INVALID_REQUEST says so); an empty regex means none. Ids are
translated on the storage thread, in the same call as the coordinator's; a
failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): Read on the group, else GROUP_AUTHORIZATION_FAILED; Describe on every subscribed topic, else
TOPIC_AUTHORIZATION_FAILED naming the others. A join (epoch 0) to the id of a share group is GROUP_ID_NOT_FOUND
(:mod:`walgate.gateway.kafka.group_types`).

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`).
"""

from __future__ import annotations

import logging
from typing import cast

from walgate.coordinator.classic import Completion
from walgate.gateway.kafka.access import Operation, ResourceType, allowed, allowed_names
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import joined_share_id
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import answered, millis
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
)

API_KEY, MIN_VERSION, MAX_VERSION = 68, 0, 1
log = logging.getLogger(__name__)


def _refuse(message: str | None, error: int = ErrorCode.invalid_request) -> ConsumerGroupHeartbeatResponse:
    return {"throttle_time": 0, "error_code": error, "error_message": message,
            "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


async def handle(broker: Broker, ctx: RequestContext,
                 request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    if ctx.api_version >= 1 and request.member_id == "":
        return _refuse("MemberId can't be empty.")
    if request.subscribed_topic_regex:  # v1+ (None before); librdkafka sends "" for "no regex"
        return _refuse("SubscribedTopicRegex is not supported by walgate: subscribe to topic names.")
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return _refuse(None, ErrorCode.group_authorization_failed)
    hidden = sorted(set(request.subscribed_topic_names or ()) - allowed_names(
        broker, ctx, Operation.DESCRIBE, ResourceType.TOPIC, request.subscribed_topic_names or ()))
    if hidden:
        return _refuse(f"The following topics are not authorized: {', '.join(hidden)}",
                       ErrorCode.topic_authorization_failed)
    if code := await refusal(broker.coordinators, request.group_id):
        return _refuse(None, code)
    taken = await joined_share_id(broker, request.group_id, ErrorCode.group_id_not_found,
                                  f"Group {request.group_id} is not a consumer group.") \
        if request.member_epoch == 0 else None
    if taken is not None:
        return _refuse(taken[1], taken[0])
    svc = broker.groups
    client_id, client_host = ctx.client_id or "", f"/{ctx.peer}"

    def heartbeat(topics: TopicsSnapshot) -> tuple[ConsumerGroupHeartbeatResponse, list[Completion]]:
        owned = None
        if request.topic_partitions is not None:
            named = [(None if t.topic_id is None else topics.topic_name(t.topic_id), list(t.partitions))
                     for t in request.topic_partitions]
            owned = [(name, partitions) for name, partitions in named if name is not None]
        response, completions = svc.groups.consumer_heartbeat(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=millis(request.rebalance_timeout),
            subscribed_topic_names=request.subscribed_topic_names,
            server_assignor=request.server_assignor,
            topic_partitions=topics.partition_count,
            owned=owned,
            client_id=client_id,
            client_host=client_host,
            now_ms=now_ms(),
        )
        # the coordinator answers in the response's field names but for the assignment's topics (by name) and the
        # interval (in ms)
        named = response.pop("assignment")
        assignment: ConsumerGroupHeartbeatResponseAssignment | None = None
        if named is not None:
            ids = [(topics.topic_id(t["topic_name"]), t["partitions"]) for t in named["topic_partitions"]]
            assignment = {"topic_partitions": [
                {"topic_id": topic_id, "partitions": partitions} for topic_id, partitions in ids if topic_id is not None
            ]}
        response["heartbeat_interval"] = response.pop("heartbeat_interval_ms")
        answer = cast(ConsumerGroupHeartbeatResponse, {"throttle_time": 0, **response})
        return {**answer, "assignment": assignment}, completions

    response = await answered(broker.group_call(heartbeat), lambda code: _refuse(None, code))
    if response["error_code"] != ErrorCode.none:
        log.debug("ConsumerGroupHeartbeat of %r in %r: %s %s", request.member_id, request.group_id,
                  ErrorCode(response["error_code"]).name, response["error_message"])
    return response
