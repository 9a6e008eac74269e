"""Whether a request comes from another node of this cluster (docs/cluster.md, "Transaction coordinators").

Kafka takes a broker-to-broker request (WriteTxnMarkers; AddPartitionsToTxn v4+) from a principal holding
ClusterAction on the cluster. A walgate node's requests to another carry the client id
``walgate-node-<id>/<incarnation>`` (:mod:`walgate.gateway.kafka.node_links`): it must name a node registered now with
that data-dir incarnation, which only the cluster's etcd tells, and, with an authorizer, the principal must hold
ClusterAction too. A single node takes such a request from nobody.
"""

from __future__ import annotations

from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.node_links import cluster_node, names_a_node

__all__ = ["from_cluster_node"]


async def from_cluster_node(broker: Broker, ctx: RequestContext) -> bool:
    member = broker.cluster
    if member is None or not names_a_node(ctx.client_id) or not cluster_allowed(broker, ctx, Operation.CLUSTER_ACTION):
        return False
    if cluster_node(ctx.client_id, member.view) is not None:
        return True
    try:  # a node that registered since this one last read the membership
        return cluster_node(ctx.client_id, await member.refresh()) is not None
    except Exception:  # noqa: BLE001 - etcd not answering: not known to be a node, refused (the sender retries)
        return False
