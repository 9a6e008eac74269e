"""What a cluster node tells of its replicas (issue 26, "Seeing it"): Kafka's replication metrics on ``/metrics``
and ``/readyz``'s ``replicas`` check.

The numbers come from one :class:`ReplicaCensus`, taken on the event loop (the only place the replica manager's maps
change: :class:`~walgate.gateway.replicas.ReplicaManager`) and counted by pure functions:

* as a leader, over the vnodes this node leads, each by the newest partition state its view holds (Kafka's
  ``ReplicaManager`` gauges, which count the partitions the broker leads): under-replicated (its ISR smaller than its
  replicas, those being added by a move in progress left out, as Kafka's ``Partition.isUnderReplicated`` counts),
  being moved (KIP-455's ReassigningPartitions), under ``min.insync.replicas`` (acks=all writes refused, KIP-164's UnderMinIsr) and at it (one more
  failure refuses them, KIP-427's AtMinIsr); the vnodes led (LeaderCount) and those whose state names this node a
  replica (PartitionCount); the ISR changes this node wrote as leader, those removing members and those adding them
  (IsrShrinksPerSec, IsrExpandsPerSec, counted by :meth:`PartitionStates.alter_isr
  <walgate.cluster.partition_states.PartitionStates.alter_isr>`);
* as a follower, each followed vnode's lag: how many versions the leader's high watermark was past this replica's
  WAL end after the last answer applied (Kafka's ``FetcherLagMetrics`` ConsumerLag: the high watermark minus the
  next offset), and their maximum (``ReplicaFetcherManager`` MaxLag). A vnode whose fetches fail keeps the lag of its
  last answer, as Kafka's does;
* as the controller (the node holding the controller election: ActiveControllerCount 1, 0 elsewhere), the leaders
  its reconciliation elected from outside the ISR and the ELR (ControllerStats' UncleanLeaderElectionsPerSec,
  counted by :class:`~walgate.cluster.partition_states.Reconciler`), and the partitions offline: no leader, or a
  leader not registered under the broker epoch its ISR entry names (its lease ran out or it restarted, and the
  controller has not moved leadership yet), over every partition state the node follows, against the registrations
  its membership last read (Kafka's ``KafkaController`` OfflinePartitionsCount, which only the active controller
  reports; 0 on the other nodes); and the moves of replicas it completed (KIP-455; ``Reconciler.moves_completed``:
  Kafka counts none, so the name is walgate's);
* the replication traffic (:class:`~walgate.gateway.replication_traffic.ReplicationTraffic`): entry bytes answered
  to followers and copied from leaders, and those of replicas a move is adding (BrokerTopicMetrics'
  Replication/ReassignmentBytesOut/InPerSec of all topics, as counters), and each replication throttle's rate (the
  ``LeaderReplication`` / ``FollowerReplication`` ``byte-rate`` of Kafka's ``ReplicationQuotaManager``, KIP-73).

Names are the JMX exporter's rendering of those MBeans (:mod:`walgate.gateway.metrics`); a vnode is labelled by its
``database`` (a Kafka-native topic's is the topic's ``kafka_*`` database) and ``vgroup``.

Readiness (:func:`replicas_check`): a node is caught up once it read the partition states and is, under its own
broker epoch (KIP-903), in the ISR of every vnode whose state names it a replica; until then ``/readyz`` names what it
still lacks, so a rolling restart waits for it before stopping the next node.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.partition_states import Reconciler
from walgate.gateway.replicas import ReplicaManager
from walgate.gateway.replication_traffic import TrafficCounts
from walgate.replication.partition import PartitionState, leader_live, same_incarnation

__all__ = ["FollowedLag", "ReplicaCensus", "ReplicationCollector", "census", "offline", "replicas_check",
           "not_in_sync", "out_of_isr", "replication_metrics", "traffic_metrics"]

FETCHER_MANAGER = "Replica"
"""The ``clientId`` of Kafka's ``ReplicaFetcherManager`` MaxLag."""


@dataclass(frozen=True)
class FollowedLag:
    """A vnode followed here: its leader and its lag (versions)."""

    pid: PartitionId
    database: str
    leader: int
    lag: int


