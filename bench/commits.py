"""OffsetCommit benchmarks: synchronous commits (walgate fsyncs each before answering) and what they do to readers.

* commits/s of one consumer, and of ten consumers at once (processes of their own, each its own group, committing
  synchronously in a loop: bench/together.py), beside the disk's rate of 64-byte appends each fsynced (one
  synchronous writer), beside noida-db with the same clients;
* a consumer's latency (bench/latency.py: from a producer's acknowledgement to the consumer's receipt, long-polling
  a Kafka-native topic written one record at a time) with no commits and while the ten commit: whether fetches
  wait behind the commits' fsyncs; and the same two latencies on noida-db, for what this 2-core machine's CPUs,
  shared by ten committing clients, the tailing consumer and the broker, allow any broker.

Issue 15's targets: the ten at least 50 % of the append+fsync rate, and the latency p99 while they commit at most
1.5x the p99 without them (unaffected, within this machine's noise). Without the noida-db binary its rows are
left out, with a message (bench/tools.py).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.latency import measure, percentiles, produced, quantile
from bench.limits import fsyncs_per_second
from bench.produce import PARTITIONS, create
from bench.report import Row, Target
from bench.servers import noida, walgate
from bench.together import Gate, at_once

COMMITTERS = 10


def committer(bootstrap: str, topic: str, gate: Gate) -> tuple[int, float]:
    """:data:`bench.together.Work`: synchronous OffsetCommits by one consumer of its own group, round-robin over
    the partitions, until told to stop."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"commit-{uuid.uuid4().hex[:8]}"})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)  # connect and find the coordinator
        gate.open()
        n = 0
        while gate.running:
            c.commit(offsets=[TopicPartition(topic, n % PARTITIONS, n + 2)], asynchronous=False)
            n += 1
        return n, time.perf_counter()
    finally:
        c.close()


def commit_rate(bootstrap: str, pid: int, topic: str, consumers: int, seconds: float) -> float:
    """Aggregate commits/s of ``consumers`` committing at once for ``seconds``."""
    with at_once(committer, [(bootstrap, topic)] * consumers, pid) as tally:
        time.sleep(seconds)
    return tally.rate


def run(*, quick: bool, repeat: int) -> list[Row]:
    window, samples = (3.0, 300) if quick else (10.0, 2000)
    topic = "c"
    rates: dict[tuple[str, int], float] = {}
    latency: dict[str, list[float]] = {}
    peer_latency: dict[str, list[float]] = {}  # noida-db's, the same measurement: what this machine's CPUs allow
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp:
        limit = ("append 64 B + fsync, one file", fsyncs_per_second(Path(tmp) / "fsync"))
        with walgate(Path(tmp) / "walgate") as server:
            create(server.bootstrap, topic)
            for n in (1, COMMITTERS):
                rates["walgate", n] = statistics.median(
                    commit_rate(server.bootstrap, server.pid, topic, n, window) for _ in range(repeat))
            create(server.bootstrap, "lat")
            latency["no commits"] = measure(server.bootstrap, "lat", produced(server.bootstrap, "lat"), samples)
            with at_once(committer, [(server.bootstrap, topic)] * COMMITTERS, server.pid) as load:
                latency["while they commit"] = measure(server.bootstrap, "lat", produced(server.bootstrap, "lat"),
                                                       samples)
        with noida(Path(tmp) / "noida") as peer:
            if peer is not None:
                create(peer[0], topic)
                for n in (1, COMMITTERS):
                    rates["noida-db", n] = statistics.median(
                        commit_rate(*peer, topic, n, window) for _ in range(repeat))
                create(peer[0], "lat")
                peer_latency["no commits"] = measure(peer[0], "lat", produced(peer[0], "lat"), samples)
                with at_once(committer, [(peer[0], topic)] * COMMITTERS, peer[1]):
                    peer_latency["while they commit"] = measure(peer[0], "lat", produced(peer[0], "lat"), samples)
    rows: list[Row] = []
    for n in (1, COMMITTERS):
        label = "OffsetCommit, synchronous, 1 consumer" if n == 1 else f"OffsetCommit, {n} consumers at once"
        rows.append(Row(label, rates["walgate", n], "commits/s", *limit,
                        target=Target(0.5, of_limit=True) if n > 1 else None))
        if ("noida-db", n) in rates:
            rows.append(Row("  noida-db, same clients", rates["noida-db", n], "commits/s"))
    for when, lat in latency.items():
        rows += percentiles(f"fetch latency, {when}", lat, (0.5, 0.99))
    rows.append(Row(f"  commits/s meanwhile ({COMMITTERS} consumers)", load.rate, "commits/s", *limit))
    if all(latency.values()):
        rows.append(Row("  p99 while they commit / without",
                        quantile(latency["while they commit"], 0.99) / quantile(latency["no commits"], 0.99), "x",
                        target=Target(1.5, at_most=True)))
    if len(peer_latency) == 2 and all(peer_latency.values()):
        rows.append(Row("  noida-db, same clients: p99 while they commit / without",
                        quantile(peer_latency["while they commit"], 0.99) / quantile(peer_latency["no commits"], 0.99),
                        "x"))
    return rows
