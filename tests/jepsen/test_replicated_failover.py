"""Jepsen-style scenarios on a ``REPLICA 3`` database (issue 25; the workload and its history:
replicated_workload.py; the checker: tests/cluster/history.py).

Every acknowledged SQL or line-protocol write must be in every node's full final read, no value at two offsets, no
offset with two values, no write answered as refused read back, every replica's WAL the same entry by entry below
the high watermarks, and no consumer (confluent-kafka, kafka-python) going back or skipping without a reset.

Each scenario is seeded and bounded: CI runs seed 1 of the first three with a few faults; ``WALGATE_JEPSEN=1`` runs
seeds 1-10, ten kills a loop, 40 acknowledged writes between faults, the fast double failover and the kill loop under
clock skew. They found
two of the review's findings (/work/notes/s7/rv3.md), both fixed since: F5 (a deposed leader's acknowledged write
lost; the zombie, every seed) and F10 (consumers sent back to where epoch 1 begins: batches carried epoch 0).
"""

from __future__ import annotations

import datetime
import random
import shutil
import time
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster
from history import Send
from replicated_workload import ACKS, LONG, SEEDS, Nodes, Workload, checked, final_history, new_leader, restart, started
from test_clock_skew import preloaded_faketime

KILLS = 10 if LONG else 2
ZOMBIE_WRITERS = (7, 8, 9)  # the writers that send to the zombie leader only (several: writes queued as it resumes)


def kill_loop_checked(nodes: Nodes, database: str, tmp_path: Path, seed: int) -> None:
    """:func:`kill_loop` under a workload of ``seed``, then the history checked; the nodes closed either way."""
    try:
        with Workload(nodes, seed) as load:
            kill_loop(nodes, load)
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)


def kill_loop(nodes: Nodes, load: Workload) -> None:
    """:data:`KILLS` times: kill -9 of partition 0's leader, another leads, the node restarted on its data dir (each
    step after :data:`ACKS` more acknowledged writes)."""
    load.wait_acked(ACKS, "before the first kill")
    for kill in range(KILLS):
        leader = nodes.current_leader(0)
        nodes.kill(leader)
        load.note(f"node {leader} killed")
        new_leader(nodes, 0, leader)
        load.wait_acked(ACKS, f"after kill {kill} of node {leader}")
        restart(nodes, load, leader)


@pytest.mark.parametrize("seed", SEEDS)
def test_leader_kill_9_loop(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """kill -9 of partition 0's leader under load, the node restarted on its data dir once another leads, again and
    again: no acknowledged write lost, the replicas equal."""
    nodes, database = started(etcd1, tmp_path)
    kill_loop_checked(nodes, database, tmp_path, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_zombie_leader(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """Partition 0's leader paused (SIGSTOP) past its lease until another replica leads, then resumed (SIGCONT),
    while writes keep arriving at it (writers of its own send partition 0's rows there throughout, so some are
    queued as it resumes): whatever it answered 200 is kept; nothing it took after it was deposed, then truncated,
    was acknowledged."""
    nodes, database = started(etcd1, tmp_path)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the pause")
            zombie = nodes.current_leader(0)
            nodes.pause(zombie)
            load.note(f"node {zombie} paused")
            with load.writing_through(nodes.servers[zombie], ZOMBIE_WRITERS):
                try:
                    new_leader(nodes, 0, zombie)
                    load.note("another node leads partition 0")
                finally:
                    nodes.resume(zombie)
                    load.note(f"node {zombie} resumed")
                load.wait_acked(ACKS, f"after node {zombie} resumed")
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    assert {op.process for op in history if isinstance(op, Send)} >= set(ZOMBIE_WRITERS)
    checked(history, load, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_follower_restarted_with_an_empty_disk(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """A follower of partition 0 killed and its data dir emptied: it refuses to start as its old self (its
    registration's incarnation is the lost disk's: docs/cluster.md), and starts as node 4, which holds no replica;
    the two replicas left keep acknowledging writes (MIN_INSYNC 2), and nothing acknowledged is lost."""
    nodes, database = started(etcd1, tmp_path)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the follower's kill")
            leader = nodes.current_leader(0)
            follower = random.Random(seed).choice([i for i in (1, 2, 3) if i != leader])
            nodes.kill(follower)
            load.note(f"node {follower} killed")
            load.wait_acked(ACKS, f"while node {follower} is down")
            with pytest.raises(pytest.fail.Exception, match=f"node {follower}: this data dir .* is not the one"):
                nodes.start(follower, empty=True)
            shutil.move(nodes.data_dir(follower), nodes.data_dir(4))
            nodes.start(4)
            load.note(f"node {follower}'s emptied data dir started as node 4")
            load.wait_acked(ACKS, "after node 4 joined")
        survivors = tuple(i for i in (1, 2, 3) if i != follower)
        history = final_history(nodes, load, database, tmp_path / "replicas", survivors)
    finally:
        nodes.close()
    assert not (nodes.data_dir(4) / "db" / database).exists(), "node 4 holds no replica of r"
    checked(history, load, seed)


@pytest.mark.skipif(not LONG, reason="long mode only (WALGATE_JEPSEN=1): the CI slice keeps the file near a minute")
@pytest.mark.parametrize("seed", SEEDS)
def test_fast_double_failover(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """kill -9 of partition 0's leader, then of the next leader as soon as it is named (its followers may not have
    caught up): one replica is left, below MIN_INSYNC; the first node is restarted on its data dir, then the
    second. Nothing acknowledged is lost."""
    nodes, database = started(etcd1, tmp_path)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the first kill")
            first = nodes.current_leader(0)
            nodes.kill(first)
            load.note(f"node {first} killed")
            new_leader(nodes, 0, first)
            second = nodes.current_leader(0)
            nodes.kill(second)
            load.note(f"node {second}, the next leader, killed")
            restart(nodes, load, first)
            restart(nodes, load, second)
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)


@pytest.mark.skipif(not LONG, reason="long mode only (WALGATE_JEPSEN=1): the CI slice keeps the file near a minute")
@pytest.mark.parametrize("seed", SEEDS)
def test_clock_skew_kill_loop(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """The kill loop with node 2's clocks an hour ahead and node 3's an hour behind (Debian's libfaketime preloaded
    into them, wall and monotonic: tests/cluster/test_clock_skew.py): leases are etcd's clock, so failover and the
    replicas' agreement do not depend on the nodes' clocks. Nothing acknowledged is lost."""
    with preloaded_faketime() as library:
        env = {2: {"LD_PRELOAD": library, "FAKETIME": "+1h"}, 3: {"LD_PRELOAD": library, "FAKETIME": "-1h"}}
        nodes, database = started(etcd1, tmp_path, env)
        try:
            for node_id, ahead in ((1, 0), (2, 3600), (3, -3600)):  # the preload applies: each logs in its own time
                stamp = nodes.servers[node_id].log()[:19]
                logged = datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
                assert abs(logged - time.time() - ahead) < 600, (node_id, stamp)
        except BaseException:
            nodes.close()
            raise
        kill_loop_checked(nodes, database, tmp_path, seed)
