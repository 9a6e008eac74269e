"""Share groups over a cluster's nodes (docs/cluster.md, "Share groups"), as KIP-932 splits them: the group's
membership and assignment (ShareGroupHeartbeat, ShareGroupDescribe) are its coordinator's, the node of its
coordinator partition (:mod:`.group_coordinators`), while ShareFetch and ShareAcknowledge go to each partition's
leader, the node it is placed on, which holds that share-partition's records in flight and keeps them durable in its
own ``share_groups.log``.

So a ShareFetch / ShareAcknowledge names partitions of its share session that are this node's: one placed on
another node, or a replicated one (issue 25) this node does not lead now (:class:`~.leaders.Reads`, as Fetch decides:
its partition state's leader, in that state's leader epoch; none while no state was read), is answered
NOT_LEADER_OR_FOLLOWER with KIP-951's ``CurrentLeader`` and the leader's endpoint in ``NodeEndpoints``
(:mod:`.leaders`), and is not acknowledged here. A replicated one is added to the share session all the same, as
Kafka's broker adds every partition a ShareFetch names (``KafkaApis.handleShareFetchRequest``: ``newContext`` before
any leadership check), since Kafka's client lists a partition as added to a node's session once only
(``ShareSessionHandler``): a partition of the session this node does not lead now (not yet, or no longer) is
answered so at each fetch, neither read nor acquired, and read once this node leads it (the member's client asks the
leader, KIP-932). A one-copy partition placed on another node never moves here: it is not added. The
share-partition's state stays with the node that kept it (its ``share_groups.log``): the new leader starts its own at
``share.auto.offset.reset`` (its "latest" once its high watermark reached the start of its leader epoch:
:mod:`.share_reads`). A partition leader that does not coordinate the group does not know its members: it opens a
share session for any member id, as Kafka's share-partition leader does, and the records a member holds there come
back when their locks end, when it closes its session there (epoch -1), or when the session asked nothing for a
member session timeout (:class:`~walgate.coordinator.share_coordinator.ShareCoordinator`). On a single node every
partition and group is the node's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.leaders import Reads, current_leader, node_endpoints, other_nodes
from walgate.replication.partition import NO_LEADER
from walgate.storage.partitions import LEADER_EPOCH
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import ShareAcknowledgeRequestAcknowledgeTopic, ShareFetchRequestFetchTopic

__all__ = ["Elsewhere", "Leaders", "by_leadership", "coordinates", "elsewhere", "in_session", "requested"]

Topics = Sequence[ShareFetchRequestFetchTopic] | Sequence[ShareAcknowledgeRequestAcknowledgeTopic]
Elsewhere = Mapping[tuple[str, int], tuple[int, int]]
"""(topic key, partition) -> KIP-951's (leader id, leader epoch) of a partition of the request this node does not
serve: the node a one-copy partition is placed on (epoch 0), or the leader a replicated one's partition state names
(-1 when none is known)."""


async def coordinates(broker: Broker, group_id: str) -> bool | None:
    """This node coordinates ``group_id`` (always on a single node): its members are known here. None when the
    placement of coordinators cannot be read now: the share coordinator decides from the membership it holds
    (:meth:`~walgate.coordinator.share_coordinator.ShareCoordinator.session`)."""
    code = await refusal(broker.coordinators, group_id)
    return None if code == ErrorCode.coordinator_not_available else code == ErrorCode.none


def requested(names: Mapping[str, str | None], topics: Topics) -> list[tuple[str, str, int]]:
    """(topic key, topic name, partition) of the partitions of ``topics`` whose topic ``names`` resolved."""
    return [(str(t.topic_id), name, p.partition_index) for t in topics
            if (name := names.get(str(t.topic_id))) is not None for p in t.partitions]


def in_session(topics: TopicsSnapshot, partitions: Iterable[tuple[str, int]]) -> list[tuple[str, str, int]]:
    """(topic key, topic name, partition) of a share session's ``partitions`` whose topic ``topics`` still has."""
    return [(key, name, p) for key, p in partitions if (name := topics.topic_name(uuid.UUID(key))) is not None]


def elsewhere(broker: Broker, topics: TopicsSnapshot, partitions: Iterable[tuple[str, str, int]]
              ) -> dict[tuple[str, int], tuple[int, int]]:
    """Those of ``partitions`` (topic key, topic name, partition) this node does not serve now, with their leader
    (see :data:`Elsewhere`): a replicated one by leadership (:class:`~.leaders.Reads`), any other by placement."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    reads = Reads(broker, topics)
    node_id = broker.node_id
    for key, name, partition in partitions:
        if by_leadership(topics, name, partition):
            check = reads.check(name, partition, -1)
            if check.error != ErrorCode.none:
                out[(key, partition)] = (NO_LEADER if check.leader is None else check.leader, check.epoch)
        elif (node := topics.node_of(name, partition, node_id)) != node_id:
            out[(key, partition)] = (node, LEADER_EPOCH)
    return out


def by_leadership(topics: TopicsSnapshot, name: str, partition: int) -> bool:
    """Whether the partition is served by leadership (a replicated one: its leader moves, this node may serve it
    later), not by placement (a one-copy one: never moves)."""
    return topics.any_replicated and topics.replicated_vgroup(name, partition) is not None


class Leaders:
    """The ``current_leader`` of each partition of an answer and its ``node_endpoints``: this node for its own
    partitions, the leader of those it does not serve (leader -1 while that node is not registered or none is
    known)."""

    def __init__(self, broker: Broker, listener: str, placed: Elsewhere) -> None:
        self._node_id = broker.node_id
        self._placed = placed
        self._others = other_nodes(broker, listener) if placed else {}

    def of(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader id, leader epoch) of the partition."""
        leader = self._placed.get((topic, partition))
        return (self._node_id, LEADER_EPOCH) if leader is None else current_leader(leader[0], self._others, leader[1])

    def endpoints(self, answered: Iterable[tuple[str, int]]) -> list[Any]:
        """The endpoints of the leaders of those ``answered`` partitions this node does not serve."""
        return node_endpoints((self._placed[tp][0] for tp in answered if tp in self._placed), self._others)
