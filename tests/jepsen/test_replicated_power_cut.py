"""Lost unsynced writes on a ``REPLICA 3`` database (issue 25): nodes "power-cut" under load, each losing every byte
it wrote and did not fsync (tests/cluster/power_cut.py, installed into every node), then restarted on what their
disks kept.

Database ``r`` is WAL_LEVEL 2; a write is acknowledged once the high watermark covers it, and the high watermark is
the least durable end (synced WAL) of the ISR's replicas (walgate/gateway/replicas.py). A replicated database's
vnodes commit in groups whatever its WAL_FSYNC_PERIOD (walgate/storage/vnode.py ``wal_options``): every write is
synced on the leader and on each follower before the high watermark passes it; the long mode's period of 1000 ms
(:data:`FSYNC_MS`) checks that the setting changes nothing. (Before that, with a follower's durable end replaced by
its fetched end in replica_fetcher.py, five runs at period 1000 passed: this scenario does not reliably catch a
follower's unsynced position counted by the high watermark; a loss needs the follower to lead afterwards with an
unsynced tail the leader had synced and acknowledged.)
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster
from power_cut import environment
from replicated_workload import (
    ACKS,
    LONG,
    SEEDS,
    Nodes,
    Workload,
    checked,
    final_history,
    new_leader,
    restart,
    wait_until,
)
from replicated_workload import started as started_nodes

from livewalgate import walgate_env

FSYNC_MS = (0, 1000) if LONG else (0,)  # the WAL_FSYNC_PERIODs (ms) the power cut of the in-sync replicas runs with


def started(etcd: EtcdCluster, tmp_path: Path, fsync_ms: int = 0) -> tuple[Nodes, str]:
    """Nodes 1-3, each with the power-cut recorder installed, with database ``r`` (WAL_FSYNC_PERIOD ``fsync_ms``);
    its id."""
    return started_nodes(etcd, tmp_path, {i: environment(walgate_env()) for i in (1, 2, 3)}, fsync_ms=fsync_ms)


@pytest.mark.skipif(not LONG, reason="long mode only (WALGATE_JEPSEN=1): in CI the next scenario cuts the leader too")
@pytest.mark.parametrize("seed", SEEDS)
def test_leader_power_cut(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """Partition 0's leader power-cut under load, another replica leads, the node restarted on what its disk kept
    (and rejoins as a follower): every write acknowledged before the cut, or through the others since, is kept."""
    nodes, database = started(etcd1, tmp_path)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the cut")
            leader = nodes.current_leader(0)
            load.note(f"node {leader}, the leader: {nodes.power_cut(leader)}")
            new_leader(nodes, 0, leader)
            load.wait_acked(ACKS, f"after node {leader}'s cut")
            restart(nodes, load, leader)
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fsync_ms", FSYNC_MS)
def test_last_in_sync_replicas_power_cut(etcd1: EtcdCluster, tmp_path: Path, seed: int, fsync_ms: int) -> None:
    """A follower of partition 0 killed (kill -9) and left down until the ISR is the leader and the other follower
    (MIN_INSYNC 2: writes are still acknowledged); then both in-sync replicas power-cut at once, under load. The
    stale replica and the in-sync follower restarted first, until that follower leads partition 0 (the stale one,
    out of the ISR, must not), then the old leader, which follows it and cuts its log to the new leader's: whatever
    was acknowledged is on the new leader's disk, since the high watermark counted only what the follower had
    synced, and is read back."""
    nodes, database = started(etcd1, tmp_path, fsync_ms)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the follower's kill")
            leader = nodes.current_leader(0)
            stale, follower = random.Random(seed).sample([i for i in (1, 2, 3) if i != leader], 2)
            in_sync = sorted((leader, follower))
            nodes.kill(stale)
            load.note(f"node {stale}, a follower, killed")
            wait_until(f"the ISR of partition 0 is {in_sync}", lambda: nodes.isr(0, leader) == in_sync)
            load.wait_acked(ACKS, f"with the ISR {in_sync}")
            for cut in (follower, leader):
                load.note(f"node {cut}: {nodes.power_cut(cut)}")
            nodes.start_all((stale, follower))
            load.note(f"nodes {stale} and {follower} restarted")
            wait_until(f"node {follower} leads partition 0", lambda: nodes.leader(0, follower) == follower)
            load.note(f"node {follower} leads partition 0")
            restart(nodes, load, leader)
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)
