"""Lost unsynced writes on a ``REPLICA 3`` database (issue 25): nodes "power-cut" under load, each losing every byte
it wrote and did not fsync (tests/cluster/power_cut.py, installed into every node), then restarted on what their
disks kept.

Database ``r`` is WAL_LEVEL 2 with fsync period 0 (replicated_workload.py), and a write is acknowledged once the high
watermark covers it, i.e. once MIN_INSYNC replicas hold it: if the HW counted a follower's position before that
follower synced it, cutting the power of every replica that held the write would lose it, and the checker names it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster
from power_cut import environment
from replicated_workload import ACKS, SEEDS, Nodes, Workload, checked, final_history, new_leader, restart, wait_until
from replicated_workload import started as started_nodes

from livewalgate import walgate_env


def started(etcd: EtcdCluster, tmp_path: Path) -> tuple[Nodes, str]:
    """Nodes 1-3, each with the power-cut recorder installed, with database ``r``; its id."""
    return started_nodes(etcd, tmp_path, {i: environment(walgate_env()) for i in (1, 2, 3)})


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
def test_last_in_sync_replicas_power_cut(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """A follower of partition 0 killed (kill -9) and left down until the ISR is the leader and one follower (MIN_INSYNC
    2: writes are still acknowledged); then both in-sync replicas power-cut at once, under load: only the stale
    replica runs (out of the ISR: it must not lead). The cut nodes restarted, then the stale one: whatever was
    acknowledged is on some disk that kept it, and is read back."""
    nodes, database = started(etcd1, tmp_path)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the follower's kill")
            leader = nodes.current_leader(0)
            stale = random.Random(seed).choice([i for i in (1, 2, 3) if i != leader])
            in_sync = sorted(i for i in (1, 2, 3) if i != stale)
            nodes.kill(stale)
            load.note(f"node {stale}, a follower, killed")
            wait_until(f"the ISR of partition 0 is {in_sync}", lambda: nodes.isr(0, leader) == in_sync)
            load.wait_acked(ACKS, f"with the ISR {in_sync}")
            for cut in in_sync:
                load.note(f"node {cut}: {nodes.power_cut(cut)}")
            nodes.start(stale)
            load.note(f"node {stale} restarted alone")
            for node_id in in_sync:
                nodes.start(node_id)
                load.note(f"node {node_id} restarted")
            load.wait_acked(ACKS, "after the cut nodes restarted")
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)
