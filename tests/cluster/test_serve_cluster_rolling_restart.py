"""A rolling restart of a 3-node RF=3 cluster under load (issue 26, "Membership"): three real ``walgate serve
--cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID), unmodified clients.

A Kafka-native topic of replication factor 3 and ``min.insync.replicas=2`` takes an idempotent ``acks=all``
confluent-kafka producer's unique values while a ``read_committed`` consumer assigned every partition reads them
(test_serve_cluster_replicated_topics.py's workload). Nodes 1, 2 and 3 are restarted in turn as an operator does it
(docs/cluster.md, "A rolling restart"): SIGTERM (a controlled shutdown, KIP-631: the node marks its registration
shutting down and stays registered while the controller moves its leaderships to other in-sync replicas, then
deregisters and exits), wait for the exit, start it again on the same data dir and Kafka port (its listener accepts
connections once it read the partition states), wait until its ``/readyz`` says ``replicas`` ok (it is back in the
ISR of every vgroup it replicates), then the next. Meanwhile a thread asks every node for the topic's Metadata, about
every 20 ms over a connection of its own to each node, and notes any partition answered without a leader while a
registered replica is in its ISR (:class:`LeaderWatch`). Checked: every node exits 0 and its log holds no traceback;
the producer reported no fatal error and gave up no send; tests/cluster/history.py's checker finds nothing (every
acknowledged value read once, at one offset, in order, and held by a full read of each partition through each node);
every node ends in the ISR of every partition; and no partition was ever answered without a leader while it could
have one (:class:`LeaderlessWindow`: a stopping node, the others during its hand-over, or a starting node naming
none, docs/cluster.md's three windows of before); and, every node stopped, each replica's WAL and offset index are
the others' entry by entry below the high watermark (tests/cluster/replica_copies.py, the checker's
replica-divergence).
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from history import FinalRead, Op, check
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from serve_support import create_topics, eventually, no_traceback, node, readyz
from test_serve_cluster_replicated_topics import (
    ARGS,
    FINAL,
    KT_CONFIGS,
    PARTITIONS,
    TOPIC,
    Reader,
    Writer,
    bootstrap,
    described,
    full_read,
    identical_replicas,
    three_nodes,
)

from walgate.admin.client import AdminError
from walgate.admin.kafka_calls import KafkaCalls

SESSION = ("--override", "broker.session.timeout.ms=6000")
"""A controlled shutdown does not wait for a lease to run out: a TTL of 6 s, not serve_support's 2 s (a kill's), so
that this loaded machine's stalls (etcd's too: every node's lease was seen expire at once) rarely fence a node."""
POLL_S = 0.02
"""The pause between two rounds of the watcher's Metadata requests (one to each node)."""


class LeaderlessWindow(AssertionError):
    """Some node answered Metadata for a partition without a leader during the roll."""


