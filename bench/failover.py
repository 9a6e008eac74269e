"""Failover under load (issue 25, "Measured"): from a partition leader's kill -9 to the producer's first
acknowledged write on the new leader, against the bound the issue sets, the lease TTL + 3 s.

Three ``walgate serve --cluster`` nodes over one etcd member (:func:`bench.cluster.cluster`) with
``replication.enable=true``, ``broker.session.timeout.ms`` = :data:`SESSION_MS` (the nodes' etcd lease TTL: a killed
node's registration expires within it and the controller elects a new leader from the ISR) and
``replica.lag.time.max.ms=2000``, as the cluster tests run them. A Kafka-native topic of one partition, replication
factor 3, ``min.insync.replicas=2``; a confluent-kafka idempotent producer (acks=all, bootstrapped on every node)
sends one 100-byte record at a time, waiting for each acknowledgement, throughout. Each round: wait until the
partition's ISR is full and every node's ``/readyz`` answers 200, note the controller, find the partition's leader
(Metadata), kill -9 it, and time from the kill to the first Metadata answer (asked every 50 ms through the other
nodes) that names another leader (the election: the lease lapsing, the controller's etcd transaction, the new leader
and the node asked reading the state) and to the first acknowledgement of a record sent after the kill (the old
leader is dead by then: a new leader acknowledged it; librdkafka's delivery reports carry no leader epoch to check
it by); then start the node again on its data dir (:func:`bench.rolling.relaunch`: to ``/healthz`` 200, then
``/readyz`` 200, back in every ISR) and go on. Rows: the p50, p99 and slowest failover over the rounds (the p99 and
the slowest with the bound as target), the p50 and p99 of the election part, how many rounds exceeded the bound (and
how many of the killed leaders were also the controller, whose election waits for the same lease), and the median
restart and catch-up.

``python -m bench --only failover`` (``--quick``: 3 kills instead of :data:`KILLS`). A write that fails, or a round
with no new leader in Metadata or no acknowledgement under it within :data:`ACK_WAIT_S`, stops the run.
"""

from __future__ import annotations

import signal
import statistics
import threading
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cluster import cluster, controller, quantile
from bench.report import Row, Target
from bench.rolling import READY_S, http_ok, relaunch
from walgate.gateway.cluster_up import LocalCluster

SESSION_MS = 2000
ENABLED = ("--override", "replication.enable=true", "--override", f"broker.session.timeout.ms={SESSION_MS}",
           "--override", "replica.lag.time.max.ms=2000")
BOUND_S = SESSION_MS / 1e3 + 3.0
"""Issue 25's bound: the lease TTL + 3 s."""
TOPIC = "failover"
KILLS = 20
ACK_WAIT_S = 120.0


@dataclass(frozen=True)
class Ack:
    """One acknowledged record: when it was sent and acknowledged (time.perf_counter())."""

    sent: float
    acked: float


class Writer(threading.Thread):
    """The producer of the module docstring, in a thread of its own until :meth:`finish`; every acknowledgement in
    :attr:`acks` (in order), every failed write in :attr:`errors`."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="failover-writer", daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 0, "message.timeout.ms": int(ACK_WAIT_S * 1e3)})
        self.acks: list[Ack] = []
        self.errors: list[str] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set() and not self.errors:
            sent = time.perf_counter()

            def report(err: KafkaError | None, _: Message, sent: float = sent) -> None:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acks.append(Ack(sent, time.perf_counter()))

            self.producer.produce(TOPIC, b"x" * 100, partition=0, on_delivery=report)
            if self.producer.flush(ACK_WAIT_S + 10) != 0:
                self.errors.append(f"not acknowledged within {ACK_WAIT_S + 10:g} s")

    def finish(self) -> None:
        self._done.set()
        self.join(ACK_WAIT_S + 20)
        if self.errors:
            raise RuntimeError(f"failover: a write failed: {self.errors[:3]}")

    def ack_after(self, since: float) -> Ack:
        """The first acknowledgement of a record sent after ``since``, waiting up to :data:`ACK_WAIT_S`."""
        deadline = since + ACK_WAIT_S
        checked = 0
        while time.perf_counter() < deadline:
            if self.errors:
                raise RuntimeError(f"failover: a write failed: {self.errors[:3]}")
            acks = self.acks[checked:]
            for a in acks:
                if a.sent > since:
                    return a
            checked += len(acks)
            time.sleep(0.005)
        raise RuntimeError(f"failover: no write acknowledged by a new leader within {ACK_WAIT_S:g} s of the kill")


@dataclass(frozen=True)
class Round:
    """One kill: the node killed, whether it was the controller too, seconds from the kill to the first Metadata
    answer naming another leader and to the first acknowledgement under the new leader, from the restart to
    ``/healthz`` 200 and from then to ``/readyz`` 200."""

    node: int
    controller: bool
    elected: float
    failover: float
    start: float
    catch_up: float


def settled(running: LocalCluster, admin: AdminClient, topic: str = TOPIC) -> int:
    """Wait (at most :data:`READY_S`) until every node's ``/readyz`` answers 200 and partition 0 of ``topic`` has a
    leader and every node in its ISR; its leader's node id."""
    deadline = time.perf_counter() + READY_S
    while time.perf_counter() < deadline:
        if all(http_ok(n.http_url + "/readyz") for n in running.plan.nodes):
            p = admin.list_topics(topic, timeout=30).topics[topic].partitions[0]
            if p.leader > 0 and len(p.isrs) == len(running.plan.nodes):
                return int(p.leader)
        time.sleep(0.1)
    raise RuntimeError(f"failover: the cluster did not settle (every node ready, the ISR full) within {READY_S:g} s")


