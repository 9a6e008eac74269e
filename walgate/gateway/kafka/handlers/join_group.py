"""JoinGroup (key 11) v0–v9: parked in the coordinator until the rebalance completes.

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): Read on the group, else GROUP_AUTHORIZATION_FAILED. The id of a share group is
INCONSISTENT_GROUP_PROTOCOL (:mod:`walgate.gateway.kafka.group_types`).

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`)."""

from __future__ import annotations

from typing import cast

from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.group_types import joined_share_id, share_id_taken
from walgate.gateway.kafka.groups import now_ms
from walgate.gateway.kafka.handlers.common import answered, millis
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import JoinGroupRequest, JoinGroupResponse

API_KEY, MIN_VERSION, MAX_VERSION = 11, 0, 9


async def handle(broker: Broker, ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    v = ctx.api_version
    if not allowed(broker, ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
                "protocol_name": None if v >= 7 else "", "leader": "", "member_id": request.member_id, "members": []}
    if code := await refusal(broker.coordinators, request.group_id):
        return {"throttle_time": 0, "error_code": code, "generation_id": -1,
                "protocol_name": None if v >= 7 else "", "leader": "", "member_id": request.member_id, "members": []}
    taken = await joined_share_id(broker, request.group_id, ErrorCode.inconsistent_group_protocol, None) \
        if not request.member_id else share_id_taken(broker, request.group_id, ErrorCode.inconsistent_group_protocol, None)
    if taken is not None:
        return {"throttle_time": 0, "error_code": taken[0], "generation_id": -1,
                "protocol_name": None if v >= 7 else "", "leader": "", "member_id": "", "members": []}
    session = millis(request.session_timeout)
    rebalance = millis(request.rebalance_timeout) if v >= 1 else session  # v0 has no rebalance timeout
    # the coordinator answers in the response's field names
    response = cast(JoinGroupResponse, await answered(broker.groups.join(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.peer}",
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
        now_ms=now_ms(),
    ), lambda code: {"error_code": code, "generation_id": -1, "protocol_name": None, "leader": "",
                     "member_id": request.member_id, "members": []}))
    if v < 7 and response.get("protocol_name") is None:
        response = {**response, "protocol_name": ""}
    return {"throttle_time": 0, **response}
