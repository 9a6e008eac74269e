"""A replicated cluster's share-group administration from the share coordinator's own records (KIP-932;
docs/cluster.md, "Share groups").

With ``replication.enable`` every share-partition state of a group is a record ``["s", group, topic key,
partition]`` of the group's own ``__consumer_offsets`` partition (:mod:`.share_persister`), kept by that partition's
leader, the group's coordinator, whichever nodes lead the data partitions now. So the coordinator answers
DescribeShareGroupOffsets, ListGroups' share groups and whether an id is an (empty) share group from those records,
as Kafka's group coordinator asks its share coordinator (``GroupCoordinatorService`` through the persister), and
never from the share-partitions its node happened to use as a data partition's leader. Its changes
(AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups) go to each share-partition's leader now
(:func:`~.share_remote.led_elsewhere`), which changes its own share-partition and writes the record through the
persister, fenced by its leader epoch: so the leader's in-memory state and the record never differ (Kafka writes the
record first and fences the leader's cached state with a state epoch instead).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from walgate.coordinator.share_admin import recorded_groups
from walgate.coordinator.share_coordinator import ShareKey
from walgate.gateway.kafka.broker import Broker
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.topics_snapshot import TopicsSnapshot

__all__ = ["group_records", "persisted", "recorded_ids"]


def persisted(broker: Broker) -> bool:
    """Whether the share-partition states are the share coordinator's records (a replicated cluster)."""
    return broker.shares is not None and broker.shares.persister is not None


def group_records(broker: Broker, group_ids: Iterable[str]) -> dict[ShareKey, Any]:
    """On the coordinator lane: the recorded states (durable; deletions and topics deleted since left out) of the
    share-partitions of ``group_ids`` whose coordinator partition this node leads and has loaded ({} for the
    others, and when the states are not records: :func:`persisted`)."""
    coordinators = broker.coordinators
    replicated = None if coordinators is None else coordinators.replicated
    ids = set(group_ids)
    if coordinators is None or replicated is None or not persisted(broker):
        return {}
    out: dict[ShareKey, Any] = {}
    topics = broker.topics()
    for p in sorted({partition_for(g, coordinators.partitions) for g in ids}):
        log = replicated.share_log(p)
        if log is not None:
            out.update((k, v) for k, v in log.states().items() if k[0] in ids and _live(topics, k, v))
    return out


def _live(topics: TopicsSnapshot, key: ShareKey, value: Any) -> bool:
    """Whether a record holds a state (not a deletion) of a topic that still exists (a share-partition of a topic
    deleted since is none: no leader reads or writes it again)."""
    return value is not None and topics.topic_name(uuid.UUID(key[1])) is not None


def recorded_ids(broker: Broker) -> set[str]:
    """On the coordinator lane: the ids of the groups with a recorded share-partition state (of a topic that exists)
    in every coordinator partition this node leads and has loaded (none unless :func:`persisted`)."""
    coordinators = broker.coordinators
    replicated = None if coordinators is None else coordinators.replicated
    if coordinators is None or replicated is None or not persisted(broker):
        return set()
    topics = broker.topics()
    return set().union(*(recorded_groups((k, v) for k, v in log.states().items() if _live(topics, k, v))
                         for p in range(coordinators.partitions) if (log := replicated.share_log(p)) is not None))
