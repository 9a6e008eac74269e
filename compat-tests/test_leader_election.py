"""Leader elections on a 3-node RF=3 cluster (issue 26), asked through the Java kafka-clients 4.3.0 Admin
(java/ElectLeaders.java: ``Admin.electLeaders``), and the controller's automatic preferred-leader rebalance.

The cluster and its load are the Jepsen-style suite's (tests/jepsen/replicated_workload.py): three ``walgate serve
--cluster`` nodes with ``replication.enable=true`` over one etcd member (stopped by PID), database ``r`` with
``REPLICA 3 VGROUPS 2`` and topic ``jt AS DATABASE r``, SQL and line-protocol writers through any running node and
two consumers, the history checked by tests/cluster/history.py with the final reads through every node and every
replica's WAL. Each node's lease (``broker.session.timeout.ms``) is 3 s, so a killed node is fenced within seconds.

* PREFERRED: the preferred leader of partition 0 is killed with kill -9 (leadership moves to another in-sync
  replica), restarted and back in the ISR; electLeaders(PREFERRED, jt-0, jt-1) moves jt-0's leadership back to it
  ("ok") and answers jt-1, which its preferred replica still leads, ElectionNotNeededException; the load runs
  through it all and the history is clean.
* UNCLEAN: a topic of one partition on nodes 2 and 3 (``unclean.leader.election.enable`` false): 3 killed (the ISR
  shrinks to 2), then 2 (no leader; 2 stays an eligible leader replica, KIP-966); ``walgate cluster elect`` answers
  PREFERRED_LEADER_NOT_AVAILABLE (``--preferred``) and ELIGIBLE_LEADERS_NOT_AVAILABLE (``--unclean``) with exit code 1
  while no replica is up; node 3 restarted (out of the ISR), the Java Admin's UNCLEAN elects it ("ok", the topic's
  leader is 3), and a preferred election of every partition lists u-0 alone, PREFERRED_LEADER_NOT_AVAILABLE.
* Automatic: with ``leader.imbalance.check.interval.seconds=1``, the preferred leader of partition 0 killed and
  restarted: the controller moves leadership back to it without being asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from compat_procs import Run
from confluent_kafka.admin import AdminClient, NewTopic

sys.path[:0] = [str(Path(__file__).parents[1] / "tests" / d) for d in ("cluster", "jepsen")]
from etcd_cluster import etcd_cluster  # noqa: E402
from replicated_workload import (  # noqa: E402
    TOPIC,
    VGROUPS,
    Nodes,
    Workload,
    checked,
    final_history,
    replicated_database,
    three_ready,
    wait_until,
)

from livewalgate import WALGATE, walgate_env  # noqa: E402

LEASE = {"WALGATE_BROKER_SESSION_TIMEOUT_MS": "3000"}
NO_REBALANCE = LEASE | {"WALGATE_AUTO_LEADER_REBALANCE_ENABLE": "false"}
ACKS = 6  # acknowledged writes between faults


def steps(run: Run) -> list[dict[str, object]]:
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def elect(java: Callable[..., Run], nodes: Nodes, kind: str, topic: str, *partitions: int) -> tuple[dict[int, str],
                                                                                                    dict[int, int]]:
    """(partition -> electLeaders' result, partition -> the leader describeTopics names after it)."""
    run = java("ElectLeaders.java", nodes.bootstrap(), kind, topic, *map(str, partitions), timeout=90)
    out = steps(run)
    assert not [s for s in out if s["step"] == "error"], out
    results = {int(s["partition"]): str(s["result"]) for s in out if s["step"] == "elect"}  # type: ignore[call-overload]
    [described] = [s for s in out if s["step"] == "describe"]
    return results, {int(p["partition"]): int(p["leader"]) for p in described["partitions"]}  # type: ignore[attr-defined]


def cli(nodes: Nodes, *args: str) -> tuple[int, list[dict[str, object]]]:
    """``walgate cluster elect ARGS --json`` through node 1: (its exit code, the rows it printed)."""
    done = subprocess.run([*WALGATE, "cluster", "elect", "-b", nodes.kafka(1), "--json", *args], capture_output=True,
                          text=True, timeout=60, env=walgate_env())
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def preferred(nodes: Nodes, topic: str, partition: int, via: int) -> int:
    """The first replica Metadata names for ``partition`` of ``topic``."""
    admin = AdminClient({"bootstrap.servers": nodes.kafka(via)})
    return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].replicas[0])


