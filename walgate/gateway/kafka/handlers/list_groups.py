"""ListGroups (key 16) v0–v5: every group, optionally filtered by state (v4+) and type (v5+): consumer groups,
then share groups (type ``share``, :func:`walgate.coordinator.share_admin.list_groups`). In cluster mode the
consumer and share groups are those this node coordinates (:mod:`walgate.gateway.kafka.group_coordinators`): a share
group's share-partition state on the other nodes, its partitions' leaders, does not list it there.

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): all groups with Describe on the cluster, else only those the principal may Describe."""

from __future__ import annotations

from typing import cast

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.share_admin import list_groups
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import GroupCoordinators
from walgate.gateway.kafka.handlers.common import answered
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import ListGroupsRequest, ListGroupsResponse, ListGroupsResponseListedGroup

API_KEY, MIN_VERSION, MAX_VERSION = 16, 0, 5
Listed = ListGroupsResponseListedGroup


async def handle(broker: Broker, ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    svc = broker.groups
    states, types = request.states_filter, request.types_filter  # empty (no filter) before v4 / v5
    # the coordinators answer in the response's field names
    error, groups = await answered(svc.with_store(
        lambda store: (
            (ErrorCode.none, cast(list[Listed], svc.groups.list_groups(
                states_filter=states, types_filter=types, offset_groups=store.groups_with_offsets(),
            ))),
            [],
        )
    ), lambda code: (code, []))
    shares = broker.shares
    if shares is not None and error == ErrorCode.none:
        consumer = groups
        error, groups = await answered(shares.run(lambda _engine, coordinator: (
            ErrorCode.none, consumer + cast(list[Listed], list_groups(coordinator, states, types)))),
            lambda code: (code, []))
    if broker.coordinators is not None and error == ErrorCode.none:  # only the groups this node coordinates
        error, groups = await _coordinated(broker.coordinators, groups)
    if not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, [g["group_id"] for g in groups])
        groups = [g for g in groups if g["group_id"] in permitted]
    return {"throttle_time": 0, "error_code": error, "groups": groups}


async def _coordinated(coordinators: GroupCoordinators, groups: list[Listed]) -> tuple[ErrorCode, list[Listed]]:
    """Those of ``groups`` whose coordinator partition is this node's (cluster mode: Kafka's ListGroups answers the
    groups of the broker's own ``__consumer_offsets`` partitions, and the Admin client asks every broker);
    COORDINATOR_NOT_AVAILABLE when the placement cannot be read now."""
    try:
        placement = await coordinators.placement()
    except ControlPlaneError:
        return ErrorCode.coordinator_not_available, []
    return ErrorCode.none, [g for g in groups if placement.owner(g["group_id"]) == coordinators.member.node_id]