@dataclass(frozen=True)
class ReplicaCensus:
    """Node ``node_id`` (registered under ``broker_epoch``) and its replicas at one moment: every partition state it
    read (``read``: whether it read them at all), the state of each vnode it leads (its view's) with its database's
    name, the vnodes it follows, the registered nodes' broker epochs, its ISR changes written, whether it holds the
    controller election and the unclean elections its reconciliation wrote."""

    node_id: int
    broker_epoch: int
    read: bool
    states: dict[PartitionId, PartitionState]
    led: dict[PartitionId, tuple[str, PartitionState]]
    followed: list[FollowedLag]
    registered: dict[int, int]
    isr_shrinks: int
    isr_expands: int
    controller: bool
    unclean_elections: int = 0
    moves_completed: int = 0
    traffic: TrafficCounts = field(default_factory=TrafficCounts)
    byte_rates: tuple[float, float] = (0.0, 0.0)  # the leader's and the follower's replication quota's rate

    def name(self, pid: PartitionId) -> str:
        """``database/vgroup`` of ``pid`` where this node leads or follows it, else ``<database id>/vgroup``."""
        led = self.led.get(pid)
        database = led[0] if led is not None else next((f.database for f in self.followed if f.pid == pid), pid.db_id)
        return f"{database}/{pid.vgroup}"


def census(manager: ReplicaManager, reconciler: Reconciler | None) -> ReplicaCensus:
    """``manager``'s replicas and ``reconciler``'s controller now (on the event loop, which alone changes their
    state)."""
    followed = [FollowedLag(PartitionId(v.db_id, v.vgroup), v.db, leader, v.lag)
                for leader, f in manager.fetching.items() for v in f.fetcher.followed.values()]
    return ReplicaCensus(manager.node_id, manager.broker_epoch, manager.states.revision > 0,
                         dict(manager.states.states),
                         {pid: (led.key[0], led.view.state) for pid, led in manager.led.items()}, followed,
                         dict(manager.registered()), manager.states.isr_shrinks, manager.states.isr_expands,
                         reconciler is not None and reconciler.election.epoch is not None,
                         0 if reconciler is None else reconciler.unclean_elections,
                         0 if reconciler is None else reconciler.moves_completed,
                         dataclasses.replace(manager.traffic.counts), manager.traffic.byte_rates())


def not_in_sync(c: ReplicaCensus) -> list[PartitionId]:
    """The vnodes whose state names node ``c.node_id`` a replica but not an ISR member under its broker epoch."""
    return out_of_isr(c.states, c.node_id, c.broker_epoch)


def out_of_isr(states: Mapping[PartitionId, PartitionState], node_id: int, broker_epoch: int) -> list[PartitionId]:
    """The vnodes whose state in ``states`` names node ``node_id`` a replica but not an ISR member under
    ``broker_epoch`` (KIP-903): those it has not caught up on, registered under that epoch."""
    return sorted(pid for pid, s in states.items() if node_id in s.replicas and not (
        (m := s.member(node_id)) is not None and same_incarnation(m.broker_epoch, broker_epoch)))


def offline(c: ReplicaCensus) -> int:
    """Partitions with no leader, or a leader not registered under its ISR entry's broker epoch
    (:func:`~walgate.replication.partition.leader_live`)."""
    return sum(not leader_live(s, c.registered) for s in c.states.values())


def replicas_check(manager: ReplicaManager | None) -> str:
    """``/readyz``'s ``replicas`` check of a cluster node: "ok" once its replica manager read the partition states
    and the node is in the ISR of every vnode it replicates, else what it lacks."""
    if manager is None or manager.states.revision == 0:
        return "the partition states are not read yet"
    c = census(manager, None)
    lagging = not_in_sync(c)
    if not lagging:
        return "ok"
    return f"not in the ISR of {len(lagging)} vgroup(s) it replicates (catching up): " + ", ".join(
        c.name(pid) for pid in lagging)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def traffic_metrics(counts: TrafficCounts, byte_rates: tuple[float, float]) -> Iterator[Metric]:
    """The replication traffic's families: Kafka's BrokerTopicMetrics meters of all topics as counters, and the
    replication quotas' ``byte-rate`` (KIP-73)."""
    for name, doc, value in (
            ("replicationbytesout", "WAL entry bytes this node answered followers", counts.replication_out),
            ("replicationbytesin", "WAL entry bytes this node copied from leaders", counts.replication_in),
            ("reassignmentbytesout", "WAL entry bytes this node answered replicas a move is adding",
             counts.reassignment_out),
            ("reassignmentbytesin", "WAL entry bytes this node copied as a replica a move is adding",
             counts.reassignment_in)):
        yield CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, value=value)
    yield _gauge("kafka_server_leaderreplication_byte_rate", "Bytes/s of throttled replicas this node answered as "
                 "leader (leader.replication.throttled.rate bounds it)", byte_rates[0])
    yield _gauge("kafka_server_followerreplication_byte_rate", "Bytes/s of throttled replicas this node copied as "
                 "follower (follower.replication.throttled.rate bounds it)", byte_rates[1])


