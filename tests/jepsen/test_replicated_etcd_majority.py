"""etcd's majority lost under load on a ``REPLICA 3`` database (issue 25): three etcd members, two of them paused
(SIGSTOP: they hold their state and answer nothing, as members cut off would) for longer than the nodes' leases, then
resumed.

While etcd has no quorum no lease can be renewed nor an election held: a write either keeps being taken by the
leader it reaches (the data is already placed; the replicas' positions travel node to node) or is refused, and
nothing acknowledged may be lost; once the majority is back the cluster takes writes again, through every node.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster, etcd_cluster
from replicated_workload import ACKS, LONG, SEEDS, Workload, checked, final_history, started

OUTAGE_S = 5.0  # more than twice the nodes' 2 s lease


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A three-member etcd."""
    with etcd_cluster(tmp_path / "etcd", 3) as cluster:
        yield cluster


@pytest.mark.parametrize("seed", SEEDS)
def test_etcd_majority_lost_under_load(etcd3: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """Two of the three etcd members (drawn by the seed) paused for :data:`OUTAGE_S` (long mode: 3-10 s) under
    load, then resumed: every write sent meanwhile is answered (taken or refused, none left to time out), nothing
    acknowledged lost, no duplicate, the replicas equal, and :data:`ACKS` more writes acknowledged once etcd has its
    majority again. (Measured: the leaders keep taking writes throughout, ~150 in 5 s: no lease can end while etcd
    has no leader, so no other replica can be elected meanwhile.)"""
    rng = random.Random(seed)
    paused = rng.sample(etcd3.members, 2)
    outage = rng.uniform(3.0, 10.0) if LONG else OUTAGE_S
    nodes, database = started(etcd3, tmp_path)
    try:
        with Workload(nodes, seed) as load:
            load.wait_acked(ACKS, "before the outage")
            for member in paused:
                assert member.proc is not None
                member.proc.send_signal(signal.SIGSTOP)
            load.note(f"etcd members {[m.name for m in paused]} paused for {outage:.1f} s")
            acked = load.acked
            before = dict(load.answers)
            try:
                time.sleep(outage)  # (the fault's length, not a wait for a condition)
            finally:
                for member in paused:
                    assert member.proc is not None
                    member.proc.send_signal(signal.SIGCONT)
            during = {k: v - before.get(k, 0) for k, v in load.answers.items() if v > before.get(k, 0)}
            load.note(f"etcd members resumed ({load.acked - acked} writes acknowledged during the outage: {during})")
            etcd3.wait_healthy(etcd3.members)
            load.wait_acked(ACKS, "after etcd's majority returned")
        history = final_history(nodes, load, database, tmp_path / "replicas")
    finally:
        nodes.close()
    checked(history, load, seed)
    unclear = {answer: n for answer, n in during.items() if not answer[:3].isdigit()}
    assert not unclear, f"seed {seed}: writes during the outage answered neither yes nor no: {load.events}"