def test_java_admin_moves_leadership_back_to_the_restarted_preferred_leader_under_load(java, tmp_path: Path) -> None:
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        nodes = Nodes(etcd, tmp_path, env={i: NO_REBALANCE for i in (1, 2, 3)})
        try:
            nodes.start_all((1, 2, 3))
            database = replicated_database(nodes)
            first = preferred(nodes, TOPIC, 0, 1)
            other = preferred(nodes, TOPIC, 1, 1)
            assert first != other, "the preferred leaders are spread"
            with Workload(nodes, seed=26) as load:
                load.wait_acked(ACKS, "before the kill")
                nodes.kill(first)
                load.note(f"node {first} killed")
                via = nodes.answering(but=first)
                wait_until(f"partition 0 led by another node than {first}",
                           lambda: nodes.leader(0, via) not in (-1, first))
                load.wait_acked(ACKS, f"after node {first} was killed")
                nodes.start(first)
                load.note(f"node {first} restarted")
                wait_until(f"node {first} back in partition 0's ISR", lambda: first in nodes.isr(0, via))
                assert nodes.leader(0, via) != first, "nothing moved leadership back yet"
                results, leaders = elect(java, nodes, "preferred", TOPIC, 0, 1)
                assert results == {0: "ok", 1: "ElectionNotNeededException"}
                assert leaders[0] == first and leaders[1] == other
                load.note("preferred leaders elected")
                load.wait_acked(ACKS, "after the election")
            history = final_history(nodes, load, database, tmp_path / "replicas")
        finally:
            nodes.close()
    checked(history, load, 26)


def test_unclean_election_of_a_partition_whose_in_sync_replicas_are_all_down(java, tmp_path: Path) -> None:
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        nodes = Nodes(etcd, tmp_path, env={i: NO_REBALANCE for i in (1, 2, 3)})
        try:
            nodes.start_all((1, 2, 3))
            three_ready(nodes)  # (every node's view: node 1's Metadata listing three was not enough, CI 2026-11-30)
            admin = AdminClient({"bootstrap.servers": nodes.kafka(1)})
            admin.create_topics([NewTopic("u", 1, replica_assignment=[[2, 3]])])["u"].result(30)

            def state() -> tuple[int, list[int]]:
                part = AdminClient({"bootstrap.servers": nodes.kafka(1)}).list_topics("u", timeout=10).topics[
                    "u"].partitions[0]
                return int(part.leader), sorted(part.isrs)

            wait_until("u-0 led by 2, both in sync", lambda: state() == (2, [2, 3]))
            nodes.kill(3)
            wait_until("u-0's ISR without node 3", lambda: state() == (2, [2]))
            nodes.kill(2)
            wait_until("u-0 without a leader", lambda: state()[0] == -1)
            for kind, refused in (("--preferred", "PREFERRED_LEADER_NOT_AVAILABLE"),
                                  ("--unclean", "ELIGIBLE_LEADERS_NOT_AVAILABLE")):  # the CLI, as Kafka's tool
                code, rows = cli(nodes, kind, "--topic", "u", "--partition", "0")
                assert code == 1 and [(r["partition"], r["result"], r["leader"]) for r in rows] == [(0, refused, None)]
            nodes.start(3)
            wait_until("node 3 registered again", lambda: len(AdminClient(
                {"bootstrap.servers": nodes.kafka(1)}).list_topics(timeout=10).brokers) == 2)
            assert state()[0] == -1, "no clean election without 2"
            results, leaders = elect(java, nodes, "unclean", "u", 0)
            assert results == {0: "ok"} and leaders == {0: 3}
            assert state() == (3, [3])
            code, rows = cli(nodes)  # every partition: only u-0 is listed, its preferred replica (2) being down
            assert code == 1 and [(r["topic"], r["partition"], r["result"], r["leader"]) for r in rows] == [
                ("u", 0, "PREFERRED_LEADER_NOT_AVAILABLE", 3)]
            nodes.kill(3)  # (it leads u-0 alone: a SIGTERM would wait for its controlled shutdown in vain)
        finally:
            nodes.close()
    for log in nodes.logs():
        assert "Traceback" not in log.read_text(errors="replace"), log


def test_the_controller_moves_leadership_back_to_preferred_replicas_by_itself(tmp_path: Path) -> None:
    with etcd_cluster(tmp_path / "etcd", 1) as etcd:
        quick = LEASE | {"WALGATE_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": "1"}
        nodes = Nodes(etcd, tmp_path, env={i: quick for i in (1, 2, 3)})
        try:
            nodes.start_all((1, 2, 3))
            replicated_database(nodes)
            prefers = {p: preferred(nodes, TOPIC, p, 2) for p in range(VGROUPS)}
            victim = prefers[0]
            nodes.kill(victim)
            via = nodes.answering(but=victim)
            wait_until(f"partition 0 led by another node than {victim}", lambda: nodes.leader(0, via) not in (-1, victim))
            nodes.start(victim)
            wait_until(f"every partition led by its preferred replica again ({prefers})",
                       lambda: all(nodes.leader(p, via) == node for p, node in prefers.items()))
            log = "\n".join(p.read_text(errors="replace") for p in nodes.logs())
            assert "preferred-leader rebalance" in log
            for node_id in list(nodes.servers):  # (kill -9: a SIGTERM would wait for each controlled shutdown)
                nodes.kill(node_id)
        finally:
            nodes.close()
    for path in nodes.logs():
        assert "Traceback" not in path.read_text(errors="replace"), path
