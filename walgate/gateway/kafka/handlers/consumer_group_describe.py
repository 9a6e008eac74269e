"""ConsumerGroupDescribe (key 69) v0–v1: KIP-848 groups with members, epochs, current and target assignment.

Topic ids are looked up on the storage thread, in the same call as the coordinator's; a failure is answered as
every requested group's error code (:mod:`.common`).

ACLs (as Kafka): a group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED; authorized
operations when asked for.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`).
"""

from __future__ import annotations

from typing import cast

from walgate.coordinator.classic import Completion
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import answered
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeResponseAssignment,
    ConsumerGroupDescribeResponseDescribedGroup,
)
from walgate.wire.protocol import ZERO_UUID

API_KEY, MIN_VERSION, MAX_VERSION = 69, 0, 1
_NO_AUTH_OPS = -2147483648
Assignment = ConsumerGroupDescribeResponseAssignment
Group = ConsumerGroupDescribeResponseDescribedGroup


def _with_ids(assignment: Assignment, topics: TopicsSnapshot) -> Assignment:
    return {"topic_partitions": [
        {**t, "topic_id": topics.topic_id(t["topic_name"]) or ZERO_UUID} for t in assignment["topic_partitions"]
    ]}


async def handle(broker: Broker, ctx: RequestContext,
                 request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    svc = broker.groups
    permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    elsewhere = {g: code for g in dict.fromkeys(request.group_ids) if g in permitted
                 if (code := await refusal(broker.coordinators, g))}  # another node coordinates it
    wanted = [g for g in request.group_ids if g in permitted and g not in elsewhere]
    with_ops = request.include_authorized_operations

    def describe(topics: TopicsSnapshot) -> tuple[list[Group], list[Completion]]:
        # the coordinator answers in the response's field names, its assignments' topics by name only
        groups = cast(list[Group], svc.groups.consumer.describe(wanted)) if wanted else []
        for g in groups:
            g["authorized_operations"] = _NO_AUTH_OPS
            for m in g["members"]:
                m["assignment"] = _with_ids(m["assignment"], topics)
                m["target_assignment"] = _with_ids(m["target_assignment"], topics)
        return groups, []

    groups = await answered(broker.group_call(describe), lambda code: [_empty(g, code) for g in wanted])
    by_id = {g["group_id"]: g for g in groups} | {g: _empty(g, code) for g, code in elsewhere.items()}
    if with_ops:
        for g in groups:
            if g["error_code"] == ErrorCode.none:
                g["authorized_operations"] = operations(broker, ctx, ResourceType.GROUP, g["group_id"])
    return {"throttle_time": 0, "groups": [
        by_id[g] if g in permitted else _empty(g, ErrorCode.group_authorization_failed) for g in request.group_ids]}


def _empty(group_id: str, code: int) -> Group:
    return {"group_id": group_id, "error_code": code, "error_message": None, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": _NO_AUTH_OPS}
