"""Jepsen-style scenarios of a replicated cluster's group coordinator (issue 25, docs/plans/replication-wiring.md
§7-8: "coordinator killed mid-rebalance and mid-commit"): three etcd members, three ``walgate serve`` nodes
(``replication.enable=true``), a topic of replication factor 3, a group of stock confluent-kafka consumers committing
synchronously after every poll (group_workload.py), the group's coordinator (the leader of its ``__consumer_offsets``
partition) killed -9 or paused, and group_history.py's checker: every acknowledged record read, no acknowledged
commit going backwards or lost (the group's offsets read from the new coordinator at the end), no member starting
below a commit acknowledged before its assignment (records read twice are only those after it; counted), no gap
within an assignment, and once the group settles every partition held by exactly one member.

Seeded and bounded: CI runs seed 1 of each with few faults (two kills in the commit loop); ``WALGATE_JEPSEN=1`` runs
seeds 1-10, ten kills, more acknowledged commits between faults, and the commit loop with KIP-848 members
(confluent-kafka's ``group.protocol=consumer``) too. Not driven here yet: the Java consumer, and KIP-848 members
mid-rebalance or under a zombie.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster, etcd_cluster
from group_history import Commit, Read, check, owners, rereads
from group_workload import GROUP, PARTITIONS, TOPIC, GroupWorkload
from replicated_workload import LONG, SEEDS, Nodes, metric_sum, no_traceback, three_ready
from serve_support import create_topics

KILLS = 10 if LONG else 2  # the coordinator's kills in the commit loop (each restart takes 6-25 s here)
COMMITS = 60 if LONG else 20  # acknowledged commits between faults
PROTOCOLS = ("classic", "consumer") if LONG else ("classic",)  # the members' group.protocol in the commit loop
JOINED = f"member joined group={GROUP} "


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A three-member etcd."""
    with etcd_cluster(tmp_path / "etcd", 3) as cluster:
        yield cluster


@pytest.fixture
def nodes(etcd3: EtcdCluster, tmp_path: Path) -> Iterator[Nodes]:
    """Nodes 1-3 ready, with topic :data:`TOPIC` (:data:`PARTITIONS` partitions, replication factor 3); stopped by
    PID at the end."""
    nodes = Nodes(etcd3, tmp_path)
    try:
        nodes.start_all((1, 2, 3))
        three_ready(nodes)
        create_topics(nodes.bootstrap(), NewTopic(TOPIC, PARTITIONS, 3))
        yield nodes
    finally:
        nodes.close()


def new_coordinator(nodes: Nodes, load: GroupWorkload, old: int) -> int:
    """Until FindCoordinator names a running node other than ``old``; that node."""
    named: list[int] = []

    def moved() -> bool:
        named.append(load.coordinator())
        return named[-1] not in (-1, old) and named[-1] in nodes.servers

    load.wait(f"a coordinator of {GROUP} other than node {old}", moved)
    load.note(f"node {named[-1]} coordinates")
    return named[-1]


def three_members(load: GroupWorkload) -> None:
    """Members m1-m3 joined, until the group settled with them."""
    for m in ("m1", "m2", "m3"):
        load.join(m)
    settle(load, 3)


def ready_for_a_fault(load: GroupWorkload, what: str) -> int:
    """Until :data:`COMMITS` more commits are acknowledged and every running node is in the ISR of the group's
    ``__consumer_offsets`` partition; the group's coordinator then."""
    load.wait_more(Commit, COMMITS, what, "ok")
    load.wait("every node in the group partition's ISR", load.offsets_in_sync)
    return load.coordinator()


def settle(load: GroupWorkload, members: int) -> None:
    """Until the group is stable with its ``members`` members, each holding what DescribeGroups assigns it; then
    every partition held by exactly one."""
    try:
        load.wait(f"the group settled with {members} members", lambda: len(load.members) == members and load.settled())
    except AssertionError as e:
        raise AssertionError(f"{e}; the members hold {load.assignments()}, DescribeGroups answered"
                             f" {load.last_described}") from e
    load.note(f"the group settled with {members} members")
    assert owners(load.assignments(), PARTITIONS) == [], load.assignments()


def checked(nodes: Nodes, load: GroupWorkload, seed: int) -> None:
    """The workload finished and its history checked, and no node's log holds a traceback."""
    final = load.finish()
    found = check(load.history, final)
    assert found == [], f"seed {seed}: {len(found)} violations, the first: {found[:10]}; faults: {load.events}"
    assert final, "the group committed offsets"
    no_traceback(nodes)


@pytest.mark.parametrize("seed", SEEDS)
def test_coordinator_killed_mid_rebalance(nodes: Nodes, seed: int) -> None:
    """Three members consume and commit; a fourth joins, and once its JoinGroup reached the coordinator (its
    "member joined" log line; the others rejoin at their next heartbeat, 3 s apart, so the group is between
    JoinGroup and SyncGroup) the coordinator's node is killed -9. The partition's new leader coordinates; the group
    settles with four members, each partition held by one; the node restarted, more commits; nothing read is lost,
    re-read below an acknowledged commit, or committed backwards."""
    with GroupWorkload(nodes, seed, heartbeat_ms=3000) as load:
        rebalance_killed(nodes, load)
        checked(nodes, load, seed)
    print(f"seed {seed}: {load.count(Read)} reads, {rereads(load.history)} of records read before; {load.events}")


