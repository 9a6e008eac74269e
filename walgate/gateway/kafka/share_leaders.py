"""Share groups over a cluster's nodes (docs/cluster.md, "Share groups"), as KIP-932 splits them: the group's
membership and assignment (ShareGroupHeartbeat, ShareGroupDescribe) are its coordinator's, the node of its
coordinator partition (:mod:`.group_coordinators`), while ShareFetch and ShareAcknowledge go to each partition's
leader, the node it is placed on, which holds that share-partition's records in flight and keeps them durable in its
own ``share_groups.log``.

So a ShareFetch / ShareAcknowledge names partitions of its share session that are this node's: one placed on
another node is answered NOT_LEADER_OR_FOLLOWER with KIP-951's ``CurrentLeader`` and the leader's endpoint in
``NodeEndpoints`` (:mod:`.leaders`), and is neither added to the session nor acknowledged here. A partition leader
that does not coordinate the group does not know its members: it opens a share session for any member id, as
Kafka's share-partition leader does, and the records a member holds there come back when their locks end, when it
closes its session there (epoch -1), or when the session asked nothing for a member session timeout
(:class:`~walgate.coordinator.share_coordinator.ShareCoordinator`). On a single node every partition and group is the node's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.leaders import current_leader, node_endpoints, other_nodes
from walgate.storage.partitions import LEADER_EPOCH
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import ShareAcknowledgeRequestAcknowledgeTopic, ShareFetchRequestFetchTopic

__all__ = ["Elsewhere", "Leaders", "coordinates", "elsewhere"]

Topics = Sequence[ShareFetchRequestFetchTopic] | Sequence[ShareAcknowledgeRequestAcknowledgeTopic]
Elsewhere = Mapping[tuple[str, int], int]
"""(topic key, partition) -> the node a partition of the request is placed on, for those not on this node."""


async def coordinates(broker: Broker, group_id: str) -> bool | None:
    """This node coordinates ``group_id`` (always on a single node): its members are known here. None when the
    placement of coordinators cannot be read now: the share coordinator decides from the membership it holds
    (:meth:`~walgate.coordinator.share_coordinator.ShareCoordinator.session`)."""
    code = await refusal(broker.coordinators, group_id)
    return None if code == ErrorCode.coordinator_not_available else code == ErrorCode.none


def elsewhere(node_id: int, topics: TopicsSnapshot, names: Mapping[str, str | None],
              requested: Topics) -> dict[tuple[str, int], int]:
    """The partitions of ``requested`` (of the topics ``names`` resolved) placed on a node other than ``node_id``."""
    out: dict[tuple[str, int], int] = {}
    for t in requested:
        key = str(t.topic_id)
        name = names.get(key)
        if name is None:
            continue
        for p in t.partitions:
            node = topics.node_of(name, p.partition_index, node_id)
            if node != node_id:
                out[(key, p.partition_index)] = node
    return out


class Leaders:
    """The ``current_leader`` of each partition of an answer and its ``node_endpoints``: this node for its own
    partitions, the node of those placed elsewhere (leader -1 while that node is not registered)."""

    def __init__(self, broker: Broker, listener: str, placed: Elsewhere) -> None:
        self._node_id = broker.node_id
        self._placed = placed
        self._others = other_nodes(broker, listener) if placed else {}

    def of(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) of the partition."""
        node = self._placed.get((topic, partition))
        return (self._node_id, LEADER_EPOCH) if node is None else current_leader(node, self._others)

    def endpoints(self, answered: Iterable[tuple[str, int]]) -> list[Any]:
        """The endpoints of the leaders of those ``answered`` partitions placed elsewhere."""
        return node_endpoints((self._placed[tp] for tp in answered if tp in self._placed), self._others)
