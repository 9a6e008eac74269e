"""Replica moves on a 3-node RF=3 cluster (issue 26; KIP-455), asked through the Java kafka-clients 4.3.0 Admin
(java/Reassign.java: ``alterPartitionReassignments``, ``listPartitionReassignments``, ``describeTopics``) under the
Jepsen-style suite's load (tests/jepsen/replicated_workload.py: database ``r`` with ``REPLICA 3 VGROUPS 2``, topic
``jt AS DATABASE r``, SQL and line-protocol writers through any node, two consumers, the history checked by
tests/cluster/history.py with the final reads through every node and every replica's WAL).

Partition 0 is moved off its last replica that is not the controller (the target in sync: the move completes at
once; describeTopics names the two replicas left), and that node deletes its copy; with that node paused, a move
back to all three is listed as in progress (adding it) and cancelled (back to two); the node resumed, the move back
to it, a node that no longer holds the partition, completes once it opened the vnode empty and caught up from the
leader (describeTopics: three replicas, three in sync), and a cancellation then finds no move
(NoReassignmentInProgressException); a target on a node that is not registered is refused
(InvalidReplicaAssignmentException). The load runs through it all, and the history is clean (the returned node's WAL
compared with the others' entry by entry). Each node's lease is 60 s, so the paused node stays registered while its
move is made and cancelled (a JVM's start on a loaded machine took more than 10 s). The node paused is never the
controller: a paused controller keeps its lease and serves no move until resumed, so the moves asked meanwhile time
out. The controller is read from etcd (the elected candidate): Metadata names any live node as the controller, as
KRaft's brokers do (KIP-590), and confluent-kafka's ``describe_cluster`` answered so once picked the controller as the
node to pause (a full CI run of 2026-11-30: the move timed out); the Admin is bootstrapped on the live nodes only
while one is paused."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat_procs import Run

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from confluent_kafka.admin import NewTopic  # noqa: E402
from etcd_cluster import etcd_cluster  # noqa: E402
from replicated_workload import (  # noqa: E402
    TOPIC,
    Nodes,
    Workload,
    checked,
    controller,
    final_history,
    ready_nodes,
    replicated_database,
    wait_until,
)
from serve_support import create_topics, produce_to  # noqa: E402
from test_serve_cluster_reassignments import read_all  # noqa: E402

LEASE = ("--override", "broker.session.timeout.ms=60000")  # (after cluster_args' own --override: it wins)
ACKS = 6  # acknowledged writes between steps
RATE = 500_000  # bytes/s: a move's throttle (KIP-73), as kafka-reassign-partitions --throttle sets it
NATIVE = "moved"  # a Kafka-native topic: its throttled-replica lists are topic configs (a TDengine topic has none)


def reassign(java: Callable[..., Run], nodes: Nodes, *actions: str, paused: int | None = None, topic: str = TOPIC
             ) -> list[dict[str, Any]]:
    """Reassign.java's steps on partition 0 of the topic, bootstrapped on every node but ``paused``; no step failed.
    (Bootstrapped on a paused node, the Admin may send its request there, its least loaded node: it is still
    registered, so Metadata names it; the request then times out, as in a full CI run of 2026-11-30.)"""
    live = ",".join(nodes.kafka(i) for i in nodes.ports if i != paused)
    run = java("Reassign.java", live, topic, "0", *actions, timeout=180)
    out = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert not [s for s in out if s["step"] == "error"], out
    return out


def test_java_admin_moves_a_partition_off_a_node_and_back_with_a_cancellation_under_load(java, tmp_path: Path
                                                                                          ) -> None:
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        nodes = Nodes(etcd, tmp_path)
        nodes.args = {i: LEASE for i in (1, 2, 3)}
        try:
            nodes.start_all((1, 2, 3))
            database = replicated_database(nodes)
            with Workload(nodes, seed=45) as load:
                load.wait_acked(ACKS, "before the moves")
                [described] = reassign(java, nodes, "describe")
                replicas = list(described["replicas"])  # type: ignore[call-overload]
                ruling = controller(etcd)[0]
                dropped = next(r for r in reversed(replicas) if r != ruling)  # (paused below)
                kept = [r for r in replicas if r != dropped]
                move_off = reassign(java, nodes, "move:" + ",".join(map(str, kept)), "wait", "describe")
                assert [s.get("result", s.get("done")) for s in move_off[:2]] == ["ok", True], move_off
                assert (move_off[2]["replicas"], move_off[2]["isr"]) == (kept, sorted(kept)), move_off
                copy = nodes.data_dir(dropped) / "db" / database / "vnode0"
                wait_until(f"node {dropped}'s copy of partition 0 deleted", lambda: not copy.exists())
                load.note(f"partition 0 moved off node {dropped}, its copy there deleted")
                load.wait_acked(ACKS, "after the move off")

                nodes.pause(dropped)
                back = ",".join(map(str, replicas))
                cancelled = reassign(java, nodes, f"move:{back}", "list", "cancel", "wait", "describe", paused=dropped)
                nodes.resume(dropped)
                assert cancelled[0]["result"] == "ok" and cancelled[2]["result"] == "ok", cancelled
                assert cancelled[1]["moving"] == [{"topic": TOPIC, "partition": 0, "replicas": replicas,
                                                   "adding": [dropped], "removing": []}], cancelled
                assert cancelled[4]["replicas"] == kept, cancelled
                load.note(f"a move back to node {dropped} (paused) listed and cancelled")
                load.wait_acked(ACKS, "after the cancellation")

                moved_back = reassign(java, nodes, f"move:{back}", "wait", "cancel", "move:4,1")
                assert [s.get("result", s.get("done")) for s in moved_back] == [
                    "ok", True, "NoReassignmentInProgressException", "InvalidReplicaAssignmentException"], moved_back
                wait_until(f"node {dropped} back in sync", lambda: sorted(nodes.isr(0, kept[0])) == sorted(replicas))
                assert reassign(java, nodes, "describe")[0]["replicas"] == replicas
                assert copy.is_dir()
                load.note(f"partition 0 moved back to node {dropped}, caught up from empty")
                load.wait_acked(ACKS, "after the move back")
            history = final_history(nodes, load, database, tmp_path / "replicas")
        finally:
            nodes.close()
    checked(history, load, 45)


def test_java_admin_throttles_a_move_as_kafka_reassign_partitions_does(java, tmp_path: Path) -> None:
    """A Kafka-native topic of replication factor 3 (``min.insync.replicas=2``): partition 0 moved off one replica,
    1 MB written, then moved back to it throttled as ``kafka-reassign-partitions --execute --throttle`` does
    (incrementalAlterConfigs SET of both replication rates on every broker, each sent to its broker, and of the
    topic's leader and follower throttled-replica lists: the current replicas, the one added), read back by
    describeConfigs as dynamic configs; the move completes (the returned replica in sync, holding every value in
    order), and the throttle is removed as ``--verify`` removes it (DELETE: every config back at its default)."""
    with etcd_cluster(tmp_path / "etcd", 1) as etcd, ready_nodes(etcd, tmp_path) as nodes:
        create_topics(nodes.bootstrap(), NewTopic(NATIVE, 1, 3, config={"min.insync.replicas": "2"}))
        [described] = reassign(java, nodes, "describe", topic=NATIVE)
        replicas: list[int] = described["replicas"]
        dropped, kept = replicas[-1], replicas[:-1]
        move_off = reassign(java, nodes, "move:" + ",".join(map(str, kept)), "wait", topic=NATIVE)
        assert [s.get("result", s.get("done")) for s in move_off] == ["ok", True], move_off
        values = [b"%04d" % i + b"v" * 10_000 for i in range(100)]
        produce_to(nodes.servers[kept[0]].kafka_port, NATIVE, {0: values})

        back = ",".join(map(str, replicas))
        steps = reassign(java, nodes, f"throttle:{RATE}:{back}", "throttles", f"move:{back}", "wait", "unthrottle",
                         "throttles", "describe", topic=NATIVE)
        assert [s.get("result", s.get("done")) for s in steps if s["step"] not in ("throttles", "describe")] == [
            "ok", "ok", True, "ok"], steps
        throttled, unthrottled = (s for s in steps if s["step"] == "throttles")
        rate = [str(RATE), "DYNAMIC_BROKER_CONFIG"]
        assert throttled["brokers"] == {str(i): {"leader": rate, "follower": rate} for i in (1, 2, 3)}, throttled
        assert throttled["topic"] == {"leader": [",".join(f"0:{r}" for r in kept), "DYNAMIC_TOPIC_CONFIG"],
                                      "follower": [f"0:{dropped}", "DYNAMIC_TOPIC_CONFIG"]}, throttled
        sources = [v[1] for b in unthrottled["brokers"].values() for v in b.values()]
        assert sources + [v[1] for v in unthrottled["topic"].values()] == ["DEFAULT_CONFIG"] * 8, unthrottled
        assert (steps[-1]["replicas"], sorted(steps[-1]["isr"])) == (replicas, sorted(replicas)), steps
        assert read_all(nodes.servers[dropped].kafka_port, 100, NATIVE) == values
