"""Network partitions on a ``REPLICA 3`` database (issue 25): three etcd members (hosts e0-e2) and nodes 1-3 (hosts
n1-n3), each in its own network namespace (tests/cluster/netns.py), links cut with iptables DROP rules and healed;
the test process (writers, consumers, the checker) is the network's observer and reaches every host throughout.

- the leader of partition 0 isolated from the other nodes and from etcd: its lease ends, another replica leads;
  the writes sent to it meanwhile are not acknowledged (its followers cannot fetch them: the high watermark cannot
  cover them), and once healed it rejoins as a follower, its tail past the new leader's log cut. (Until the heal it
  names itself leader at its old epoch, as a Kafka broker cut off from its controller does: a kafka-python consumer
  that believes it is sent back to offset 0 by its reset policy, which the workload records: replicated_workload.py's
  ``_Resets``.)
- the leader cut from its followers only, still reaching etcd: it stays leader, its ISR shrinks to itself, below
  MIN_INSYNC (2): its writes are refused, none acknowledged; healed, the followers catch up and rejoin the ISR;
- a minority etcd member cut off from everything: the nodes go on through the majority; then two members cut off
  (etcd's majority lost) for longer than the leases: every write is answered, nothing acknowledged is lost, and
  writes go on once the majority is back.

After each, the history checker: nothing acknowledged lost, no duplicate, one value per offset, the replicas equal.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster, etcd_cluster
from netns import Network, namespaces_of, network
from replicated_workload import (
    ACKS,
    LONG,
    SEEDS,
    Nodes,
    Workload,
    checked,
    final_history,
    host_of,
    new_leader,
    started,
    wait_until,
)

ETCD = ["e0", "e1", "e2"]
NODES = (1, 2, 3)
OWN_WRITERS = (7, 8)  # the writers that send partition 0's values to the faulty leader alone
REFUSED = 3  # answers each of them has from a leader below MIN_INSYNC before the heal
OUTAGE_S = 5.0  # etcd's majority lost for more than twice the nodes' 2 s lease


@contextmanager
def partitioned(tmp_path: Path) -> Iterator[tuple[Network, EtcdCluster]]:
    """The network (hosts e0-e2, n1-n3) and the three etcd members in it; every namespace gone afterwards."""
    with network(ETCD + [host_of(i) for i in NODES]) as net, etcd_cluster(
            tmp_path / "etcd", 3, [net.address(h) for h in ETCD], [net.command(h) for h in ETCD]) as etcd:
        yield net, etcd
    assert namespaces_of(os.getpid()) == [], "a namespace outlived its test"


def others(node_id: int) -> list[str]:
    return [host_of(i) for i in NODES if i != node_id]


Fault = Callable[[Network, Nodes, Workload], None]


def cut_off(net: Network, member: str) -> None:
    """etcd member ``member`` cut off from the other members and every node."""
    net.isolate([member], [h for h in ETCD if h != member] + [host_of(i) for i in NODES])


def checked_run(net: Network, etcd: EtcdCluster, tmp_path: Path, seed: int, fault: Fault) -> None:
    """Nodes 1-3 in ``net`` with database ``r``, a workload of ``seed`` while ``fault(net, nodes, load)`` runs
    (it heals the network; if it fails, it is healed here), then the history checked; the nodes stopped either
    way."""
    nodes, database = started(etcd, tmp_path, net=net)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the partition")
            try:
                fault(net, nodes, load)
            except BaseException:  # the nodes' own account of the fault, in the failure's captured output
                print(nodes.account())
                raise
            finally:
                net.heal()
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)


def isolated_leader(net: Network, nodes: Nodes, load: Workload) -> None:
    """Partition 0's leader isolated from the nodes and etcd until another leads and :data:`ACKS` more writes are
    acknowledged, then healed; the workload's writers keep away from it meanwhile, writers of its own write to it
    throughout (some queued as it heals)."""
    leader = nodes.current_leader(0)
    load.avoided.add(leader)
    net.isolate([host_of(leader)], others(leader) + ETCD)
    load.note(f"node {leader}, partition 0's leader, isolated from the nodes and etcd")
    with load.writing_through(nodes.servers[leader], OWN_WRITERS):
        new_leader(nodes, 0, leader)
        load.note("another node leads partition 0")
        wait_until(f"a write through node {leader} not acknowledged", lambda: any(
            op.outcome != "ok" for w in OWN_WRITERS for op in load.sends(w)))
        load.wait_acked(ACKS, f"while node {leader} is isolated")
        net.heal()
        load.note("healed")
        load.avoided.clear()
        load.wait_acked(ACKS, "after the heal")
    assert all(load.sends(w) for w in OWN_WRITERS), "a write sent to the isolated node"


def leader_cut_from_followers(net: Network, nodes: Nodes, load: Workload) -> None:
    """Partition 0's leader cut from its followers until its ISR is itself alone and writers of its own have had
    :data:`REFUSED` answers from it, then healed: none of those answers is an acknowledgement (below MIN_INSYNC)."""
    leader = nodes.current_leader(0)
    net.isolate([host_of(leader)], others(leader))
    load.note(f"node {leader}, partition 0's leader, cut from its followers")
    wait_until("partition 0's ISR shrunk to its leader", lambda: nodes.isr(0, leader) == [leader])
    load.note("partition 0's ISR is its leader alone")
    with load.writing_through(nodes.servers[leader], OWN_WRITERS):
        wait_until(f"{REFUSED} answers to each writer of node {leader}'s own",
                   lambda: all(len(load.sends(w)) >= REFUSED for w in OWN_WRITERS))
        below = [op for w in OWN_WRITERS for op in load.sends(w)]
        net.heal()
        load.note("healed")
        load.wait_acked(ACKS, "after the heal")
    assert [op for op in below if op.outcome == "ok"] == [], f"acknowledged below MIN_INSYNC: {load.events}"


@pytest.mark.parametrize("seed", SEEDS)
def test_leader_isolated_from_nodes_and_etcd(tmp_path: Path, seed: int) -> None:
    """Partition 0's leader isolated from the other nodes and every etcd member under load (the writers still reach
    it), until another replica leads and :data:`ACKS` more writes are acknowledged; healed: nothing it answered
    after it lost the lease was acknowledged and lost, and it rejoins as a follower."""
    with partitioned(tmp_path) as (net, etcd):
        checked_run(net, etcd, tmp_path, seed, isolated_leader)


@pytest.mark.parametrize("seed", SEEDS)
def test_leader_cut_from_its_followers(tmp_path: Path, seed: int) -> None:
    """Partition 0's leader cut from both followers, still reaching etcd: the ISR shrinks to the leader, below
    MIN_INSYNC, and nothing written to partition 0 meanwhile is acknowledged then lost; healed, the followers
    rejoin the ISR."""
    with partitioned(tmp_path) as (net, etcd):
        checked_run(net, etcd, tmp_path, seed, leader_cut_from_followers)


@pytest.mark.parametrize("seed", SEEDS)
def test_etcd_minority_cut_off_then_majority_lost(tmp_path: Path, seed: int) -> None:
    """Under load: an etcd member (drawn by the seed) cut off from its peers and every node until :data:`ACKS` more
    writes are acknowledged through the majority, healed; then two members cut off from everything (the third
    alone has no quorum) for :data:`OUTAGE_S` (long mode: 3-10 s), healed. Every write sent during the outage is
    answered, taken or refused (none left to time out); nothing acknowledged is lost; writes go on after each heal.
    (Measured: the leaders keep acknowledging through the outage: no lease can end while etcd has no leader, so
    no other replica can be elected meanwhile.)"""
    rng = random.Random(seed)
    minority = rng.choice(ETCD)
    majority = rng.sample(ETCD, 2)
    outage = rng.uniform(3.0, 10.0) if LONG else OUTAGE_S
    during: dict[str, int] = {}

    def etcd_faults(net: Network, nodes: Nodes, load: Workload) -> None:
        cut_off(net, minority)
        load.note(f"etcd member {minority} cut off")
        load.wait_acked(ACKS, f"with {minority} cut off")
        net.heal()
        load.note("healed")
        load.wait_acked(ACKS, "after the heal")
        before = dict(load.answers)
        for member in majority:
            cut_off(net, member)
        load.note(f"etcd members {majority} cut off for {outage:.1f} s")
        time.sleep(outage)  # (the fault's length, not a wait for a condition)
        during.update({k: v - before.get(k, 0) for k, v in load.answers.items() if v > before.get(k, 0)})
        net.heal()
        load.note(f"healed; the answers meanwhile: {during}")
        etcd.wait_healthy(etcd.members)
        load.wait_acked(ACKS, "after etcd's majority returned")

    with partitioned(tmp_path) as (net, etcd):
        checked_run(net, etcd, tmp_path, seed, etcd_faults)
    unclear = {answer: n for answer, n in during.items() if not answer[:3].isdigit()}
    assert not unclear, f"seed {seed}: writes during the outage answered neither yes nor no: {unclear}"
