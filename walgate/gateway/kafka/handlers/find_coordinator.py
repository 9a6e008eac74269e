"""FindCoordinator (key 10) v0–v6: the node coordinating a group or a transactional id (batched keys from v4).

On a single node that is the node itself. In cluster mode a group's coordinator is the node its coordinator
partition is placed on (:mod:`walgate.gateway.kafka.group_coordinators`), with the endpoint it advertises on the
client's listener; COORDINATOR_NOT_AVAILABLE (retriable) while that node is not registered or the placement cannot
be read. A transactional id's coordinator is found the same way: the same partitions and placement, its partition
``abs(hashCode(transactional id)) % N`` (docs/cluster.md, "Transaction coordinators").

Key type 0 is a group, 1 a transactional id (:mod:`walgate.gateway.kafka.transactions`), 2 (v6+, KIP-932) a
share-partition, ``groupId:topicId:partition`` (:mod:`walgate.coordinator.share_partition_key`); any other is
INVALID_REQUEST. A node without a transaction coordinator (``broker.transactions`` None) answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for key type 1, fatal at once in clients.

Key type 2, as Kafka's ``KafkaApis.getCoordinator`` answers it: INVALID_REQUEST below v6; then, for a connection that
is not another cluster node's (:mod:`walgate.gateway.kafka.node_auth`: Kafka's ClusterAction, which only brokers
hold; so every client, and every connection to a single node), CLUSTER_AUTHORIZATION_FAILED; then INVALID_REQUEST for
a key Kafka's ``SharePartitionKey.validate`` refuses, or with share groups off. Kafka's share coordinator keeping a
share-partition's state is the leader of a ``__share_group_state`` partition; here the partition's own node keeps
it (docs/cluster.md, "Share groups"), so that node is answered: the one the topic's partition is placed on
(COORDINATOR_NOT_AVAILABLE, retriable, while it is not registered, or for a topic id this node does not know, which
may be one its catalog has not applied yet). Its answers to the share coordinator's state RPCs are
:mod:`walgate.gateway.kafka.share_state`'s.

ACLs (as Kafka): a group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED, a transactional id it
may not Describe TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a share-partition (key type 2) CLUSTER_AUTHORIZATION_FAILED
to any but a cluster node.
"""

from __future__ import annotations

from walgate.cluster.model import ControlPlaneError
from walgate.coordinator.share_partition_key import parse_share_key
from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.leaders import other_nodes
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import FindCoordinatorRequest, FindCoordinatorResponse, FindCoordinatorResponseCoordinator

API_KEY, MIN_VERSION, MAX_VERSION = 10, 0, 6
_GROUP, _TRANSACTION, _SHARE = 0, 1, 2


def _refused(key: str, code: int, message: str) -> FindCoordinatorResponseCoordinator:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


def _node(broker: Broker, ctx: RequestContext, key: str, node: int, what: str) -> FindCoordinatorResponseCoordinator:
    """Node ``node`` with its endpoint on the client's listener; COORDINATOR_NOT_AVAILABLE while another node is not
    registered (``what`` names the key in the message)."""
    if node == broker.node_id:
        host, port = broker.address(ctx.listener)
        return {"key": key, "node_id": node, "host": host, "port": port,
                "error_code": ErrorCode.none, "error_message": None}
    address = other_nodes(broker, ctx.listener.name).get(node)
    if address is None:
        return _refused(key, ErrorCode.coordinator_not_available, f"The coordinator of {what}, node {node}, "
                                                                  "is not available")
    return {"key": key, "node_id": node, "host": address[0], "port": address[1],
            "error_code": ErrorCode.none, "error_message": None}


def _share(broker: Broker, ctx: RequestContext, key: str) -> FindCoordinatorResponseCoordinator:
    """Key type 2: the node keeping the state of the share-partition ``key`` names (see the module docstring)."""
    if ctx.api_version < 6:
        return _refused(key, ErrorCode.invalid_request, "key type 2 (share) needs FindCoordinator v6")
    if not from_cluster_node(broker, ctx):
        return _refused(key, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    if broker.shares is None:
        return _refused(key, ErrorCode.invalid_request, "Share groups are not enabled.")
    try:
        share = parse_share_key(key)
    except ValueError as e:
        return _refused(key, ErrorCode.invalid_request, str(e))
    topics = broker.topics()
    name = topics.topic_name(share.topic_id)
    if name is None:
        return _refused(key, ErrorCode.coordinator_not_available, f"No topic with id {share.topic_id} is known here")
    return _node(broker, ctx, key, topics.node_of(name, share.partition, broker.node_id),
                 f"share-partition {name}-{share.partition} of group {share.group_id}")


async def _one(broker: Broker, ctx: RequestContext, key: str, key_type: int) -> FindCoordinatorResponseCoordinator:
    if key_type == _SHARE:
        return _share(broker, ctx, key)
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
        return _node(broker, ctx, key, owner, f"{'group' if key_type == _GROUP else 'transactional id'} {key}")
    return _node(broker, ctx, key, broker.node_id, key)


async def handle(broker: Broker, ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    key_type = request.key_type  # v0: a group
    if ctx.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [await _one(broker, ctx, k, key_type)
                                                          for k in request.coordinator_keys]}
    one = await _one(broker, ctx, request.key, key_type)  # v0-v3 answer a single key at the top level
    return {"throttle_time": 0, "coordinators": [], "error_code": one["error_code"],
            "error_message": one["error_message"], "node_id": one["node_id"], "host": one["host"], "port": one["port"]}
