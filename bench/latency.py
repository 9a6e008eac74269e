"""End-to-end latency: from an acknowledged write to its receipt by a long-polling consumer.

The consumer (confluent-kafka, ``fetch.wait.max.ms=500``, tailing from the end) runs in a process of its
own: as a thread beside the writer it would wait for the GIL (up to the 5 ms switch interval) and measure
Python, not the broker. Both processes read the same monotonic clock (``time.perf_counter``). Paths:

* a TDengine ``AS SELECT`` topic fed by single-row INSERTs over HTTP (answered once the WAL holds the row);
* a Kafka-native topic fed by a confluent-kafka producer, acks=1, one record at a time;
* the same Kafka-native path on Tansu (memory storage), when its binary is installed.

The AS SELECT rows carry issue 15's target (unchanged or better: p50 <= 2 ms, p99 <= 10 ms). bench/commits.py
measures the Kafka-native path again while consumers commit.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import tempfile
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from types import MappingProxyType

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.consume import PARTITIONS, TOPIC, TOPIC_SQL
from bench.ingest import lines
from bench.produce import create
from bench.report import Row, Target
from bench.servers import Walgate, tansu, walgate

GAP = 0.002  # seconds between writes: one write in flight at a time, the consumer idle in a long poll


def _tail(bootstrap: str, topic: str, ready: Event, stop: Event, out: Connection) -> None:
    """Child process: tail every partition from the end; send {value: receipt time} when told to stop."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 500})
    c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
    received: dict[bytes, float] = {}
    started = time.monotonic()
    while not stop.is_set():
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            received[m.value()] = time.perf_counter()
        if not ready.is_set() and time.monotonic() - started > 2:  # at the end and long-polling by now
            ready.set()
    out.send(received)
    c.close()


def measure(bootstrap: str, topic: str, write: Callable[[int], bytes], samples: int,
            key: Callable[[bytes], bytes] = lambda value: value) -> list[float]:
    """Sorted seconds from each ``write(i)``'s acknowledgement to the receipt of the record whose ``key(value)``
    is what ``write`` returned."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that runs librdkafka threads
    ready, stop = ctx.Event(), ctx.Event()
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=_tail, args=(bootstrap, topic, ready, stop, theirs))
    child.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the tailing consumer did not start")
        acked = {}
        for i in range(samples):
            sample = write(i)
            acked[sample] = time.perf_counter()
            time.sleep(GAP)
        time.sleep(1)
        stop.set()
        received = {key(v): t for v, t in (mine.recv() if mine.poll(30) else {}).items()}
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    return sorted(received[s] - t for s, t in acked.items() if s in received)


def inserted(server: Walgate) -> Callable[[int], bytes]:
    """Single-row INSERTs over one HTTP connection; the sample is the row's voltage (it passes the filter)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)

    def write(i: int) -> bytes:
        server.post("/rest/sql", f"INSERT INTO b.lat USING b.meters TAGS ('lat', '1') VALUES (now, 1.0, {1000 + i}, 0.5)"
                    .encode(), conn)
        return str(1000 + i).encode()

    return write


def voltage(value: bytes) -> bytes:
    return str(json.loads(value)["voltage"]).encode()


def produced(bootstrap: str, topic: str) -> Callable[[int], bytes]:
    """One record at a time, acks=1, each flushed (acknowledged) before the next."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})

    def write(i: int) -> bytes:
        value = str(i).encode()
        p.produce(topic, value, partition=i % PARTITIONS)
        p.flush(30)
        return value

    return write


def quantile(lat: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``lat``."""
    return lat[min(int(q * len(lat)), len(lat) - 1)]


def percentiles(label: str, lat: list[float], quantiles: tuple[float, ...] = (0.5, 0.99, 0.999),
                targets: Mapping[float, float] = MappingProxyType({})) -> list[Row]:
    """Rows of the ``quantiles`` of sorted seconds ``lat`` in ms; ``targets``: quantile -> at most this many ms."""
    return [Row(f"{label} p{q * 100:g} (n={len(lat)})", quantile(lat, q) * 1000, "ms",
                target=Target(targets[q], at_most=True) if q in targets else None) for q in quantiles] if lat else []


def run(*, quick: bool, repeat: int) -> list[Row]:
    samples = 200 if quick else 2000
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp)) as server, tansu() as peer:
        server.post("/rest/sql", f"CREATE DATABASE b VGROUPS {PARTITIONS}".encode())
        server.post("/influxdb/v1/write?db=b&precision=ms", lines(10, 0))
        server.post("/rest/sql", TOPIC_SQL.encode())
        rows = percentiles("latency, AS SELECT topic, HTTP INSERT",
                           measure(server.bootstrap, TOPIC, inserted(server), samples, voltage),
                           targets={0.5: 2.0, 0.99: 10.0})  # issue 15: unchanged or better
        brokers = {"walgate": server.bootstrap} | ({"Tansu": peer} if peer else {})
        for name, bootstrap in brokers.items():
            create(bootstrap, "lat")
            rows += percentiles(f"latency, Kafka-native topic, acks=1, {name}",
                                measure(bootstrap, "lat", produced(bootstrap, "lat"), samples))
    return rows
