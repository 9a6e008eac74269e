"""DescribeCluster (key 60) v0–v1: the cluster's live nodes and its controller.

On a single node, the node itself is the whole cluster and its controller. In cluster mode (docs/cluster.md),
every node registered in etcd, each with the endpoint it advertises on the listener the client connected through
(else its first), and the elected controller's node id (-1 while none is elected), as this node last read them.

Authorized operations when asked for (as Kafka: 0 without Describe on the cluster); the request itself is not
checked, as Kafka does not.
"""

from __future__ import annotations

from typing import Any

from walgate.cluster.model import endpoint_for
from walgate.gateway.kafka.access import NOT_REQUESTED, Operation, ResourceType, cluster_allowed, operations
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.security.acl import CLUSTER_NAME
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import DescribeClusterRequest, DescribeClusterResponse

API_KEY, MIN_VERSION, MAX_VERSION = 60, 0, 1
_BROKERS = 1  # endpoint_type 1 = brokers, 2 = controllers


async def handle(broker: Broker, ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    error = ErrorCode.none if request.endpoint_type == _BROKERS else ErrorCode.unsupported_endpoint_type
    ops = NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        ops = operations(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME) if cluster_allowed(broker, ctx, Operation.DESCRIBE) else 0
    host, port = broker.address(ctx.listener)
    brokers: list[Any] = [{"broker_id": broker.node_id, "host": host, "port": port, "rack": None, "is_fenced": False}]
    controller = broker.node_id
    if broker.cluster is not None:
        view = broker.cluster.view
        brokers = [{"broker_id": n.node_id, "host": address[0], "port": address[1], "rack": n.rack,
                    "is_fenced": False}
                   for n in view.nodes if (address := endpoint_for(n, ctx.listener.name)) is not None]
        controller = view.controller if view.controller is not None else -1
    return {
        "throttle_time": 0,
        "error_code": error,
        "error_message": None if error == ErrorCode.none else "walgate only has broker endpoints",
        "endpoint_type": _BROKERS,
        "cluster_id": broker.cluster_id,
        "controller_id": controller,
        "brokers": brokers,
        "cluster_authorized_operations": ops,
    }