def kill_round(running: LocalCluster, admin: AdminClient, writer: Writer) -> Round:
    """One round of the module docstring."""
    leader = settled(running, admin)
    writer.ack_after(time.perf_counter())  # the producer writes to the settled leader
    was_controller = controller(running, leader) == leader
    node = next(n for n in running.plan.nodes if n.node_id == leader)
    process = next(p for p in running.processes if p.name == f"node{leader}")
    killed = time.perf_counter()
    process.proc.send_signal(signal.SIGKILL)
    process.proc.wait(30)
    elected = _elected(admin, leader, killed)
    first = writer.ack_after(killed)
    start, catch_up = relaunch(running, node)
    return Round(leader, was_controller, elected - killed, first.acked - killed, start, catch_up)


def _elected(admin: AdminClient, old: int, since: float) -> float:
    """When a Metadata answer (asked every 50 ms) first named a leader other than ``old`` for the partition, at most
    :data:`ACK_WAIT_S` after ``since``."""
    while time.perf_counter() < since + ACK_WAIT_S:
        try:
            leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
        except KafkaException:  # no node answered in time (the one asked was the killed one): ask again
            leader = -1
        if leader not in (old, -1):
            return time.perf_counter()
        time.sleep(0.05)
    raise RuntimeError(f"failover: no Metadata answer named a new leader within {ACK_WAIT_S:g} s of the kill")


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The rows of the module docstring (``repeat`` is not used: one series of kills)."""
    kills = 3 if quick else KILLS
    rounds: list[Round] = []
    with cluster(3, *ENABLED) as running:
        bootstrap = running.plan.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})],
                            request_timeout=120)[TOPIC].result(timeout=180)
        writer = Writer(bootstrap)
        writer.start()
        try:
            for i in range(kills):
                r = kill_round(running, admin, writer)
                rounds.append(r)
                print(f"bench: failover {i + 1}/{kills}: node {r.node}{' (the controller)' if r.controller else ''} "
                      f"killed; Metadata names the new leader after {r.elected:.2f} s, first ack under it after "
                      f"{r.failover:.2f} s; restart {r.start:.2f} s, "
                      f"catch-up {r.catch_up:.2f} s", flush=True)
        finally:
            writer.finish()
    return failover_rows(rounds, len(writer.acks))


def failover_rows(rounds: list[Round], acknowledged: int) -> list[Row]:
    """The rows of the module docstring from the rounds (``acknowledged``: the writes acknowledged in all)."""
    times, elections = [r.failover for r in rounds], [r.elected for r in rounds]
    over = [r for r in rounds if r.failover > BOUND_S]
    bound = Target(BOUND_S, at_most=True)
    label = f"kill -9 of the leader to the first ack on the new leader ({len(rounds)} kills, lease TTL {SESSION_MS} ms)"
    return [
        Row(f"failover: {label}, p50", statistics.median(times), "s"),
        Row("  p99", quantile(times, 0.99), "s", "lease TTL + 3 s", BOUND_S, bound),
        Row("  slowest", max(times), "s", "lease TTL + 3 s", BOUND_S, bound),
        Row("  of which the election: kill -9 to the first Metadata naming another leader, p50",
            statistics.median(elections), "s"),
        Row("  the election, p99", quantile(elections, 0.99), "s"),
        Row(f"  kills over lease TTL + 3 s (of {len(rounds)}; {sum(r.controller for r in rounds)} killed leaders were "
            f"the controller, {sum(r.controller for r in over)} of those over)", len(over), "kills"),
        Row(f"  restarted node: start (to /healthz 200), median; {acknowledged:,} writes acknowledged in all",
            statistics.median(r.start for r in rounds), "s"),
        Row("  restarted node: catch-up (/healthz 200 to /readyz 200), median", statistics.median(r.catch_up
                                                                                               for r in rounds), "s"),
    ]
