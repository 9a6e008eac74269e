"""ListGroups (key 16) v0–v5: every group, optionally filtered by state (v4+) and type (v5+): consumer groups,
then share groups (type ``share``, :func:`walgate.coordinator.share_admin.list_groups`).

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): all groups with Describe on the cluster, else only those the principal may Describe."""

from __future__ import annotations

from typing import Any

from walgate.coordinator.share_admin import list_groups
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import answered
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 16, 0, 5


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    svc = broker.groups
    answer: dict[str, Any] = await answered(svc.with_store(
        lambda store: (
            {"error_code": ErrorCode.none, "groups": svc.groups.list_groups(
                states_filter=getattr(request, "states_filter", ()),
                types_filter=getattr(request, "types_filter", ()),
                offset_groups=store.groups_with_offsets(),
            )},
            [],
        )
    ), lambda code: {"error_code": code, "groups": []})
    shares = broker.shares
    if shares is not None and answer["error_code"] == ErrorCode.none:
        states, types = getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
        answer = await answered(shares.run(lambda _engine, coordinator: {
            **answer, "groups": answer["groups"] + list_groups(coordinator, states, types)}),
            lambda code: {"error_code": code, "groups": []})
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, [g["group_id"] for g in answer["groups"]])
        answer = {**answer, "groups": [g for g in answer["groups"] if g["group_id"] in permitted]}
    return {"throttle_time": 0, **answer}
