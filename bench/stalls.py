"""Does one client's heavy work stall the others? Produce round trips while something heavy runs (issue 23).

A probe process produces one record at a time (acks=1, each acknowledged before the next, confluent-kafka) to a
Kafka-native topic, timing each round trip, and reads ``/healthz`` every 200 ms; it runs in a process of its own so
that it measures the broker, not this process's GIL. It runs once on a quiet node, then while each disturbance runs
back to back:

* a TDengine user's query, ``SELECT _wstart, AVG(v), MAX(w) FROM big.m INTERVAL(10a)`` over a 2-vgroup database of
  ``rows`` rows written by line protocol, in two clients;
* CreateTopics requests of thousands of topics;
* SQL INSERTs of megabytes;
* line-protocol bodies each creating tens of thousands of subtables (TDengine's one table per device).

The rows are the probe's p50 / p99, p99 over the quiet p99 (issue 23's target: within 2x) and the slowest
``/healthz`` answer (it means "alive": it must answer at once).
"""

from __future__ import annotations

import http.client
import multiprocessing
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.latency import quantile
from bench.produce import create
from bench.report import Row, Target
from bench.servers import Walgate, walgate

QUERY = b"SELECT _wstart, AVG(v), MAX(w) FROM big.m INTERVAL(10a)"
BATCH = 100_000  # line-protocol rows per write
TABLES = 1000


def _lines(batch: int, start: int) -> bytes:
    """``batch`` rows over TABLES subtables, 1 ms apart."""
    return "\n".join(f"m,t=d{(start + i) % TABLES} v={(start + i) % 97}.5,w={(start + i) % 1013}i {1_700_000_000_000 + start + i}"
                     for i in range(batch)).encode()


def _probe(bootstrap: str, http_port: int, seconds: float, out: Connection) -> None:
    """Child process: produce one record at a time for ``seconds``; send (round trips, slowest /healthz)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    p.list_topics("stall", timeout=30)
    trips: list[float] = []
    health = [0.0]
    stop = threading.Event()

    def healthz() -> None:
        while not stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=60)
            t = time.perf_counter()
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            health[0] = max(health[0], time.perf_counter() - t)
            conn.close()
            stop.wait(0.2)

    checker = threading.Thread(target=healthz)
    checker.start()
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        t = time.perf_counter()
        p.produce("stall", str(i).encode(), partition=0)
        p.flush(60)
        trips.append(time.perf_counter() - t)
        i += 1
        time.sleep(0.002)
    stop.set()
    checker.join()
    out.send((sorted(trips), health[0]))


def _probe_window(server: Walgate, seconds: float) -> tuple[list[float], float]:
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=_probe, args=(server.bootstrap, server.http_port, seconds, theirs))
    child.start()
    try:
        if not mine.poll(seconds + 120):
            raise RuntimeError("the probe did not report")
        trips, health = mine.recv()
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    return trips, health


def _queries(server: Walgate, stop: threading.Event) -> None:
    """Two clients running the INTERVAL query back to back."""
    def query() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
        while not stop.is_set():
            server.post("/rest/sql", QUERY, conn)

    clients = [threading.Thread(target=query) for _ in range(2)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()


def _create_topics(count: int) -> Callable[[Walgate, threading.Event], None]:
    """CreateTopics requests of ``count`` new topics each (confluent-kafka's admin: one request per call)."""
    def disturb(server: Walgate, stop: threading.Event) -> None:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        round_ = 0
        while not stop.is_set():
            names = [f"t{round_}-{i}" for i in range(count)]
            for future in admin.create_topics([NewTopic(n, 1) for n in names], request_timeout=300).values():
                future.result(600)
            round_ += 1
    return disturb


def _insert(size: int) -> Callable[[Walgate, threading.Event], None]:
    """SQL INSERTs of about ``size`` bytes each, one after the other."""
    row = "({}, 1.5, 7)"
    def disturb(server: Walgate, stop: threading.Event) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
        k = 0
        while not stop.is_set():
            values, n = [], 0
            while n < size:
                values.append(row.format(1_600_000_000_000 + k))
                n += len(values[-1]) + 1
                k += 1
            server.post("/rest/sql", ("INSERT INTO big.ins USING big.m TAGS ('ins') VALUES " + " ".join(values)).encode(),
                        conn)
    return disturb


def _subtables(count: int) -> Callable[[Walgate, threading.Event], None]:
    """Line-protocol bodies of ``count`` lines, each line a new subtable."""
    def disturb(server: Walgate, stop: threading.Event) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
        round_ = 0
        while not stop.is_set():
            body = "\n".join(f"dev,id=r{round_}x{i} v={i}i 1700000000000" for i in range(count)).encode()
            server.post("/influxdb/v1/write?db=big&precision=ms", body, conn)
            round_ += 1
    return disturb


def run(*, quick: bool, repeat: int) -> list[Row]:
    rows_total = 400_000 if quick else 2_400_000
    seconds = 6.0 if quick else 20.0
    disturbances: dict[str, Callable[[Walgate, threading.Event], None]] = {
        f"two INTERVAL queries over {rows_total // 1000}k rows": _queries,
        f"CreateTopics of {1000 if quick else 5000} topics": _create_topics(1000 if quick else 5000),
        f"{4 if quick else 16} MiB SQL INSERTs": _insert((4 if quick else 16) << 20),
        f"line protocol creating {20 if quick else 100}k subtables a body": _subtables(20_000 if quick else 100_000),
    }
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, \
            walgate(Path(tmp), "--max-partitions", "1000000", "--max-request-bytes", str(64 << 20)) as server:
        server.post("/rest/sql", b"CREATE DATABASE big VGROUPS 2 PRECISION 'ms'")
        for start in range(0, rows_total, BATCH):
            server.post("/influxdb/v1/write?db=big&precision=ms", _lines(BATCH, start))
        create(server.bootstrap, "stall")
        quiet, quiet_health = _probe_window(server, seconds)
        out += [Row(f"produce acks=1 round trip, quiet: p50 (n={len(quiet)})", quantile(quiet, 0.5) * 1000, "ms"),
                Row("produce acks=1 round trip, quiet: p99", quantile(quiet, 0.99) * 1000, "ms"),
                Row("slowest /healthz, quiet", quiet_health * 1000, "ms")]
        for label, disturb in disturbances.items():
            stop = threading.Event()
            worker = threading.Thread(target=disturb, args=(server, stop))
            worker.start()
            try:
                busy, busy_health = _probe_window(server, seconds)
            finally:
                stop.set()
                worker.join()
            out += [
                Row(f"produce acks=1 round trip, {label}: p50 (n={len(busy)})", quantile(busy, 0.5) * 1000, "ms"),
                Row(f"produce acks=1 round trip, {label}: p99", quantile(busy, 0.99) * 1000, "ms"),
                Row(f"produce acks=1 round trip, {label}: p99 / quiet p99", quantile(busy, 0.99) / quantile(quiet, 0.99),
                    "x", target=Target(2.0, at_most=True)),
                Row(f"slowest /healthz, {label}", busy_health * 1000, "ms"),
            ]
    return out
