"""Kafka's replication metrics and ``/readyz``'s ``replicas`` check (:mod:`walgate.gateway.replica_status`, issue 26):
three in-process nodes over a real etcd (tests.gateway.test_replicas' trio), each node's metrics rendered as a scrape
renders them (off the event loop, the census taken on it).

What holds: with the ISR whole, the leader reports one vgroup led and none under-replicated, each follower a lag of 0
from ``ReplicaFetcherThread-0-1``, every node one partition and readiness "ok"; exactly one node is the active
controller and counts no partition offline. A follower stopped leaves the ISR: the leader counts one ISR shrink, one
under-replicated vgroup at ``min.insync.replicas``; restarted, it is not ready before it read the states, nor while
the ISR lacks it (named ``rep/0``), and ready once the leader expanded the ISR (one expansion counted, nothing
under-replicated). A state with no leader is one offline partition on the controller. The counting itself (lags, a
leader registered under another broker epoch, below ``min.insync.replicas``) is checked on censuses made by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tests.cluster.etcd_cluster import EtcdCluster
from tests.gateway.test_replicas import DB, DB_ID, Node, Trio, _is, etcd, trio, until
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.partition_states import PartitionStates, Reconciler
from walgate.gateway.replica_status import (
    FollowedLag,
    ReplicaCensus,
    ReplicationCollector,
    not_in_sync,
    offline,
    replicas_check,
    replication_metrics,
)
from walgate.gateway.replication_traffic import TrafficCounts
from walgate.replication.partition import NO_LEADER, IsrMember, PartitionState

__all__ = ["etcd"]  # (the fixture, imported)

PID = PartitionId(DB_ID, 0)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _controller(node: Node) -> bool:
    election = node.side.member.election
    return election is not None and election.epoch is not None


async def scrape(node: Node) -> Samples:
    """``node``'s replication metrics, rendered off the event loop as ``/metrics`` renders them (beside a reconciler
    that does not run: its election is the node's)."""
    member = node.side.member
    assert member.election is not None
    registry = CollectorRegistry()
    registry.register(ReplicationCollector(lambda: node.manager, Reconciler(
        PartitionStates(member.session, member.keys), member.election), asyncio.get_running_loop(), 10.0))
    return _samples((await asyncio.to_thread(generate_latest, registry)).decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


RM = "kafka_server_replicamanager_"


async def _leader_reports(t: Trio, **expected: float) -> bool:
    samples = await scrape(t.nodes[1])
    return all(value(samples, RM + name) == v for name, v in expected.items())


async def test_the_leader_followers_and_controller_report_as_kafka_names_them(
        etcd: EtcdCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with trio(etcd, tmp_path, monkeypatch) as t:
        await t.started()
        await t.insert(1, 0)
        await t.caught_up(2, 3)
        for n in (2, 3):  # a follower's lag after an answer that brought it to the leader's high watermark
            await until(lambda n=n: _is(bool(t.nodes[n].manager.fetching)), f"node {n} fetches")
        await until(lambda: _leader_reports(t, leadercount=1, underreplicatedpartitions=0), "node 1 leads")
        one = await scrape(t.nodes[1])
        assert value(one, RM + "partitioncount") == 1 and value(one, RM + "atminisrpartitioncount") == 0
        assert value(one, "kafka_cluster_partition_insyncreplicascount", database=DB, vgroup="0") == 3
        assert value(one, RM + "isrshrinks_total") == value(one, RM + "isrexpands_total") == 0
        for n in (2, 3):
            samples = await scrape(t.nodes[n])
            assert value(samples, RM + "leadercount") == 0 and value(samples, RM + "partitioncount") == 1
            assert value(samples, "kafka_server_fetcherlagmetrics_consumerlag", clientId="ReplicaFetcherThread-0-1",
                         database=DB, vgroup="0") == 0
            assert value(samples, "kafka_server_replicafetchermanager_maxlag", clientId="Replica") == 0
        await until(lambda: _is(sum(map(_controller, t.nodes.values())) == 1), "a controller elected")
        controllers = [await scrape(node) for node in t.nodes.values()]
        assert sorted(value(s, "kafka_controller_kafkacontroller_activecontrollercount") for s in controllers) == [0, 0, 1]
        assert [value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") for s in controllers] == [0, 0, 0]
        assert [replicas_check(node.manager) for node in t.nodes.values()] == ["ok"] * 3

        await t.stop(3)
        await until(lambda: t.isr_is({1, 2}), "node 3 leaves the ISR")
        await until(lambda: _leader_reports(t, underreplicatedpartitions=1, atminisrpartitioncount=1,
                                            underminisrpartitioncount=0, isrshrinks_total=1),
                    "node 1 reports the shrink")
        one = await scrape(t.nodes[1])
        assert value(one, "kafka_cluster_partition_underreplicated", database=DB, vgroup="0") == 1
        proposer = t.nodes[1].led()[PID].proposer
        assert proposer is not None
        proposer.cancel()  # the ISR stays (1, 2) until node 1 leads anew
        await t.insert(1, 1)

        t.start(3)
        three = t.nodes[3].manager
        assert replicas_check(three) == "the partition states are not read yet"
        await until(lambda: _is(three.states.revision > 0), "node 3 read the states")
        assert replicas_check(three) == "not in the ISR of 1 vgroup(s) it replicates (catching up): rep/0"
        await t.caught_up(3)
        await t.write_state(replace(await t.state(), leader_epoch=2))  # node 1 leads epoch 2: a new proposer
        await until(lambda: t.isr_is({1, 2, 3}), "node 3 rejoins the ISR")
        await until(lambda: _is(replicas_check(three) == "ok"), "node 3 is ready")
        await until(lambda: _leader_reports(t, underreplicatedpartitions=0, isrexpands_total=1, isrshrinks_total=1),
                    "node 1 reports the expansion")

        await t.write_state(replace(await t.state(), leader=NO_LEADER, leader_epoch=3))
        controller = next(node for node in t.nodes.values() if _controller(node))

        async def counted_offline() -> bool:
            return value(await scrape(controller), "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
        await until(counted_offline, "the controller counts the vgroup offline")


def _state(leader: int, isr: dict[int, int], min_isr: int = 2) -> PartitionState:
    return PartitionState((1, 2, 3), leader, 1, 5, tuple(IsrMember(r, e) for r, e in sorted(isr.items())), (),
                          min_isr)


def test_counts_of_a_census() -> None:
    whole = _state(1, {1: 10, 2: 20, 3: 30})
    short = _state(1, {1: 10}, min_isr=2)
    restarted_leader = _state(2, {1: 10, 2: 20, 3: 30})  # node 2 registered under 21 now: not a live leader
    other = PartitionId("other", 4)
    c = ReplicaCensus(1, 10, True, {PID: whole, PartitionId(DB_ID, 1): short, other: restarted_leader},
                      {PID: (DB, whole), PartitionId(DB_ID, 1): (DB, short)},
                      [FollowedLag(other, "db2", 2, 7), FollowedLag(PartitionId("x", 0), "db3", 3, 2)],
                      {1: 10, 2: 21, 3: 30}, 4, 3, True, 2)
    samples = _samples(_render(c))
    assert value(samples, RM + "underreplicatedpartitions") == 1 and value(samples, RM + "reassigningpartitions") == 0
    assert value(samples, RM + "underminisrpartitioncount") == 1 and value(samples, RM + "atminisrpartitioncount") == 0
    assert value(samples, RM + "partitioncount") == 3 and value(samples, RM + "leadercount") == 2
    assert value(samples, RM + "isrshrinks_total") == 4 and value(samples, RM + "isrexpands_total") == 3
    assert value(samples, "kafka_server_fetcherlagmetrics_consumerlag", clientId="ReplicaFetcherThread-0-2",
                 database="db2", vgroup="4") == 7
    assert value(samples, "kafka_server_replicafetchermanager_maxlag", clientId="Replica") == 7
    assert offline(c) == 1 and value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    assert value(samples, "kafka_controller_controllerstats_uncleanleaderelections_total") == 2
    assert not_in_sync(c) == []
    node3 = replace(c, node_id=3, broker_epoch=31, controller=False)  # restarted: its ISR entries are under 30
    assert not_in_sync(node3) == [PID, PartitionId(DB_ID, 1), other] and node3.name(other) == "db2/4" and node3.name(PID) == f"{DB}/0"
    assert value(_samples(_render(node3)), "kafka_controller_kafkacontroller_offlinepartitionscount") == 0


def test_a_move_in_progress_is_counted_and_its_adding_replicas_are_not_under_replication() -> None:
    moving = replace(_state(1, {1: 10, 2: 20}), replicas=(1, 2, 3), adding=(3,))  # 3 adding, not in sync yet
    shrunk = replace(_state(1, {1: 10}), replicas=(1, 2, 3), adding=(3,))  # 2 out of sync too
    c = ReplicaCensus(1, 10, True, {PID: moving, PartitionId(DB_ID, 1): shrunk},
                      {PID: (DB, moving), PartitionId(DB_ID, 1): (DB, shrunk)}, [], {1: 10, 2: 20, 3: 30}, 0, 0, False)
    samples = _samples(_render(c))
    assert value(samples, RM + "reassigningpartitions") == 2 and value(samples, RM + "underreplicatedpartitions") == 1
    assert value(samples, "kafka_cluster_partition_underreplicated", database=DB, vgroup="0") == 0


def test_the_completed_moves_and_the_replication_traffic_are_counted() -> None:
    whole = _state(1, {1: 10, 2: 20, 3: 30})
    c = ReplicaCensus(1, 10, True, {PID: whole}, {PID: (DB, whole)}, [], {1: 10, 2: 20, 3: 30}, 0, 0, True,
                      moves_completed=3, traffic=TrafficCounts(700, 500, 400, 200), byte_rates=(1234.5, 6.0))
    samples = _samples(_render(c))
    assert value(samples, "walgate_controller_reassignments_completed_total") == 3
    bt = "kafka_server_brokertopicmetrics_"
    assert [value(samples, bt + k + "_total") for k in ("replicationbytesout", "replicationbytesin",
                                                        "reassignmentbytesout", "reassignmentbytesin")] == [
        700, 500, 400, 200]
    assert value(samples, "kafka_server_leaderreplication_byte_rate") == 1234.5
    assert value(samples, "kafka_server_followerreplication_byte_rate") == 6.0


class _Census(Collector):
    def __init__(self, c: ReplicaCensus) -> None:
        self.c = c

    def collect(self) -> Iterator[Metric]:
        return replication_metrics(self.c)


def _render(c: ReplicaCensus) -> str:
    registry = CollectorRegistry()
    registry.register(_Census(c))
    return generate_latest(registry).decode()
