"""A rolling restart of a 3-node cluster under load (issue 26, "Measured"): what a restart of every node, one after
another, costs the producers of a replicated topic (``replication.enable=true``, one etcd member,
:func:`bench.cluster.cluster`).

A Kafka-native topic of 3 partitions, replication factor 3 and ``min.insync.replicas=2`` (placement rotates the
preferred leaders over the nodes); a confluent-kafka idempotent producer with ``acks=all``, bootstrapped on every
node, sends one 100-byte record at a time to the partitions in turn and waits for its acknowledgement: at steady
state for :data:`STEADY_S` seconds, half before the roll and half after it (every node back in every ISR), so that a
change of this shared machine's load during the run touches the baseline too, and while nodes 1, 2 and 3 are
restarted in turn as docs/cluster.md ("A rolling restart") says: SIGTERM (a controlled shutdown: the node marks
its registration shutting down, the controller moves its leaderships to the other in-sync replicas, it deregisters
and exits once it leads nothing),
wait for the exit, start it again with the same command and data dir, wait until its ``/readyz`` answers 200 (its
``replicas`` check: back in the ISR of every vgroup it replicates), then the next. Rows: the p50, p99 and slowest
acknowledgement during the roll against steady state, the roll's total time, and each node's hand-over (SIGTERM to
exit), start (to ``/healthz`` 200) and catch-up (from then to ``/readyz`` 200). A send not acknowledged within 30 s
stops the run: none is expected.

``python -m bench --only rolling`` (``--quick``: 3 s of steady state instead of 10). Nothing is asserted but that
every send is acknowledged; tests/cluster/test_serve_cluster_rolling_restart.py checks what clients saw.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cluster import cluster, delivered, quantile, sends
from bench.report import Row
from walgate.gateway.cluster_up import STOP_TIMEOUT_S, LocalCluster, Node

ENABLED = ("--override", "replication.enable=true", "--override", "replica.lag.time.max.ms=2000")
"""replica.lag.time.max.ms: a restarted node's ISR rejoin is proposed within a second of its catching up."""
TOPIC, PARTITIONS = "rolling", 3
STEADY_S = 10.0
READY_S = 120.0  # a restarted node back in every ISR, on a loaded machine


def restart(running: LocalCluster, node: Node) -> tuple[float, float, float]:
    """Restart ``node`` of ``running`` as an operator does (the module docstring); the seconds from SIGTERM to its
    exit (the hand-over), from its start to its ``/healthz`` 200 (the process serves: engine open, HTTP bound) and
    from then to its ``/readyz`` 200 (registered, partition states read, back in every ISR). The new process takes the
    old one's place in ``running``, which stops it by PID at the end."""
    process = next(p for p in running.processes if p.name == f"node{node.node_id}")
    start = time.perf_counter()
    process.proc.send_signal(signal.SIGTERM)
    if process.proc.wait(STOP_TIMEOUT_S) != 0:
        raise RuntimeError(f"node {node.node_id} exited with {process.proc.returncode} (log {process.log})")
    exited = time.perf_counter()
    started, caught_up = relaunch(running, node)
    return exited - start, started, caught_up


def relaunch(running: LocalCluster, node: Node) -> tuple[float, float]:
    """Start ``node`` of ``running``, whose process has exited, again with the same command and data dir (the new
    process takes the old one's place in ``running``, which stops it by PID at the end); the seconds from its start
    to its ``/healthz`` 200 and from then to its ``/readyz`` 200 (back in every ISR), each at most :data:`READY_S`."""
    process = next(p for p in running.processes if p.name == f"node{node.node_id}")
    begin = time.perf_counter()
    with open(process.log, "ab") as out:
        process.proc = subprocess.Popen(process.proc.args, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
    marks = [begin]
    for probe in ("/healthz", "/readyz"):
        while not http_ok(node.http_url + probe):
            if process.proc.poll() is not None or time.perf_counter() - begin > READY_S:
                raise RuntimeError(f"node {node.node_id}: {probe} not 200 within {READY_S:g} s of its restart (log "
                                   f"{process.log})")
            time.sleep(0.05)
        marks.append(time.perf_counter())
    return marks[1] - marks[0], marks[2] - marks[1]


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 within 5 s."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The rows of the module docstring (``repeat`` is not used: one roll)."""
    with cluster(3, *ENABLED) as running:
        bootstrap = running.plan.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                            request_timeout=120)[TOPIC].result(timeout=180)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": True, "message.timeout.ms": 30_000})
        for p in range(PARTITIONS * 10):  # connected, the leaders known and their ISR full before the samples
            delivered(producer, TOPIC, p % PARTITIONS, b"warm")
        half = (3.0 if quick else STEADY_S) / 2
        steady = sends(producer, TOPIC, PARTITIONS, time.perf_counter() + half)
        rolled = threading.Event()
        took: list[tuple[float, float, float]] = []
        failed: list[BaseException] = []

        def roll() -> None:
            try:
                took.extend(restart(running, node) for node in running.plan.nodes)
            except BaseException as e:  # handed to the main thread, which raises it
                failed.append(e)
            finally:
                rolled.set()

        roller = threading.Thread(target=roll, name="rolling-restart")
        begin = time.perf_counter()
        roller.start()
        during = sends(producer, TOPIC, PARTITIONS, rolled)
        total = time.perf_counter() - begin
        roller.join()
        if failed:
            raise failed[0]
        steady += sends(producer, TOPIC, PARTITIONS, time.perf_counter() + half)
    print(f"bench: rolling restart of 3 nodes in {total:.2f} s; (hand-over, start, catch-up) s per node: "
          f"{[tuple(round(t, 2) for t in times) for times in took]}; {len(steady)} sends at steady state, "
          f"{len(during)} during", flush=True)
    ms = 1e3
    rows = [
        Row("rolling: acks=all produce p50 during a rolling restart", statistics.median(during) * ms, "ms",
            "steady state", statistics.median(steady) * ms),
        Row("rolling: acks=all produce p99 during a rolling restart", quantile(during, 0.99) * ms, "ms",
            "steady state", quantile(steady, 0.99) * ms),
        Row("rolling: slowest acks=all produce during a rolling restart", max(during) * ms, "ms",
            "steady state", max(steady) * ms),
        Row("rolling: rolling restart of 3 nodes, total", total, "s"),
    ]
    for node, (handed, started, caught) in zip(running.plan.nodes, took):
        rows += [Row(f"  node {node.node_id}: hand-over (SIGTERM to exit)", handed, "s"),
                 Row(f"  node {node.node_id}: start (to /healthz 200)", started, "s"),
                 Row(f"  node {node.node_id}: catch-up (/healthz 200 to /readyz 200)", caught, "s")]
    return rows
