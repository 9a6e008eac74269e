"""ShareGroupDescribe (key 77) v1: share groups (KIP-932) with their members, epochs and assignments.

A group with members is ``Stable``; one whose members are all gone but that has share-partition state is
``Empty`` (epoch 0); any other id is GROUP_ID_NOT_FOUND, as Kafka answers an id that is no share group. Topic ids are
looked up in the topics snapshot, in the same coordinator-lane call as the coordinator's.

In cluster mode a group another node coordinates answers NOT_COORDINATOR (the client looks its coordinator up
again), as its ShareGroupHeartbeat does (:mod:`walgate.gateway.kafka.group_coordinators`). On its coordinator, a
group without members whose share-partition state is only on other nodes (it consumed only partitions placed there)
is found as the administration finds it (:func:`walgate.gateway.kafka.share_admin.cluster_states`: the other nodes
are asked whether they keep state of it): ``Empty``; while one of them does not answer, COORDINATOR_NOT_AVAILABLE
(retriable), not GROUP_ID_NOT_FOUND, which Kafka's Admin takes as final.

ACLs (as Kafka): a group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED; authorized operations
when asked for.
"""

from __future__ import annotations

from typing import cast

from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import answered
from walgate.gateway.kafka.share_admin import UNANSWERED, cluster_states, unanswered
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupDescribeResponseDescribedGroup,
)
from walgate.wire.protocol import ZERO_UUID

API_KEY, MIN_VERSION, MAX_VERSION = 77, 1, 1
_NO_AUTH_OPS = -2147483648
Group = ShareGroupDescribeResponseDescribedGroup


def _empty(group_id: str, code: int, message: str | None = None) -> Group:
    return {"group_id": group_id, "error_code": code, "error_message": message, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": _NO_AUTH_OPS}


async def handle(broker: Broker, ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    shares = broker.shares
    permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    if shares is None:
        return {"throttle_time": 0, "groups": [_empty(g, ErrorCode.unsupported_version) for g in request.group_ids]}
    refused = {g: code for g in request.group_ids if g in permitted
               if (code := await refusal(broker.coordinators, g))}  # another node coordinates it
    wanted = [g for g in request.group_ids if g in permitted and g not in refused]
    states = await cluster_states(broker, wanted)  # (cluster mode: state kept only on other nodes)

    def describe(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> list[Group]:
        out: list[Group] = []
        for group_id in wanted:
            # the coordinator answers in the response's field names, its assignments' topics by name only
            group = cast(Group | None, coordinator.groups.describe(group_id))
            if group is None:
                state = "Empty" if coordinator.has_state(group_id) else states.get(group_id)
                out.append({**_empty(group_id, ErrorCode.none), "group_state": "Empty", "assignor_name": "simple"}
                           if state == "Empty" else _empty(group_id, *unanswered(group_id)) if state == UNANSWERED
                           else _empty(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found."))
                continue
            for m in group["members"]:
                m["assignment"] = {"topic_partitions": [
                    {**t, "topic_id": topics.topic_id(t["topic_name"]) or ZERO_UUID}
                    for t in m["assignment"]["topic_partitions"]]}
            out.append({**group, "error_code": ErrorCode.none, "error_message": None,
                        "authorized_operations": _NO_AUTH_OPS})
        return out

    groups = await answered(shares.run(describe), lambda code: [_empty(g, code) for g in wanted])
    if request.include_authorized_operations:
        for g in groups:
            if g["error_code"] == ErrorCode.none:
                g["authorized_operations"] = operations(broker, ctx, ResourceType.GROUP, g["group_id"])
    by_id = {g["group_id"]: g for g in groups} | {g: _empty(g, code) for g, code in refused.items()}
    return {"throttle_time": 0, "groups": [
        by_id[g] if g in permitted else _empty(g, ErrorCode.group_authorization_failed) for g in request.group_ids]}
