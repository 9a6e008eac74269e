"""Heartbeat (key 12) v0–v4: keeps the member's session; REBALANCE_IN_PROGRESS tells it to rejoin.

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): Read on the group, else GROUP_AUTHORIZATION_FAILED.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`). While this node loads the group's replicated partition (it took
the lead on) the answer is NONE, as Kafka's GroupCoordinator.handleHeartbeat answers ("the group is still loading, so
respond just blindly"): the member's session goes on and its next request that needs the group state finds the
coordinator loaded or loading (COORDINATOR_LOAD_IN_PROGRESS there). aiokafka takes COORDINATOR_LOAD_IN_PROGRESS on a
Heartbeat, which Kafka never sends, for an unexpected error and fails the consumer's next getmany()
(compat-tests/test_clients_under_kills.py)."""

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
        return {"throttle_time": 0,
                "error_code": ErrorCode.none if code == ErrorCode.coordinator_load_in_progress else code}
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
