"""A node's replication traffic: its two replication throttles (KIP-73) and the bytes it sends and copies, counted
as Kafka's ``BrokerTopicMetrics`` count them (event loop only).

As a leader, the node answers a follower's WalFetch (:mod:`walgate.gateway.kafka.handlers.wal_fetch`): a vnode of a
Kafka-native topic whose ``leader.replication.throttled.replicas`` names it on this node (``p:<this node>`` or
``*``) is a throttled one; while this node's leader quota (``leader.replication.throttled.rate``) is exceeded, a
follower not in the vnode's ISR is answered without entries (:meth:`hold_leader`, Kafka's ``shouldLeaderThrottle``).
As a follower (:class:`~walgate.gateway.replica_fetcher.ReplicaFetcher`), likewise with
``follower.replication.throttled.replicas`` and ``follower.replication.throttled.rate``: a throttled vnode whose
replica is not caught up (its lag after the last answer above 0, or no answer yet: Kafka's ``isReplicaInSync``) is
left out of the fetches while the follower quota is exceeded (:meth:`hold_follower`, ``shouldFollowerThrottle``). The
bytes of every throttled vnode are recorded in its side's quota, in sync or not (:meth:`sent`, :meth:`copied`), so
all throttled traffic stays under the rate; the quotas are :class:`~walgate.replication.throttle.ReplicationQuota`.

The lists and rates are read from the catalog's published topics snapshot (:meth:`Engine.topics
<walgate.storage.engine.Engine.topics>`): the topic configs as set, the dynamic broker configs of this node, else
the cluster default (IncrementalAlterConfigs / AlterConfigs on a BROKER resource, visible in DescribeConfigs); read
again when the snapshot's generation moves. A database's TDengine topics take no topic configs: only Kafka-native
topics' vnodes are throttled.

Counted for ``/metrics`` (:mod:`walgate.gateway.replica_status`): the entry bytes sent to followers and copied from
leaders (Kafka's ReplicationBytesOutPerSec / ReplicationBytesInPerSec), those of them sent to or copied by a replica
a move is adding (ReassignmentBytesOutPerSec / ReassignmentBytesInPerSec: a move's progress), and each quota's rate
(Kafka's ``LeaderReplication`` / ``FollowerReplication`` ``byte-rate``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from walgate.replication.partition import PartitionState
from walgate.replication.throttle import ReplicationQuota, rate_in_force, throttled
from walgate.storage.topics_snapshot import TopicsSnapshot

__all__ = ["LEADER_RATE", "FOLLOWER_RATE", "LEADER_REPLICAS", "FOLLOWER_REPLICAS", "ReplicationTraffic",
           "TrafficCounts"]

LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


@dataclass
class TrafficCounts:
    """Entry bytes since the node started (Kafka's BrokerTopicMetrics meters, all topics)."""

    replication_out: int = 0
    replication_in: int = 0
    reassignment_out: int = 0
    reassignment_in: int = 0


class ReplicationTraffic:
    """Node ``node_id``'s replication quotas and byte counts; ``topics()`` the catalog's latest snapshot,
    ``state_of(db id, vgroup)`` the partition state this node last read (None: none), ``clock`` seconds on a
    monotonic clock."""

    def __init__(self, node_id: int, topics: Callable[[], TopicsSnapshot],
                 state_of: Callable[[str, int], PartitionState | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self._topics = topics
        self._state_of = state_of
        self._clock = clock
        self.leader = ReplicationQuota()
        self.follower = ReplicationQuota()
        self.counts = TrafficCounts()
        self._generation: int | None = None

    def _read(self) -> TopicsSnapshot:
        """The latest snapshot, the quotas' bounds set from it when its generation moved."""
        snapshot = self._topics()
        if snapshot.generation != self._generation:
            own, cluster = snapshot.broker_configs(str(self.node_id)), snapshot.broker_configs("")
            self.leader.bound = rate_in_force(own.get(LEADER_RATE), cluster.get(LEADER_RATE))
            self.follower.bound = rate_in_force(own.get(FOLLOWER_RATE), cluster.get(FOLLOWER_RATE))
            self._generation = snapshot.generation
        return snapshot

    def _throttled(self, key: str, db: str, vgroup: int) -> bool:
        """Whether the Kafka-native topic of ``db`` lists vnode ``vgroup`` on this node in its config ``key``."""
        topic = self._read().native_topic_of(db)
        return topic is not None and throttled(topic.configs.get(key, ""), vgroup, self.node_id)

    def hold_leader(self, db: str, vgroup: int, replica: int, state: PartitionState) -> bool:
        """Whether this node, leading ``db``'s vnode ``vgroup`` in ``state``, answers ``replica``'s fetch without
        entries now: throttled here, ``replica`` not in the ISR, the leader quota exceeded."""
        return (replica not in state.isr_ids and self._throttled(LEADER_REPLICAS, db, vgroup)
                and self.leader.exceeded(self._clock()))

    def sent(self, db: str, vgroup: int, replica: int, state: PartitionState, size: int) -> None:
        """``size`` entry bytes of ``db``'s vnode ``vgroup`` answered to follower ``replica``."""
        if size <= 0:
            return
        self.counts.replication_out += size
        if replica in state.adding:
            self.counts.reassignment_out += size
        if self._throttled(LEADER_REPLICAS, db, vgroup):
            self.leader.record(size, self._clock())

    def hold_follower(self, db: str, vgroup: int, in_sync: bool) -> float:
        """How long this node, following ``db``'s vnode ``vgroup``, leaves it out of its fetches (seconds; 0: fetch
        it now): throttled here, not caught up, the follower quota exceeded."""
        if in_sync or not self._throttled(FOLLOWER_REPLICAS, db, vgroup):
            return 0.0
        return self.follower.delay(self._clock())

    def copied(self, db: str, db_id: str, vgroup: int, size: int) -> None:
        """``size`` entry bytes of ``db``'s (id ``db_id``) vnode ``vgroup`` copied from its leader."""
        if size <= 0:
            return
        self.counts.replication_in += size
        state = self._state_of(db_id, vgroup)
        if state is not None and self.node_id in state.adding:
            self.counts.reassignment_in += size
        if self._throttled(FOLLOWER_REPLICAS, db, vgroup):
            self.follower.record(size, self._clock())

    def byte_rates(self) -> tuple[float, float]:
        """The leader and follower quotas' rates now (bytes/s)."""
        now = self._clock()
        return self.leader.rate(now), self.follower.rate(now)
