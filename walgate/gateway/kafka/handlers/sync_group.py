"""SyncGroup (key 14) v0–v5: the leader's assignment, delivered to every member's parked sync.

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): Read on the group, else GROUP_AUTHORIZATION_FAILED.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`)."""

from __future__ import annotations

from typing import cast

from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import answered
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import SyncGroupRequest, SyncGroupResponse

API_KEY, MIN_VERSION, MAX_VERSION = 14, 0, 5


async def handle(broker: Broker, ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    protocol_type, protocol_name = request.protocol_type, request.protocol_name  # None before v5
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "assignment": b""}
    if code := await refusal(broker.coordinators, request.group_id):
        return {"throttle_time": 0, "error_code": code, "assignment": b""}
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        return {"throttle_time": 0, "error_code": ErrorCode.inconsistent_group_protocol, "assignment": b""}
    # the coordinator answers in the response's field names
    response = cast(SyncGroupResponse, await answered(broker.groups.parked(
        lambda rid: broker.groups.groups.sync(
            rid,
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments={a.member_id: a.assignment for a in request.assignments},
            now_ms=now_ms(),
        ), request.group_id,
    ), lambda code: {"error_code": code, "assignment": b""}))
    return {"throttle_time": 0, **response}
