"""Consume benchmarks (issue: consumption path), confluent-kafka (librdkafka) as the client.

* one consumer reading a pre-filled ``AS SELECT`` topic of meters rows, cold
  (first read renders the JSON record batches) and warm (rendered batches
  served from the cache), beside Tansu serving the same records (same keys,
  values, headers, timestamps, 4 partitions) to the same client, and beside
  the loopback socket limit measured in the same run;
* ten consumers at once on the same topic: aggregate records/s divided by one
  consumer's (render-once: the JSON is built once for all of them);
* the same read with kcat (librdkafka in C, nothing printed), so the Python
  client's per-record cost does not hide the server's speed (Debian's kcat,
  librdkafka 2.0.2, cannot talk to Tansu 0.6: its ApiVersions answer underflows).

Without kcat or the Tansu binary their rows are left out, with a message (bench/tools.py).

End-to-end latency is bench/latency.py.
"""

from __future__ import annotations

import multiprocessing
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.ingest import lines
from bench.report import Row, median_run
from bench.servers import Walgate, loopback_mb_s, tansu, walgate
from bench.tools import program

PARTITIONS = 4
TOPIC = "bench_meters"
TOPIC_SQL = f"CREATE TOPIC {TOPIC} AS SELECT _ts, current, voltage, phase, location FROM b.meters WHERE voltage > 205"


def consume_all(bootstrap: str, expected: int, timeout: float = 120.0, *, topic: str = TOPIC,
                partitions: int = PARTITIONS, **conf: object) -> tuple[int, int, float]:
    """(records, value bytes, seconds) for one consumer reading every partition from offset 0."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, **conf})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n = nbytes = 0
    deadline = time.perf_counter() + timeout
    start = 0.0  # the clock starts at the first record: connecting is not part of the rate
    while n < expected and time.perf_counter() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                start = start or time.perf_counter()
                n += 1
                nbytes += len(m)
    seconds = time.perf_counter() - start
    c.close()
    return n, nbytes, seconds


def kcat_seconds(kcat: str, bootstrap: str, expected: int) -> float:
    """Seconds ``kcat`` (librdkafka in C, nothing printed) takes to read ``expected`` records, minus its start-up
    (the time it takes to read a single record)."""

    def timed(count: int) -> float:
        start = time.perf_counter()
        subprocess.run([kcat, "-b", bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-c", str(count), "-q", "-f", ""],
                       check=True, timeout=300, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start

    return max(timed(expected) - timed(1), 1e-6)


def _consume_worker(args: tuple[str, int]) -> tuple[int, int, float]:
    return consume_all(*args)


def fill_walgate(server: Walgate, batches: int) -> int:
    """Create the database, the topic and ``batches`` x 5000 rows; returns the topic's record count."""
    server.post("/rest/sql", f"CREATE DATABASE b VGROUPS {PARTITIONS}".encode())
    server.post("/influxdb/v1/write?db=b&precision=ms", lines(5000, 0))
    server.post("/rest/sql", TOPIC_SQL.encode())
    for k in range(1, batches):
        server.post("/influxdb/v1/write?db=b&precision=ms", lines(5000, k * 5000))
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "bench-count"})
    total = 0
    for p in range(PARTITIONS):
        lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
        total += hi - lo
    c.close()
    return total


def copy_to_tansu(src: str, dst: str, expected: int) -> None:
    """Produce every record of the walgate topic, unchanged, into the same topic on ``dst``."""
    admin = AdminClient({"bootstrap.servers": dst})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    c = Consumer({"bootstrap.servers": src, "group.id": "bench-copy", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    p = Producer({"bootstrap.servers": dst, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1})
    n = 0
    deadline = time.monotonic() + 300
    while n < expected and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                p.produce(TOPIC, m.value(), m.key(), partition=m.partition(), timestamp=m.timestamp()[1], headers=m.headers())
                n += 1
            p.poll(0)
    p.flush(60)
    c.close()


def run(*, quick: bool, repeat: int) -> list[Row]:
    batches = 20 if quick else 80
    rows: list[Row] = []
    limit = loopback_mb_s(1 << 28 if quick else 1 << 30)
    kcat = program("kcat", "kcat rows", "Debian: apt-get install kcat")
    peer_runs: list[tuple[int, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp)) as server:
        expected = fill_walgate(server, batches)
        cold = consume_all(server.bootstrap, expected)
        warm = [consume_all(server.bootstrap, expected) for _ in range(repeat)]
        warm_n, warm_b, warm_s = median_run(warm, lambda r: r[2])
        with tansu() as peer:
            if peer is not None:
                copy_to_tansu(server.bootstrap, peer, expected)
                peer_runs = [consume_all(peer, expected) for _ in range(repeat)]
        if kcat is not None:
            own_kcat = statistics.median(kcat_seconds(kcat, server.bootstrap, expected) for _ in range(repeat))
        consumers = 10
        with multiprocessing.Pool(consumers) as pool:
            start = time.perf_counter()
            results = pool.map(_consume_worker, [(server.bootstrap, expected)] * consumers)
            fan_s = time.perf_counter() - start
        fan_rate = sum(r[0] for r in results) / fan_s
    one = warm_n / warm_s
    rows.append(Row("AS SELECT topic, 1 consumer, cold (renders)", cold[0] / cold[2], "records/s"))
    rows.append(Row("AS SELECT topic, 1 consumer, warm", one, "records/s"))
    if peer_runs:
        peer_n, peer_b, peer_s = median_run(peer_runs, lambda r: r[2])
        rows.append(Row("  same records from Tansu", peer_n / peer_s, "records/s"))
        rows.append(Row("  walgate / Tansu", 100 * one / (peer_n / peer_s), "%"))
    rows.append(Row("AS SELECT topic, 1 consumer, warm", warm_b / warm_s / 1e6, "MB/s", "loopback sendfile", limit))
    if peer_runs:
        rows.append(Row("  same records from Tansu", peer_b / peer_s / 1e6, "MB/s", "loopback sendfile", limit))
    if kcat is not None:
        per_record = warm_b / warm_n
        rows.append(Row("kcat (C client), warm", expected / own_kcat, "records/s"))
        rows.append(Row("kcat (C client), warm", expected * per_record / own_kcat / 1e6, "MB/s", "loopback sendfile",
                        limit))
    rows.append(Row("10 consumers at once, aggregate", fan_rate, "records/s"))
    rows.append(Row("  10 consumers / 1 consumer", fan_rate / one, "x"))
    return rows
