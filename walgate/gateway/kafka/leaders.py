"""Who leads a partition placed on another node (docs/cluster.md, "Placement"), as Kafka's answers name it: the
brokers Metadata lists beside the node asked, and the ``CurrentLeader`` / ``NodeEndpoints`` (KIP-951) that Produce
(v10+) and Fetch (v12+ / v16+) carry with NOT_LEADER_OR_FOLLOWER, so that a client goes to the leader without a
Metadata round trip.

Only nodes registered now are named, each with the endpoint it advertises on the listener the client came through;
a partition whose node is not (or has no such listener) is named with leader -1 and epoch -1: the client asks
Metadata, which answers LEADER_NOT_AVAILABLE until the node is back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from walgate.cluster.model import endpoint_for
from walgate.gateway.kafka.broker import Broker
from walgate.storage.partitions import LEADER_EPOCH

__all__ = ["Endpoints", "other_nodes", "current_leader", "node_endpoints"]

Endpoints = Mapping[int, tuple[str, int]]


def other_nodes(broker: Broker, listener: str) -> dict[int, tuple[str, int]]:
    """The nodes other than this one registered now (cluster mode; none on a single node), each with the endpoint
    it advertises on ``listener``; a node without one is left out (a client of that listener cannot reach it)."""
    if broker.cluster is None:
        return {}
    return {n.node_id: address for n in broker.cluster.view.nodes
            if n.node_id != broker.node_id and (address := endpoint_for(n, listener)) is not None}


def current_leader(node: int, others: Endpoints) -> tuple[int, int]:
    """KIP-951's ``CurrentLeader`` (leader id, leader epoch) of a partition placed on ``node``, another node."""
    return (node, LEADER_EPOCH) if node in others else (-1, -1)


def node_endpoints(nodes: Iterable[int], others: Endpoints) -> list[Any]:
    """The ``NodeEndpoints`` (Metadata: ``brokers``) entries of those of ``nodes`` in ``others``, by id."""
    return [{"node_id": n, "host": others[n][0], "port": others[n][1], "rack": None}
            for n in sorted(set(nodes) & others.keys())]