def replication_metrics(c: ReplicaCensus) -> Iterator[Metric]:
    """The families of ``c`` (the module docstring)."""
    led = sorted(c.led.items())
    yield _gauge("kafka_server_replicamanager_leadercount", "Replicated vgroups this node leads", len(led))
    yield _gauge("kafka_server_replicamanager_partitioncount", "Replicated vgroups whose state names this node a "
                 "replica", sum(c.node_id in s.replicas for s in c.states.values()))
    yield _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                 "Vgroups led here whose ISR is smaller than their replicas (those being added left out)",
                 sum(len(s.isr) < len(s.original) for _, (_, s) in led))
    yield _gauge("kafka_server_replicamanager_reassigningpartitions", "Vgroups led here whose replicas are being "
                 "moved (KIP-455)", sum(s.moving for _, (_, s) in led))
    yield _gauge("kafka_server_replicamanager_underminisrpartitioncount",
                 "Vgroups led here whose ISR is below min.insync.replicas (acks=all writes refused)",
                 sum(len(s.isr) < s.min_isr for _, (_, s) in led))
    yield _gauge("kafka_server_replicamanager_atminisrpartitioncount",
                 "Vgroups led here whose ISR is at min.insync.replicas", sum(len(s.isr) == s.min_isr for _, (_, s) in led))
    yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR changes this node wrote as leader that "
                              "removed members", value=c.isr_shrinks)
    yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR changes this node wrote as leader that "
                              "added members", value=c.isr_expands)
    yield _gauge("kafka_controller_kafkacontroller_activecontrollercount", "1 on the controller, 0 elsewhere",
                 int(c.controller))
    yield _gauge("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions with no live leader, counted "
                 "by the controller (0 elsewhere)", offline(c) if c.controller else 0)
    yield CounterMetricFamily("kafka_controller_controllerstats_uncleanleaderelections", "Leaders this node's "
                              "controller elected from outside the ISR and the ELR", value=c.unclean_elections)
    yield CounterMetricFamily("walgate_controller_reassignments_completed", "Moves of replicas (KIP-455) this node's "
                              "controller completed", value=c.moves_completed)
    yield from traffic_metrics(c.traffic, c.byte_rates)
    yield _labelled("kafka_cluster_partition_underreplicated", "1 when the vgroup led here is under-replicated",
                    ((d, p, int(len(s.isr) < len(s.original))) for p, (d, s) in led))
    yield _labelled("kafka_cluster_partition_insyncreplicascount", "ISR members of the vgroup led here",
                    ((d, p, len(s.isr)) for p, (d, s) in led))
    yield _labelled("kafka_cluster_partition_replicascount", "Replicas of the vgroup led here",
                    ((d, p, len(s.replicas)) for p, (d, s) in led))
    family = GaugeMetricFamily("kafka_server_fetcherlagmetrics_consumerlag", "Versions the leader's high watermark "
                               "is past this follower's WAL end", labels=["clientId", "database", "vgroup"])
    for f in sorted(c.followed, key=lambda f: f.pid):
        family.add_metric([f"ReplicaFetcherThread-0-{f.leader}", f.database, str(f.pid.vgroup)], f.lag)
    yield family
    family = GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag", "The largest lag of a vgroup followed "
                               "here (versions)", labels=["clientId"])
    family.add_metric([FETCHER_MANAGER], max((f.lag for f in c.followed), default=0))
    yield family


def _labelled(name: str, doc: str, rows: Iterable[tuple[str, PartitionId, int]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["database", "vgroup"])
    for database, pid, value in rows:
        family.add_metric([database, str(pid.vgroup)], value)
    return family


class ReplicationCollector(Collector):
    """The replication metrics at every scrape, once the node runs a replica manager (``manager()``, None before)
    beside the controller's ``reconciler`` (whose election says whether this node is the controller): the census
    taken on ``loop`` (the scrape runs off it, :meth:`Metrics.render <walgate.gateway.metrics.Metrics.render>`);
    nothing before."""

    def __init__(self, manager: Callable[[], ReplicaManager | None], reconciler: Reconciler,
                 loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._manager = manager
        self._reconciler = reconciler
        self._loop = loop
        self._timeout_s = timeout_s

    def describe(self) -> Iterable[Metric]:
        return ()

    async def _census(self) -> ReplicaCensus | None:
        manager = self._manager()
        return None if manager is None else census(manager, self._reconciler)

    def collect(self) -> Iterator[Metric]:
        future = asyncio.run_coroutine_threadsafe(self._census(), self._loop)
        try:
            taken = future.result(self._timeout_s)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"the event loop did not answer within {self._timeout_s:.0f} s") from None
        if taken is not None:
            yield from replication_metrics(taken)
