"""Real Kafka clients watching a partition's leader move on a 3-node ``REPLICA 3`` cluster (issue 25; the cluster, its
writers and the history checker are the Jepsen-style suite's: tests/jepsen/replicated_workload.py,
tests/cluster/history.py).

- **The lease rule.** Partition 0's leader is paused (SIGSTOP) until etcd's partition state names another leader
  (its lease ran out), then resumed (SIGCONT) while the workload's writers write through the other nodes and three
  stock consumers read: java/Assign.java on kafka-clients 4.3.0 and the workload's confluent-kafka and kafka-python
  readers. The resumed node answers the clients that still take it for the leader with NOT_LEADER_OR_FOLLOWER
  (counted on its ``/metrics``: ``kafka_network_requestmetrics_errors``), they move to the new leader, and none reads
  anything from the stale one that the history checker finds wrong (lost, duplicated, at two offsets, going back).
- **KIP-951.** The same with the Java consumer the only Kafka client (the writers use HTTP): the Metadata requests
  all three nodes answered while the leader moved and the Java consumer read on from the new leader are counted
  (``kafka_network_requestmetrics_requests``, request="Metadata"): the Fetch error's ``CurrentLeader`` and
  ``NodeEndpoints`` name the new leader, so the client needs no Metadata answer to find it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from compat_procs import Background

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from etcd_cluster import etcd_cluster  # noqa: E402
from history import Assign, Op, Poll, Send, check  # noqa: E402
from replicated_workload import (  # noqa: E402
    ACKS,
    TOPIC,
    Nodes,
    Workload,
    final_history,
    metric_sum,
    partition_states,
    replicated_database,
    wait_until,
)

JAVA = 102  # the Java reader's process number in the history (the workload's readers are 100 and 101)
REQUESTS, ERRORS = "kafka_network_requestmetrics_requests_total", "kafka_network_requestmetrics_errors_total"
MOVED = ("NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH")  # what a node that no longer leads answers a Fetch


def java_polls(reader: Background) -> list[Op]:
    """What the Java reader printed so far, as the history's Assign and Polls."""
    records = [e for e in (json.loads(line) for line in list(reader.out) if line.startswith("{"))
               if e["event"] == "record"]
    return [Assign(JAVA)] + [Poll(JAVA, {f"p{e['partition']}": [(e["offset"], int(json.loads(e["value"])["v"]))]})
                             for e in records]


def has_read(reader: Background, values: set[int]) -> bool:
    read = {v for op in java_polls(reader) if isinstance(op, Poll) for pairs in op.reads.values() for _, v in pairs}
    return values <= read


def moved_answers(nodes: Nodes, node_id: int) -> float:
    """The Fetch answers node ``node_id`` gave naming another leader (or a newer epoch)."""
    return sum(metric_sum(nodes.servers[node_id], ERRORS, request="Fetch", error=e) for e in MOVED)


def metadata_requests(nodes: Nodes) -> float:
    return sum(metric_sum(s, REQUESTS, request="Metadata") for s in nodes.running().values())


def paused_past_its_lease(java_argv: Callable[..., list[str]], tmp_path: Path, consumers: bool
                          ) -> tuple[list[Op], Workload, dict[str, float]]:
    """The scenario of the module docstring; (the history with the Java reader's polls, the workload, what was
    counted: Metadata requests over the nodes and the zombie's moved answers, each during the move)."""
    reader: Background | None = None
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        nodes = Nodes(etcd, tmp_path)
        try:
            nodes.start_all((1, 2, 3))
            database = replicated_database(nodes)
            leader = nodes.current_leader(0)
            with Workload(nodes, seed=1, consumers=consumers) as load:
                reader = Background.start(java_argv("Assign.java", nodes.bootstrap(), TOPIC, "--start", "beginning",
                                                    "--follow", str(10**9), "--timeout", "600"))
                reader.wait_for(lambda r: any('"ready"' in line for line in r.out), 60, "the Java reader ready")
                load.wait_acked(ACKS, "before the pause")
                acked = {w.value for op in list(load.history) if isinstance(op, Send) and op.outcome == "ok"
                         for w in op.writes}
                wait_until("the Java reader read the first writes", lambda: has_read(reader, acked))
                metadata, moved = metadata_requests(nodes), moved_answers(nodes, leader)
                nodes.pause(leader)
                load.note(f"node {leader}, partition 0's leader, paused")
                try:
                    wait_until("etcd names another leader of partition 0",
                               lambda: partition_states(etcd, database)[0].leader not in (-1, leader))
                finally:
                    nodes.resume(leader)
                    load.note(f"node {leader} resumed")
                load.wait_acked(ACKS, f"after node {leader} resumed")
            acked = {w.value for op in load.history if isinstance(op, Send) and op.outcome == "ok" for w in op.writes}
            wait_until("the Java reader read every acknowledged write", lambda: has_read(reader, acked))
            counted = {"metadata": metadata_requests(nodes) - metadata, "moved": moved_answers(nodes, leader) - moved}
            reader.stop()
            history = final_history(nodes, load, database, tmp_path / "replicas") + java_polls(reader)
        finally:
            if reader is not None:
                reader.stop()
            nodes.close()
    assert not [line for line in reader.out if '"error"' in line], reader.describe()
    found = check(history)
    assert found == [], f"{len(found)} violations, the first: {found[:10]}; the faults: {load.events}"
    print(f"counted while the leader moved: {counted}; the faults: {load.events}")
    return history, load, counted


def test_clients_leave_a_leader_paused_past_its_lease_and_read_nothing_stale(java_argv, tmp_path):
    _, _, counted = paused_past_its_lease(java_argv, tmp_path, consumers=True)
    assert counted["moved"] > 0, counted


def test_the_java_consumer_finds_the_new_leader_in_the_fetch_error_kip_951(java_argv, tmp_path):
    _, _, counted = paused_past_its_lease(java_argv, tmp_path, consumers=False)
    assert counted["moved"] > 0, counted
    assert counted["metadata"] == 0, counted
