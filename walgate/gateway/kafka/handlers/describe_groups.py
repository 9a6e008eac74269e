"""DescribeGroups (key 15) v0–v5: state, protocol and members of each group.

A coordinator failure is answered as every requested group's error code (:mod:`.common`).

ACLs (as Kafka): a group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED; authorized
operations (v3+) when asked for.

In cluster mode a group whose coordinator partition is another node's answers NOT_COORDINATOR
(:mod:`walgate.gateway.kafka.group_coordinators`)."""

from __future__ import annotations

from typing import cast

from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.handlers.common import answered
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeGroupsResponseDescribedGroup,
)

API_KEY, MIN_VERSION, MAX_VERSION = 15, 0, 5
_NO_AUTH_OPS = -2147483648
Group = DescribeGroupsResponseDescribedGroup


async def handle(broker: Broker, ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    svc = broker.groups
    names = list(request.groups)
    permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, names)
    elsewhere = {g: code for g in dict.fromkeys(names) if g in permitted
                 if (code := await refusal(broker.coordinators, g))}  # another node coordinates it
    wanted = [g for g in names if g in permitted and g not in elsewhere]
    # the coordinator answers in the response's field names
    described = await answered(svc.with_store(lambda store: (cast(list[Group], svc.groups.describe(
        wanted, has_offsets=store.has_offsets, report_not_found=False)), [])
    ), lambda code: [_empty(g, code) for g in wanted]) if wanted else []
    by_id = {g["group_id"]: g for g in described} | {g: _empty(g, code) for g, code in elsewhere.items()}
    groups = [by_id[g] if g in permitted else _empty(g, ErrorCode.group_authorization_failed) for g in names]
    with_ops = request.include_authorized_operations  # False before v3
    return {"throttle_time": 0, "groups": [
        {**g, "authorized_operations": operations(broker, ctx, ResourceType.GROUP, g["group_id"])
         if with_ops and g["error_code"] == ErrorCode.none else _NO_AUTH_OPS} for g in groups]}


def _empty(group_id: str, code: int) -> Group:
    return {"group_id": group_id, "error_code": code, "group_state": "", "protocol_type": "", "protocol_data": "",
            "members": []}
