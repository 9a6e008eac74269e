"""The real Java consumer (kafka-clients 4.3.0 and 3.9, what Spark 4 ships) reading a replicated database's topic while
the leader of one of its partitions is killed with kill -9 and restarted, twice (issue 25: "the compat matrix and
Spark's Kafka source against a 3-node RF=3 cluster while one node at a time is killed and restarted").

The cluster and its load are the Jepsen-style suite's (tests/jepsen/replicated_workload.py): three
``walgate serve --cluster`` nodes with ``replication.enable=true`` over one etcd member, database ``r`` with
``REPLICA 3 VGROUPS 2``, topic ``jt AS DATABASE r``, writers by SQL INSERT and line protocol through any running node,
and its confluent-kafka and kafka-python readers. Beside them java/Assign.java (manual assign of both partitions,
``seekToBeginning``, ``--follow``) is started before the first kill, bootstrapped on all
three nodes, and reads until it reached every partition's end once the writers stopped: it read across two leader
changes (its KIP-320 position validation against the new leaders included). What it read joins the workload's history, checked by
tests/cluster/history.py with the final reads through every node and every replica's WAL: no acknowledged write lost,
no value read twice or at two offsets, no offset with two values, no read going back or skipping, replicas equal.

CI runs kafka-clients 4.3.0; ``WALGATE_COMPAT_LONG=1`` adds 3.9.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from compat_brokers import LONG
from compat_procs import Background
from confluent_kafka import Consumer, TopicPartition

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from etcd_cluster import etcd_cluster  # noqa: E402
from history import Assign, Poll, check  # noqa: E402
from replicated_workload import TOPIC, VGROUPS, Nodes, Workload, final_history, replicated_database, wait_until  # noqa: E402

JAVA = 102  # the Java reader's process number in the history (the workload's readers are 100 and 101)
KILLS = 2
ACKS = 8  # acknowledged writes between faults
CLIENTS = ["4.3.0", "3.9"] if LONG else ["4.3.0"]


def java_read(reader: Background) -> list[dict[str, object]]:
    """The records the Java reader printed so far."""
    return [e for e in (json.loads(line) for line in list(reader.out) if line.startswith("{")) if e["event"] == "record"]


def reached(reader: Background, ends: dict[int, int]) -> bool:
    """Whether the Java reader read up to ``ends`` (partition -> end offset) in every partition."""
    last: dict[int, int] = {}
    for e in java_read(reader):
        last[int(e["partition"])] = int(e["offset"])  # type: ignore[call-overload]
    return all(last.get(p, -1) + 1 >= end for p, end in ends.items())


@pytest.mark.parametrize("clients", CLIENTS)
def test_the_java_consumer_reads_every_record_once_across_two_leader_kills(java_argv, tmp_path, clients):
    reader: Background | None = None
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        nodes = Nodes(etcd, tmp_path)
        try:
            nodes.start_all((1, 2, 3))
            database = replicated_database(nodes)
            with Workload(nodes, seed=1) as load:
                load.wait_acked(ACKS, "before the Java reader starts")
                reader = Background.start(java_argv("Assign.java", nodes.bootstrap(), TOPIC, "--start", "beginning",
                                                    "--follow", str(10**9), "--timeout", "600", clients=clients))
                reader.wait_for(lambda r: any('"ready"' in line for line in r.out), 60, "the Java reader ready")
                for kill in range(KILLS):
                    leader = nodes.current_leader(0)
                    nodes.kill(leader)
                    load.note(f"node {leader} killed")
                    via = nodes.answering(but=leader)
                    wait_until(f"a new leader of partition 0 (not {leader})",
                               lambda via=via, leader=leader: nodes.leader(0, via) not in (-1, leader))
                    load.wait_acked(ACKS, f"after kill {kill} of node {leader}")
                    nodes.start(leader)
                    load.note(f"node {leader} restarted")
                    load.wait_acked(ACKS, f"after node {leader} restarted")
            ends = end_offsets(nodes.bootstrap())
            reader.wait_for(lambda r: reached(r, ends), 120, f"the Java reader at the partitions' ends {ends}")
            reader.stop()
            history = final_history(nodes, load, database, tmp_path / "replicas")
        finally:
            if reader is not None:
                reader.stop()
            nodes.close()
    assert not [line for line in reader.out if '"error"' in line], reader.describe()
    read = java_read(reader)
    history += [Assign(JAVA)] + [Poll(JAVA, {f"p{e['partition']}": [(e["offset"], int(json.loads(e["value"])["v"]))]})
                                 for e in read]
    found = check(history)
    assert found == [], f"{len(found)} violations, the first: {found[:10]}; the faults: {load.events}"


def end_offsets(bootstrap: str) -> dict[int, int]:
    """Each partition of the topic's end offset (the writes stopped)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(VGROUPS)}
    finally:
        consumer.close()
