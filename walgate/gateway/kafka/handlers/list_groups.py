"""ListGroups (key 16) v0–v5: every group, optionally filtered by state (v4+) and type (v5+): consumer groups,
then share groups (type ``share``, :func:`walgate.coordinator.share_admin.list_groups`). In cluster mode the
consumer and share groups are those this node coordinates (:mod:`walgate.gateway.kafka.group_coordinators`): a share
group's share-partition state on the other nodes, its partitions' leaders, does not list it there. A share group it
coordinates whose members all left and whose state is only on other nodes is listed too (``Empty``), as Kafka's
coordinator lists a share group until it is deleted: when share groups are asked for, the other nodes are asked which
share groups they keep state of (:func:`walgate.gateway.kafka.share_remote.groups_kept`); a node that does not
answer then lists none of those only it keeps. In a replicated cluster no node is asked: the share groups it
coordinates are those whose share-partition states the share coordinator (this node) records
(:mod:`walgate.gateway.kafka.share_records`), whichever nodes lead their partitions. Such a request from a cluster node (:mod:`.node_auth`) is answered
with every group this node knows, whoever coordinates it, whatever the ACLs (ClusterAction, as the share state
RPCs).

A coordinator failure is answered as an error code (:mod:`.common`).

ACLs (as Kafka): all groups with Describe on the cluster, else only those the principal may Describe."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.share_admin import list_groups
from walgate.gateway.kafka.access import Operation, ResourceType, allowed_names, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.group_coordinators import GroupCoordinators
from walgate.gateway.kafka.handlers.common import answered
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.kafka.share_records import persisted, recorded_ids
from walgate.gateway.kafka.share_remote import groups_kept
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
    node = from_cluster_node(broker, ctx)  # another node's coordinator asking (share_remote.groups_kept)
    if broker.coordinators is not None and error == ErrorCode.none and not node:
        error, groups = await _coordinated(broker, broker.coordinators, groups, states, types)
    if not node and not cluster_allowed(broker, ctx, Operation.DESCRIBE):
        permitted = allowed_names(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, [g["group_id"] for g in groups])
        groups = [g for g in groups if g["group_id"] in permitted]
    return {"throttle_time": 0, "error_code": error, "groups": groups}


async def _coordinated(broker: Broker, coordinators: GroupCoordinators, groups: list[Listed], states: Sequence[str],
                       types: Sequence[str]) -> tuple[ErrorCode, list[Listed]]:
    """Those of ``groups`` whose coordinator partition is this node's (cluster mode: Kafka's ListGroups answers the
    groups of the broker's own ``__consumer_offsets`` partitions, and the Admin client asks every broker), and the
    ``Empty`` share groups it coordinates that other nodes keep state of, when the filters take them;
    COORDINATOR_NOT_AVAILABLE when the placement cannot be read now."""
    try:
        placement = await coordinators.placement()
    except ControlPlaneError:
        return ErrorCode.coordinator_not_available, []
    me = coordinators.member.node_id
    mine = [g for g in groups if placement.owner(g["group_id"]) == me]
    if (types and "share" not in {t.strip().lower() for t in types}) or \
            (states and "empty" not in {s.strip().lower() for s in states}):
        return ErrorCode.none, mine
    known = {g["group_id"] for g in groups} | (broker.shares.group_ids if broker.shares is not None else frozenset())
    shares = broker.shares
    if shares is not None and persisted(broker):  # a replicated cluster: the share coordinator's records
        elsewhere = await shares.lane.call(recorded_ids, broker)
    else:
        elsewhere = await groups_kept(broker.links, me)
    return ErrorCode.none, mine + [
        {"group_id": g, "protocol_type": "share", "group_state": "Empty", "group_type": "share"}
        for g in sorted(elsewhere - known) if placement.owner(g) == me]
