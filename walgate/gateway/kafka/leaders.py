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
from walgate.replication.partition import PartitionState, check_leader_epoch
from walgate.storage.partitions import LEADER_EPOCH
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode

__all__ = ["Endpoints", "other_nodes", "current_leader", "node_endpoints", "partition_state",
           "leadership"]

Endpoints = Mapping[int, tuple[str, int]]


def other_nodes(broker: Broker, listener: str) -> dict[int, tuple[str, int]]:
    """The nodes other than this one registered now (cluster mode; none on a single node), each with the endpoint
    it advertises on ``listener``; a node without one is left out (a client of that listener cannot reach it)."""
    if broker.cluster is None:
        return {}
    return {n.node_id: address for n in broker.cluster.view.nodes
            if n.node_id != broker.node_id and (address := endpoint_for(n, listener)) is not None}


def partition_state(broker: Broker, topics: TopicsSnapshot, topic: str, partition: int) -> PartitionState | None:
    """The partition state of ``topic``'s partition ``partition`` when its database is replicated (issue 25) and
    this node read one; None otherwise (a single copy: led by the node it is placed on, at epoch 0). Any lane."""
    vgroup = topics.replicated_vgroup(topic, partition)
    return None if vgroup is None or broker.led is None else broker.led.state_of(*vgroup)


def current_leader(node: int, others: Endpoints, epoch: int = LEADER_EPOCH) -> tuple[int, int]:
    """KIP-951's ``CurrentLeader`` (leader id, leader epoch) of a partition led by ``node``, another node, in leader
    epoch ``epoch``."""
    return (node, epoch) if node in others else (-1, -1)


def leadership(broker: Broker, topic: str, partition: int, requested_epoch: int) -> tuple[int, int, int | None]:
    """(error, current leader epoch, leader when NOT_LEADER_OR_FOLLOWER) of a client's read of ``topic``'s
    partition ``partition`` naming ``requested_epoch`` (-1: none): checked against the partition state's epoch
    (KIP-320) and answered NOT_LEADER_OR_FOLLOWER on a replica that does not lead it (issue 25); a partition of one
    copy is at :data:`LEADER_EPOCH` and led here. Any lane."""
    state = partition_state(broker, broker.topics(), topic, partition)
    epoch = LEADER_EPOCH if state is None else state.leader_epoch
    error = None if requested_epoch < 0 else check_leader_epoch(epoch, requested_epoch)
    if error is None and state is not None and state.leader != broker.node_id:
        return ErrorCode.not_leader_or_follower, epoch, state.leader
    return error or ErrorCode.none, epoch, None


def node_endpoints(nodes: Iterable[int], others: Endpoints) -> list[Any]:
    """The ``NodeEndpoints`` (Metadata: ``brokers``) entries of those of ``nodes`` in ``others``, by id."""
    return [{"node_id": n, "host": others[n][0], "port": others[n][1], "rack": None}
            for n in sorted(set(nodes) & others.keys())]
