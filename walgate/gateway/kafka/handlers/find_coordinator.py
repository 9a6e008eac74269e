"""FindCoordinator (key 10) v0–v6: the node coordinating a group or a transactional id (batched keys from v4).

On a single node that is the node itself. In cluster mode a group's coordinator is the node its coordinator
partition is placed on (:mod:`walgate.gateway.kafka.group_coordinators`), with the endpoint it advertises on the
client's listener; COORDINATOR_NOT_AVAILABLE (retriable) while that node is not registered or the placement cannot
be read. A transactional id's coordinator is found the same way: the same partitions and placement, its partition
``abs(hashCode(transactional id)) % N`` (docs/cluster.md, "Transaction coordinators").

Key type 0 is a group, 1 a transactional id (:mod:`walgate.gateway.kafka.transactions`); any other is
INVALID_REQUEST. A node without a transaction coordinator (``broker.transactions`` None) answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for key type 1, fatal at once in clients.

ACLs (as Kafka): a group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED, a transactional id it
may not Describe TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from walgate.cluster.model import ControlPlaneError
from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.leaders import other_nodes
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import FindCoordinatorRequest, FindCoordinatorResponse, FindCoordinatorResponseCoordinator

API_KEY, MIN_VERSION, MAX_VERSION = 10, 0, 6
_GROUP, _TRANSACTION = 0, 1


def _refused(key: str, code: int, message: str) -> FindCoordinatorResponseCoordinator:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


async def _one(broker: Broker, ctx: RequestContext, key: str, key_type: int) -> FindCoordinatorResponseCoordinator:
    if key_type == _TRANSACTION:
        if broker.transactions is None:
            return _refused(key, ErrorCode.transactional_id_authorization_failed,
                            "this node has no transaction coordinator")
        if not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return _refused(key, ErrorCode.transactional_id_authorization_failed,
                            "Not authorized to access transactional id")
    elif key_type != _GROUP:
        return _refused(key, ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
    elif not allowed(broker, ctx, Operation.DESCRIBE, ResourceType.GROUP, key):
        return _refused(key, ErrorCode.group_authorization_failed, "Not authorized to access group")
    if broker.coordinators is not None:
        try:
            owner = await broker.coordinators.owner(key)
        except ControlPlaneError as e:
            return _refused(key, ErrorCode.coordinator_not_available, f"The coordinator is not available: {e}")
        if owner != broker.node_id:
            address = other_nodes(broker, ctx.listener.name).get(owner)
            if address is None:
                return _refused(key, ErrorCode.coordinator_not_available,
                                f"The coordinator of {'group' if key_type == _GROUP else 'transactional id'} "
                                f"{key}, node {owner}, is not available")
            return {"key": key, "node_id": owner, "host": address[0], "port": address[1],
                    "error_code": ErrorCode.none, "error_message": None}
    host, port = broker.address(ctx.listener)
    return {"key": key, "node_id": broker.node_id, "host": host, "port": port,
            "error_code": ErrorCode.none, "error_message": None}


async def handle(broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    key_type = request.key_type  # v0: a group
    if ctx.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [await _one(broker, ctx, k, key_type)
                                                          for k in request.coordinator_keys]}
    one = await _one(broker, ctx, request.key, key_type)  # v0-v3 answer a single key at the top level
    return {"throttle_time": 0, "coordinators": [], "error_code": one["error_code"],
            "error_message": one["error_message"], "node_id": one["node_id"], "host": one["host"], "port": one["port"]}
