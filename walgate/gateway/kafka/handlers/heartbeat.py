"""Heartbeat (key 12) v0–v4: keeps the member's session; REBALANCE_IN_PROGRESS tells it to rejoin.

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): Read on the group, else GROUP_AUTHORIZATION_FAILED.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`)."""

from __future__ import annotations

from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import answered
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import HeartbeatRequest, HeartbeatResponse

API_KEY, MIN_VERSION, MAX_VERSION = 12, 0, 4


async def handle(broker: Broker, ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    groups = broker.groups.groups
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    if code := await refusal(broker.coordinators, request.group_id):
        return {"throttle_time": 0, "error_code": code}
    error = await answered(broker.groups.run(
        lambda: (
            groups.heartbeat(
                group_id=request.group_id,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                now_ms=now_ms(),
            ),
            [],
        )
    ), lambda code: code)
    return {"throttle_time": 0, "error_code": error}
