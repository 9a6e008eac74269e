"""LeaveGroup (key 13) v0–v5: one member (v0–v2) or a batch (v3+) leaves; the group rebalances.

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
from walgate.wire.messages import LeaveGroupRequest, LeaveGroupResponse

API_KEY, MIN_VERSION, MAX_VERSION = 13, 0, 5


async def handle(broker: Broker, ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    groups = broker.groups.groups
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "members": []}
    if code := await refusal(broker.coordinators, request.group_id):
        return {"throttle_time": 0, "error_code": code, "members": []}
    # the coordinator answers in the response's field names
    response = cast(LeaveGroupResponse, await answered(
        broker.groups.run(lambda: groups.leave(group_id=request.group_id, members=members, now_ms=now_ms())),
        lambda code: {"error_code": code, "members": []},
    ))
    if ctx.api_version < 3 and response["error_code"] == 0 and response["members"]:
        response = {**response, "error_code": response["members"][0]["error_code"]}
    return {"throttle_time": 0, **response}