def rebalance_killed(nodes: Nodes, load: GroupWorkload) -> None:
    """The faults and waits of :func:`test_coordinator_killed_mid_rebalance`."""
    three_members(load)
    old = ready_for_a_fault(load, "before the rebalance")
    log = nodes.servers[old].log
    joined = log().count(JOINED)
    load.join("m4")
    load.wait("m4's JoinGroup at the coordinator", lambda: log().count(JOINED) > joined)
    nodes.kill(old)
    load.note(f"node {old}, the coordinator, killed after m4's JoinGroup")
    tail = log()[log().rindex(JOINED):]  # (all it logged before it died)
    assert f"rebalance group={GROUP} type=classic generation=" not in tail, f"the rebalance ended first: {tail}"
    new_coordinator(nodes, load, old)
    settle(load, 4)
    load.wait_more(Commit, COMMITS, "after the rebalance", "ok")
    nodes.start(old)
    load.note(f"node {old} restarted")
    load.wait_more(Commit, COMMITS, f"after node {old} restarted", "ok")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("seed", SEEDS)
def test_coordinator_killed_in_a_commit_loop(nodes: Nodes, seed: int, protocol: str) -> None:
    """Three members (``protocol``: the classic group protocol, or KIP-848's) commit synchronously after every poll
    while the coordinator's node is killed -9, :data:`KILLS` times (each restarted on its data dir once another
    coordinates and commits are acknowledged there): every commit a member saw acknowledged is at or below the
    group's offset read from the last coordinator."""
    with GroupWorkload(nodes, seed, protocol=protocol) as load:
        kill_loop(nodes, load)
        checked(nodes, load, seed)
    print(f"seed {seed}: {load.count(Commit, 'ok')} commits acknowledged, {load.count(Commit, 'info')} not;"
          f" {rereads(load.history)} records read again; {load.events}")


def kill_loop(nodes: Nodes, load: GroupWorkload) -> None:
    """The faults and waits of :func:`test_coordinator_killed_in_a_commit_loop`."""
    three_members(load)
    for kill in range(KILLS):
        old = ready_for_a_fault(load, f"before kill {kill}")
        nodes.kill(old)
        load.note(f"node {old}, the coordinator, killed")
        new_coordinator(nodes, load, old)
        load.wait_more(Commit, COMMITS, f"after kill {kill}", "ok")
        nodes.start(old)
        load.note(f"node {old} restarted")
    settle(load, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_zombie_coordinator(nodes: Nodes, seed: int) -> None:
    """The coordinator's node paused (SIGSTOP) past its lease while the members commit (their commits queue on its
    sockets), until another node coordinates and acknowledges commits, then resumed (SIGCONT): what it answers
    after the resume may not be an acknowledgement (an acknowledged commit it then lost, or one below a commit the
    new coordinator acknowledged, is a violation); the members settle on the new coordinator."""
    with GroupWorkload(nodes, seed) as load:
        refused = paused_and_resumed(nodes, load)
        checked(nodes, load, seed)
    print(f"seed {seed}: {load.count(Commit, 'ok')} commits acknowledged, {load.count(Commit, 'info')} not,"
          f" {refused} refused by the zombie once resumed; {load.events}")
    assert refused > 0, "the zombie refused no commit: none was queued for it"


def paused_and_resumed(nodes: Nodes, load: GroupWorkload) -> int:
    """The faults and waits of :func:`test_zombie_coordinator`; the OffsetCommits the zombie answered with an
    error from just before its pause until it gave the partition up."""
    three_members(load)
    zombie = ready_for_a_fault(load, "before the pause")
    before = _commit_errors(nodes, zombie)
    nodes.pause(zombie)
    load.note(f"node {zombie}, the coordinator, paused")
    try:
        new_coordinator(nodes, load, zombie)
        load.wait_more(Commit, COMMITS, "on the new coordinator", "ok")
    finally:
        nodes.resume(zombie)
        load.note(f"node {zombie} resumed")
    load.wait(f"node {zombie} gives up the group's partition",
               lambda: "partition 0: unloaded (led elsewhere now)" in nodes.servers[zombie].log())
    refused = _commit_errors(nodes, zombie) - before
    load.wait_more(Commit, COMMITS, f"after node {zombie} resumed", "ok")
    settle(load, 3)
    assert load.coordinator() != zombie
    return int(refused)


def _commit_errors(nodes: Nodes, node_id: int) -> float:
    """The OffsetCommit answers with an error (any but NONE) node ``node_id`` gave since it started (its
    ``/metrics``)."""
    server = nodes.servers[node_id]
    return (metric_sum(server, "kafka_network_requestmetrics_errors_total", request="OffsetCommit")
            - metric_sum(server, "kafka_network_requestmetrics_errors_total", request="OffsetCommit", error="NONE"))
