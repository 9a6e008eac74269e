"""Whether a request comes from another node of this cluster (docs/cluster.md, "Transaction coordinators").

Kafka takes a broker-to-broker request (WriteTxnMarkers; AddPartitionsToTxn v4+; a Fetch with a replica id) from a
principal holding ClusterAction, the brokers' own, authenticated on ``inter.broker.listener.name`` with configured
credentials. A walgate node authenticates its connections to another node with SASL SCRAM-SHA-256 as
``walgate-node-<id>`` with a credential derived from the cluster's node token (:mod:`walgate.security.node_token`,
:mod:`walgate.gateway.kafka.sasl`), on any listener: only such a connection makes these requests, ClusterAction
implied for it and for nobody else (no ACL grants it to a client: ANONYMOUS or any client id is refused). A single
node takes them from nobody. Decided by the connection's authentication alone: no etcd read, no client id.
"""

from __future__ import annotations

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext

__all__ = ["from_cluster_node"]


def from_cluster_node(broker: Broker, ctx: RequestContext) -> bool:
    """Whether ``ctx``'s connection authenticated as a node of this node's cluster."""
    auth = ctx.authentication
    return broker.cluster is not None and auth is not None and auth.node is not None