class LeaderWatch(threading.Thread):
    """Asks each node of ``ports`` in turn for ``topic``'s Metadata (v12), over a connection of its own to that
    node (made again at the next request when it fails: the node stopped, or is starting), until stopped;
    ``leaderless`` collects (time.monotonic(), port, partition, error code, leader) of each partition answered
    without a leader while its ISR, as answered, has a registered member (not among its offline replicas: a live
    replica could lead it), or while the node answering read no partition state of it (leader epoch -1), not one
    whose ISR has none (Kafka's offline partition: its last in-sync replica stopped, or lost its lease on this loaded
    machine, until it is back); ``answered`` counts the answers of each port."""

    def __init__(self, ports: list[int], topic: str = TOPIC) -> None:
        super().__init__(daemon=True)
        self.ports, self.stopped = ports, threading.Event()
        self.request = MetadataRequest(topics=(MetadataRequestTopic(name=TopicName(topic), topic_id=None),),
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        self.leaderless: list[tuple[float, int, int, int, int]] = []
        self.answered = dict.fromkeys(ports, 0)

    @property
    def answers(self) -> int:
        return sum(self.answered.values())

    def run(self) -> None:
        with ExitStack() as stack:
            calls = {port: stack.enter_context(KafkaCalls(f"127.0.0.1:{port}", {"client.id": "rolling-watch"}, 2))
                     for port in self.ports}
            while not self.stopped.wait(POLL_S):
                for port, node_calls in calls.items():
                    try:
                        [topic] = node_calls.call(self.request).topics
                    except AdminError:  # not listening now (stopped, or not started yet), or it closed the connection
                        continue
                    self.answered[port] += 1
                    self.leaderless += [(time.monotonic(), port, p.partition_index, p.error_code, p.leader_id)
                                        for p in topic.partitions if (p.leader_id < 0 or p.error_code != 0) and (
                                            p.leader_epoch < 0 or set(p.isr_nodes) - set(p.offline_replicas))]


def when(t: float, events: list[tuple[float, str]]) -> str:
    """The last of ``events`` (time.monotonic(), what) at or before ``t``."""
    return next((what for at, what in reversed(events) if at <= t), "before the roll")


def test_a_rolling_restart_under_load_keeps_every_partition_led_and_every_acknowledged_write(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path, *SESSION)
        create_topics(bootstrap(nodes), NewTopic(TOPIC, PARTITIONS, 3, config=KT_CONFIGS))
        eventually("every partition led, its three replicas in the ISR", lambda: all(
            leader in replicas and isr == [1, 2, 3] for leader, replicas, isr in described(nodes[0], TOPIC).values()))

        history: list[Op] = []
        reader, writer = Reader(bootstrap(nodes), history), Writer(bootstrap(nodes), history)
        acked = writer.acked
        watch = LeaderWatch([s.kafka_port for s in nodes])
        for thread in (reader, writer, watch):
            thread.start()
        events: list[tuple[float, str]] = []  # (time.monotonic(), what the roll did then)
        try:
            eventually("values acknowledged", lambda: acked() > 20)
            for i, old in enumerate(list(nodes)):
                events.append((time.monotonic(), f"node {i + 1} stopping (SIGTERM sent)"))
                old.proc.send_signal(signal.SIGTERM)
                assert old.proc.wait(timeout=30) == 0, old.log()[-3000:]
                events.append((time.monotonic(), f"node {i + 1} starting (it exited; started again)"))
                no_traceback(old)
                nodes[i] = stack.enter_context(node(etcd1, tmp_path / f"restart{i + 1}", i + 1, *ARGS, *SESSION,
                                                    data_dir=old.data_dir, kafka_port=old.kafka_port))
                events.append((time.monotonic(), f"node {i + 1} logged ready"))
                eventually(f"node {i + 1} caught up: /readyz's replicas ok",
                           lambda s=nodes[i]: readyz(s)["checks"].get("replicas") == "ok")
                events.append((time.monotonic(), f"node {i + 1} caught up (/readyz ok)"))
                before = acked()
                eventually(f"values acknowledged after node {i + 1}'s restart", lambda b=before: acked() > b + 20)
        finally:
            writer.stop()
            reader.stop(acked())
            watch.stopped.set()
            watch.join(30)
        assert [e for e in writer.errors if e.fatal()] == [], writer.errors
        assert writer.failed == [], writer.failed
        reads_of = [(k + 1, server, p) for k, server in enumerate(nodes) for p in range(PARTITIONS)]
        with ThreadPoolExecutor(len(reads_of)) as pool:  # each partition read whole through each node, at once
            finals = list(pool.map(lambda r: FinalRead(FINAL + r[0], str(r[2]), full_read(r[1], r[2])), reads_of))
        history += finals
        assert check(history) == []
        assert reader.read() >= acked(), "the consumer read every acknowledged value"
        eventually("every node in the ISR of every partition", lambda: all(
            isr == [1, 2, 3] for _, _, isr in described(nodes[0], TOPIC).values()))
        for server in nodes:
            no_traceback(server)
        assert watch.answers > 100
        ports = {s.kafka_port: k + 1 for k, s in enumerate(nodes)}
        seen = sorted({(ports[port], p, error, leader, when(t, events))
                       for t, port, p, error, leader in watch.leaderless})
        if seen:
            raise LeaderlessWindow(f"{len(watch.leaderless)} partitions answered without a leader (node "
                                   f"answering, partition, error code, leader, during): {seen}")
        identical_replicas(stack, dict(enumerate(nodes, 1)), tmp_path / "replicas")


def test_metadata_names_a_live_leader_through_a_controlled_shutdown_and_a_start(etcd1: EtcdCluster,
                                                                                 tmp_path: Path) -> None:
    """The three windows of docs/cluster.md's "What clients see", one at a time and without load: node 1 (the
    controller, leading some of 6 partitions of factor 3) stopped with SIGTERM while every node is asked for
    Metadata every 20 ms, then started again. No answer names no leader for a partition a registered replica is in
    sync for: not the stopping node (it stays registered until its leaderships moved), not the others during its
    hand-over, not the restarted node (it accepts connections once it read the partition states)."""
    topic = "windows"
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path, *SESSION)
        create_topics(bootstrap(nodes), NewTopic(topic, 6, 3, config={"min.insync.replicas": "2"}))
        eventually("every partition led, its three replicas in the ISR", lambda: all(
            leader in replicas and isr == [1, 2, 3] for leader, replicas, isr in described(nodes[0], topic).values()))
        assert 1 in {leader for leader, _, _ in described(nodes[0], topic).values()}, "node 1 leads some partition"
        old = nodes[0]
        watch = LeaderWatch([s.kafka_port for s in nodes], topic)
        watch.start()
        try:
            eventually("every node answered", lambda: all(watch.answered.values()))
            old.proc.send_signal(signal.SIGTERM)
            assert old.proc.wait(timeout=30) == 0, old.log()[-3000:]
            assert "controlled shutdown: leadership of" in old.log(), old.log()[-3000:]
            before = watch.answered[old.kafka_port]
            nodes[0] = stack.enter_context(node(etcd1, tmp_path / "restart1", 1, *ARGS, *SESSION,
                                                data_dir=old.data_dir, kafka_port=old.kafka_port))
            eventually("the restarted node answered", lambda: watch.answered[old.kafka_port] > before + 5)
        finally:
            watch.stopped.set()
            watch.join(30)
        for server in (old, *nodes):
            no_traceback(server)
        ports = {s.kafka_port: k + 1 for k, s in enumerate(nodes)}
        assert watch.leaderless == [], sorted({(ports[port], p, error, leader)
                                               for _, port, p, error, leader in watch.leaderless})
