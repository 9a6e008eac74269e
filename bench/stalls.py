"""Does a long SQL query stall Kafka clients? Produce round trips with and without queries running (issue 23).

A TDengine user's query (``SELECT _wstart, AVG(v), MAX(w) FROM big.m INTERVAL(10a)`` over a 2-vgroup database of
``rows`` rows written by line protocol) runs back to back over HTTP in two client threads while a probe process
produces one record at a time (acks=1, each acknowledged before the next, confluent-kafka) to a Kafka-native topic
and times each round trip, and reads ``/healthz``. The same probe runs first with no query: the rows are the
probe's p50/p99 in both windows, their ratio (issue 23's target: p99 with queries within 2x of p99 without), the
queries' duration, and the slowest ``/healthz`` answer. The probe runs in a process of its own so that it measures
the broker, not this process's GIL.
"""

from __future__ import annotations

import http.client
import multiprocessing
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from confluent_kafka import Producer

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


def run(*, quick: bool, repeat: int) -> list[Row]:
    rows_total = 400_000 if quick else 2_400_000
    seconds = 6.0 if quick else 20.0
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp)) as server:
        server.post("/rest/sql", b"CREATE DATABASE big VGROUPS 2 PRECISION 'ms'")
        for start in range(0, rows_total, BATCH):
            server.post("/influxdb/v1/write?db=big&precision=ms", _lines(BATCH, start))
        create(server.bootstrap, "stall")
        quiet, quiet_health = _probe_window(server, seconds)
        durations: list[float] = []
        stop = threading.Event()

        def query() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
            while not stop.is_set():
                t = time.perf_counter()
                server.post("/rest/sql", QUERY, conn)
                durations.append(time.perf_counter() - t)

        clients = [threading.Thread(target=query) for _ in range(2)]
        for c in clients:
            c.start()
        try:
            busy, busy_health = _probe_window(server, seconds)
        finally:
            stop.set()
            for c in clients:
                c.join()
    label = f"produce acks=1 round trip, {rows_total // 1000}k-row INTERVAL query x2"
    ratio = quantile(busy, 0.99) / quantile(quiet, 0.99)
    return [
        Row(f"{label}: without queries p50 (n={len(quiet)})", quantile(quiet, 0.5) * 1000, "ms"),
        Row(f"{label}: without queries p99", quantile(quiet, 0.99) * 1000, "ms"),
        Row(f"{label}: with queries p50 (n={len(busy)})", quantile(busy, 0.5) * 1000, "ms"),
        Row(f"{label}: with queries p99", quantile(busy, 0.99) * 1000, "ms"),
        Row(f"{label}: p99 with / without", ratio, "x", target=Target(2.0, at_most=True)),
        Row(f"{label}: query duration (median of {len(durations)})",
            sorted(durations)[len(durations) // 2] if durations else float("nan"), "s"),
        Row(f"{label}: slowest /healthz without queries", quiet_health * 1000, "ms"),
        Row(f"{label}: slowest /healthz with queries", busy_health * 1000, "ms"),
    ]
