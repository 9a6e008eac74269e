"""The topics (and group configs) as the coordinator lane sees them: an immutable snapshot the storage lane publishes
(issue 23).

The catalog (topics, databases, which databases are served) belongs to the storage lane and changes in place; the
group and transaction coordinators run on a lane of their own and must not read it there. So the storage lane
publishes a :class:`TopicsSnapshot` (``Store.publish_topics``) at the end of every call that changed the catalog
(its ``generation`` moved; a CreateTopics defers it to its last topic's call, ``Engine.defer_topics_publication``)
and before it deletes a dropped topic's committed offsets; publishing is one reference
assignment, atomic for readers on any thread. A snapshot is four C-level dict/set copies of frozen definitions
(O(topics) at C speed per publishing call); the name-by-id map the KIP-848 handlers need, and whether any database is
replicated (the reads' leadership check, issue 25), are found at most once per snapshot, on first use.

Invariant: a snapshot never changes after it is published; a reader holding one sees one consistent catalog state
(that of the end of some storage-lane call).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from walgate.storage.resource_configs import BROKER, GROUP

if TYPE_CHECKING:
    from walgate.storage.catalog import DatabaseDef, TopicDef

__all__ = ["TopicsSnapshot", "EMPTY"]


class TopicsSnapshot:
    """Topics, their partition counts, kinds and Kafka topic ids at one catalog ``generation``."""

    __slots__ = ("generation", "replication", "_topics", "_databases", "_served", "_configs", "_by_id", "_replicated", "_native")

    def __init__(self, generation: int, topics: Mapping[str, TopicDef], databases: Mapping[str, DatabaseDef],
                 served: frozenset[str], configs: Mapping[tuple[str, str], Mapping[str, str]],
                 replication: bool = False) -> None:
        """``served``: the databases whose vnodes are open (a database out of service has no partitions);
        ``configs``: the catalog's dynamic resource configs (its values are replaced, never changed in place);
        ``replication``: the catalog's (``replication.enable``: vgroups of one copy may be moved, issue 26)."""
        self.generation = generation
        self.replication = replication
        self._topics = dict(topics)
        self._databases = dict(databases)
        self._served = served
        self._configs = dict(configs)
        self._by_id: dict[uuid.UUID, str] | None = None
        self._replicated: bool | None = None
        self._native: dict[str, TopicDef] | None = None

    def group_configs(self, group_id: str) -> dict[str, str]:
        """The dynamic configs stored for consumer group ``group_id`` (IncrementalAlterConfigs GROUP)."""
        return dict(self._configs.get((GROUP, group_id), {}))

    def broker_configs(self, name: str) -> dict[str, str]:
        """The dynamic configs stored for broker ``name`` (a node id; "": the cluster-wide defaults)."""
        return dict(self._configs.get((BROKER, name), {}))

    def native_topic_of(self, db: str) -> TopicDef | None:
        """The Kafka-native topic database ``db`` holds (None: it holds none); its map built once per snapshot."""
        native = self._native
        if native is None:  # two threads may both build it: the same value, one kept
            native = self._native = {t.db: t for t in self._topics.values() if t.kind == "kafka"}
        return native.get(db)

    def __contains__(self, topic: object) -> bool:
        return topic in self._topics

    def names(self) -> frozenset[str]:
        """Every topic's name."""
        return frozenset(self._topics)

    def partition_count(self, topic: str) -> int | None:
        """``topic``'s partitions; None when there is no such topic (or its database is out of service)."""
        t = self._topics.get(topic)
        if t is None or t.db not in self._served:
            return None
        db = self._databases.get(t.db)
        return None if db is None else db.vgroups

    def has_partition(self, topic: str, partition: int) -> bool:
        count = self.partition_count(topic)
        return count is not None and 0 <= partition < count

    def node_of(self, topic: str, partition: int, local: int) -> int:
        """The node id holding ``topic``'s partition ``partition`` (cluster mode's placement); ``local`` (this data
        dir's node id) for one of a database without placement, or of a topic this snapshot does not have."""
        t = self._topics.get(topic)
        db = None if t is None else self._databases.get(t.db)
        return local if db is None or not 0 <= partition < db.vgroups else db.node_of(partition, local)

    def placed_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        """The nodes the catalog places ``topic``'s partition ``partition`` on (the first its preferred leader; its
        partition state may name others while, or since, its replicas moved); () for one this snapshot does not
        have or of a database without placement."""
        t = self._topics.get(topic)
        db = None if t is None else self._databases.get(t.db)
        if db is None or db.replicas is None or not 0 <= partition < db.vgroups:
            return ()
        return db.replicas_of(partition, 0)

    def replicated_vgroup(self, topic: str, partition: int) -> tuple[str, int] | None:
        """(database id, vgroup) of ``topic``'s partition ``partition`` when its vgroup is replicated
        (``DatabaseDef.replicated``: its leader, leader epoch and ISR are its partition state's, issue 25), else None."""
        return self.vgroup_of(topic, partition, replicated=True)

    def vgroup_of(self, topic: str, partition: int, *, replicated: bool = False) -> tuple[str, int] | None:
        """(database id, vgroup) of ``topic``'s partition ``partition`` (``replicated``: only when that vgroup is
        ``DatabaseDef.replicated``), None for a topic or partition not known."""
        t = self._topics.get(topic)
        db = None if t is None else self._databases.get(t.db)
        if db is None or not 0 <= partition < db.vgroups or (replicated and not db.replicated(partition)):
            return None
        return db.id, partition

    @property
    def any_replicated(self) -> bool:
        """Whether some database has a replicated vgroup (else :meth:`replicated_vgroup` is None for every
        partition); looked at once per snapshot, on first use."""
        replicated = self._replicated
        if replicated is None:  # two threads may both look: the same value, one kept
            replicated = self._replicated = any(db.any_replicated for db in self._databases.values())
        return replicated

    def is_native(self, topic: str) -> bool:
        """Whether ``topic`` is a Kafka-native topic (TDengine topics cannot take transaction markers)."""
        t = self._topics.get(topic)
        return t is not None and t.kind == "kafka"

    def topic(self, name: str) -> TopicDef | None:
        """``name``'s definition (None: no such topic)."""
        return self._topics.get(name)

    def topic_id(self, name: str) -> uuid.UUID | None:
        t = self._topics.get(name)
        return None if t is None else uuid.UUID(t.topic_id)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        by_id = self._by_id
        if by_id is None:  # two threads may both build it: the same value, one kept
            by_id = self._by_id = {uuid.UUID(t.topic_id): name for name, t in self._topics.items()}
        return by_id.get(topic_id)

    def databases(self) -> Mapping[str, DatabaseDef]:
        """The databases by name (not to be changed: the snapshot's own)."""
        return self._databases

    def database_by_id(self, db_id: str) -> DatabaseDef | None:
        """The database whose id (its directory's name) is ``db_id`` (None: none)."""
        return next((db for db in self._databases.values() if db.id == db_id), None)


EMPTY = TopicsSnapshot(-1, {}, {}, frozenset(), {})
"""Before the first publication."""
