"""Does one client's heavy work stall the others? Issue 23's "Done when" list, measured.

A probe process produces one record at a time (acks=1, each acknowledged before the next, confluent-kafka) to a
Kafka-native topic, timing each round trip; a consumer in the same process tails that partition (long-poll Fetch,
librdkafka's defaults) and times each record from the moment its producer sent it (the value carries the send
time) until it is polled: what a tailing consumer sees, Fetch included; and it reads ``/healthz`` every 200 ms (a
failure: not 200, or no answer within 10 s). It runs in a process of its own so that it measures the broker, not
this process's GIL. A second child process holds two consumer groups of 3 members on a 6-partition topic, one
classic (confluent-kafka's classic protocol), one KIP-848 (``group.protocol=consumer``), with the strictest session
timeout Kafka allows by default (6 s, heartbeats every 2 s: ``bench/groups.py``'s settings); a member whose
assignment changes during a window counts as a rebalance. The probe runs once on a quiet node, then while each
disturbance runs (back to back, for the window):

* a TDengine user's query, ``SELECT _wstart, AVG(v), MAX(w) FROM big.m INTERVAL(10a)`` over a 2-vgroup database
  written by line protocol, in two clients back to back (the longest query's duration is reported): the database
  grows until one query runs at least 10 s (issue 23), from 2.4 M rows; quick mode keeps 400 k rows (a second or
  two);
* CreateTopics requests of 5,000 topics (quick: 1,000);
* SQL INSERTs of 16 MiB (quick: 4 MiB);
* line-protocol bodies each creating 100,000 subtables (quick: 20,000; TDengine's one table per device);
* one log cleaner pass over a compacted topic of 1 GiB (quick: 256 MiB; 1,000 keys, 1 KiB values: the window is
  the pass, from the topic's ``cleanup.policy`` set to ``compact`` until the node logs the pass's end).

The rows are the probe's p99s over the quiet ones (issue 23's target: within 2x), the rebalances of each group (0)
and ``/healthz``'s slowest answer and failures (it means "alive": it must always answer).
"""

from __future__ import annotations

import http.client
import multiprocessing
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from bench.groups import WALGATE_FLAGS, Member, wait_for
from bench.latency import quantile
from bench.produce import create
from bench.report import Row, Target
from bench.servers import Walgate, walgate

QUERY = b"SELECT _wstart, AVG(v), MAX(w) FROM big.m INTERVAL(10a)"
QUERY_SECONDS = 10.0  # how long one QUERY should run (not in quick mode)
MAX_ROWS = 30_000_000  # the most rows written to make it so
BATCH = 100_000  # line-protocol rows per write
TABLES = 1000
GROUP_TOPIC, GROUP_PARTITIONS, MEMBERS = "grp", 6, 3
PROTOCOLS = ("classic", "consumer")
COMPACTED, KEYS, VALUE_BYTES = "compacted", 1000, 1024


def _lines(batch: int, start: int) -> bytes:
    """``batch`` rows over TABLES subtables, 1 ms apart."""
    return "\n".join(f"m,t=d{(start + i) % TABLES} v={(start + i) % 97}.5,w={(start + i) % 1013}i {1_700_000_000_000 + start + i}"
                     for i in range(batch)).encode()


@dataclass
class _Window:
    """What the probe saw in one window (seconds)."""

    trips: list[float]  # produce round trips, sorted
    delivered: list[float]  # send-to-poll times of the tailing consumer, sorted
    lost: int  # records produced the consumer did not get within 10 s of the window's end
    health: float  # slowest /healthz
    health_failures: int
    rebalanced: dict[str, int] = field(default_factory=dict)  # group protocol -> members whose assignment changed


def _probe(bootstrap: str, http_port: int, seconds: float, measuring: Event, done: Event, out: Connection) -> None:
    """Child process: once warmed up, set ``measuring`` and produce one record at a time for ``seconds`` (or until
    ``done``), a consumer tailing them; send a _Window (without rebalances)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    p.list_topics("stall", timeout=30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "stall-probe", "enable.auto.commit": False})
    c.assign([TopicPartition("stall", 0, OFFSET_END)])
    while True:  # until the consumer fetches from the end: a record sent now arrives
        p.produce("stall", b"warm", partition=0)
        p.flush(60)
        msg = c.poll(1.0)
        if msg is not None and msg.error() is None:
            break
    while (msg := c.poll(0.2)) is not None:
        pass
    delivered: list[float] = []
    stop, health, failures = threading.Event(), [0.0], [0]

    def tail() -> None:
        while not stop.is_set() or len(delivered) < sent[0]:
            m = c.poll(0.05)
            if m is not None and m.error() is None and m.value() != b"warm":
                delivered.append(time.time() - float(m.value()))
            if stop.is_set() and time.monotonic() > give_up[0]:
                return

    def healthz() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
                conn.request("GET", "/healthz")
                ok = conn.getresponse().status == 200
                conn.close()
            except OSError:
                ok = False
            health[0] = max(health[0], time.perf_counter() - t)
            failures[0] += not ok
            stop.wait(0.2)

    sent, give_up = [0], [float("inf")]
    threads = [threading.Thread(target=tail), threading.Thread(target=healthz)]
    for t in threads:
        t.start()
    trips: list[float] = []
    measuring.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end and not done.is_set():
        t = time.perf_counter()
        p.produce("stall", repr(time.time()).encode(), partition=0)
        p.flush(60)
        trips.append(time.perf_counter() - t)
        sent[0] += 1
        time.sleep(0.002)
    give_up[0] = time.monotonic() + 10
    stop.set()
    for t in threads:
        t.join()
    c.close()
    out.send(_Window(sorted(trips), sorted(delivered), sent[0] - len(delivered), health[0], failures[0]))


def _members(bootstrap: str, conn: Connection) -> None:
    """Child process: the two groups; on "window" it waits until both are stable, answers "ready" and notes the
    time; on "end" it answers how many members of each group changed assignment since; on "stop" it ends."""
    groups = {proto: [Member(bootstrap, GROUP_TOPIC, f"stall-{proto}", proto) for _ in range(MEMBERS)]
              for proto in PROTOCOLS}

    def stable() -> bool:
        return all(sorted(len(m.assignment) for m in members) == [GROUP_PARTITIONS // MEMBERS] * MEMBERS
                   for members in groups.values())

    since = 0.0
    try:
        while (msg := conn.recv()) != "stop":
            if msg == "window":
                wait_for(stable, "both groups stable", timeout=120, every=0.05)
                time.sleep(1)  # (a member's last heartbeat answer after the change)
                since = time.monotonic()
                conn.send("ready")
            else:
                conn.send({proto: sum(m.changed > since for m in members) for proto, members in groups.items()})
    finally:
        for members in groups.values():
            for m in members:
                m.close()


def _window(server: Walgate, groups: Connection, seconds: float, begin: Callable[[], None], done: Event) -> _Window:
    """One probe window: the groups stable and the probe warmed up first, then ``begin()`` and the probe for
    ``seconds`` or until ``done``."""
    groups.send("window")
    if not groups.poll(180) or groups.recv() != "ready":
        raise RuntimeError("the consumer groups did not settle")
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    measuring = ctx.Event()
    child = ctx.Process(target=_probe, args=(server.bootstrap, server.http_port, seconds, measuring, done, theirs))
    child.start()
    try:
        if not measuring.wait(120):
            raise RuntimeError("the probe did not warm up")
        begin()
        if not mine.poll(seconds + 240):
            raise RuntimeError("the probe did not report")
        window: _Window = mine.recv()
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    groups.send("end")
    window.rebalanced = groups.recv()
    return window


Disturbance = Callable[[Walgate, threading.Event, dict[str, float]], None]
"""Runs until its event is set (or, for a bounded one, until done), noting figures worth a row in the dict."""


def _queries(server: Walgate, stop: threading.Event, notes: dict[str, float]) -> None:
    """Two clients running the INTERVAL query back to back; notes the longest query (s)."""
    def query() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
        while not stop.is_set():
            t = time.perf_counter()
            server.post("/rest/sql", QUERY, conn)
            notes["longest query (s)"] = max(notes.get("longest query (s)", 0.0), time.perf_counter() - t)

    clients = [threading.Thread(target=query) for _ in range(2)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()


def _create_topics(count: int) -> Disturbance:
    """CreateTopics requests of ``count`` new topics each (confluent-kafka's admin: one request per call)."""
    def disturb(server: Walgate, stop: threading.Event, notes: dict[str, float]) -> None:
        admin = AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 300_000})  # (one request
        round_ = 0  # of 5,000 topics may take more than librdkafka's default 60 s on a busy machine; 300 s: its most)
        while not stop.is_set():
            names = [f"t{round_}-{i}" for i in range(count)]
            t = time.perf_counter()
            for future in admin.create_topics([NewTopic(n, 1) for n in names], request_timeout=300).values():
                future.result(600)
            notes["longest request (s)"] = max(notes.get("longest request (s)", 0.0), time.perf_counter() - t)
            round_ += 1
    return disturb


def _insert(size: int) -> Disturbance:
    """SQL INSERTs of about ``size`` bytes each, one after the other."""
    row = "({}, 1.5, 7)"
    def disturb(server: Walgate, stop: threading.Event, notes: dict[str, float]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
        k = 0
        while not stop.is_set():
            values, n = [], 0
            while n < size:
                values.append(row.format(1_600_000_000_000 + k))
                n += len(values[-1]) + 1
                k += 1
            t = time.perf_counter()
            server.post("/rest/sql", ("INSERT INTO big.ins USING big.m TAGS ('ins') VALUES " + " ".join(values)).encode(),
                        conn)
            notes["longest request (s)"] = max(notes.get("longest request (s)", 0.0), time.perf_counter() - t)
    return disturb


def _subtables(count: int) -> Disturbance:
    """Line-protocol bodies of ``count`` lines, each line a new subtable."""
    def disturb(server: Walgate, stop: threading.Event, notes: dict[str, float]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=600)
        round_ = 0
        while not stop.is_set():
            body = "\n".join(f"dev,id=r{round_}x{i} v={i}i 1700000000000" for i in range(count)).encode()
            t = time.perf_counter()
            server.post("/influxdb/v1/write?db=big&precision=ms", body, conn)
            notes["longest request (s)"] = max(notes.get("longest request (s)", 0.0), time.perf_counter() - t)
            round_ += 1
    return disturb


def _fill_compacted(bootstrap: str, size: int, segment_mb: int) -> None:
    """A topic of ``size`` bytes of KEYS keys (cleanup.policy=delete until the cleaner's window starts)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(COMPACTED, 1, config={"segment.bytes": str(segment_mb << 20)})])[COMPACTED].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"v" * VALUE_BYTES
    for i in range(size // VALUE_BYTES):
        while True:
            try:
                p.produce(COMPACTED, value, key=b"k%d" % (i % KEYS), partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(300):
        raise RuntimeError("the compacted topic was not filled")


def _cleaner(log_path: Path) -> Disturbance:
    """One cleaner pass: the compacted topic's policy set to compact, then wait for the node to log the pass."""
    def disturb(server: Walgate, stop: threading.Event, notes: dict[str, float]) -> None:
        before = log_path.read_text().count(f"log cleaner: {COMPACTED}-0:")
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        resource = ConfigResource("topic", COMPACTED, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        t = time.perf_counter()
        admin.incremental_alter_configs([resource])[resource].result(30)
        while not stop.is_set():
            found = re.findall(rf"log cleaner: {COMPACTED}-0: (\d+) segments, (\d+) -> (\d+) bytes", log_path.read_text())
            if len(found) > before:
                notes["pass (s)"] = time.perf_counter() - t
                notes["bytes before (MiB)"] = int(found[-1][1]) / (1 << 20)
                notes["bytes after (MiB)"] = int(found[-1][2]) / (1 << 20)
                return
            time.sleep(0.1)
    return disturb


def _load(server: Walgate, rows: int, seconds: float) -> int:
    """Write ``rows`` rows to big.m; with ``seconds``, then more until QUERY takes at least that long on the node
    (as the node is now: estimated from the last timing, at most MAX_ROWS): the rows written."""
    written = 0
    while True:
        for start in range(written, rows, BATCH):
            server.post("/influxdb/v1/write?db=big&precision=ms", _lines(BATCH, start))
        written = max(written, rows)
        if not seconds or written >= MAX_ROWS:
            return written
        t = time.perf_counter()
        server.post("/rest/sql", QUERY)
        took = time.perf_counter() - t
        if took >= seconds:
            return written
        rows = min(MAX_ROWS, -(-int(written * seconds * 1.2 / took) // BATCH) * BATCH)


def run(*, quick: bool, repeat: int) -> list[Row]:
    rows_total = 400_000 if quick else 2_400_000
    seconds = 6.0 if quick else 20.0
    compacted = (256 if quick else 1024) << 20
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, \
            walgate(Path(tmp), "--max-partitions", "1000000", "--max-request-bytes", str(64 << 20),
                    "--sql-max-bytes", str(4 << 30),  # (a query over tens of millions of rows scans more than 1 GiB)
                    "--override", "log.cleaner.backoff.ms=500", *WALGATE_FLAGS) as server:
        server.post("/rest/sql", b"CREATE DATABASE big VGROUPS 2 PRECISION 'ms'")
        rows_total = _load(server, rows_total, 0.0 if quick else QUERY_SECONDS)
        disturbances: dict[str, tuple[Disturbance, bool]] = {  # (what, bounded: the window lasts until it is done)
            f"two INTERVAL queries over {rows_total / 1e6:.3g} M rows": (_queries, False),
            f"CreateTopics of {1000 if quick else 5000} topics": (_create_topics(1000 if quick else 5000), False),
            f"{4 if quick else 16} MiB SQL INSERTs": (_insert((4 if quick else 16) << 20), False),
            f"line protocol creating {20 if quick else 100}k subtables a body":
                (_subtables(20_000 if quick else 100_000), False),
            f"a cleaner pass over a {compacted >> 20} MiB compacted topic": (_cleaner(Path(tmp) / "serve.log"), True),
        }
        create(server.bootstrap, "stall")
        admin = AdminClient({"bootstrap.servers": server.bootstrap})  # (kept until the answer: it ends with its handle)
        admin.create_topics([NewTopic(GROUP_TOPIC, GROUP_PARTITIONS)])[GROUP_TOPIC].result(30)
        del admin
        _fill_compacted(server.bootstrap, compacted, 16 if quick else 64)
        ctx = multiprocessing.get_context("spawn")
        groups, theirs = ctx.Pipe()
        members = ctx.Process(target=_members, args=(server.bootstrap, theirs))
        members.start()
        try:
            never = ctx.Event()
            quiet = _window(server, groups, seconds, lambda: None, never)
            out += _rows("quiet", quiet, quiet, {})
            for label, (disturb, bounded) in disturbances.items():
                stop, notes, done = threading.Event(), dict[str, float](), ctx.Event()

                def work(disturb: Disturbance = disturb, stop: threading.Event = stop, notes: dict[str, float] = notes,
                         done: Event = done) -> None:
                    try:
                        disturb(server, stop, notes)
                    except Exception as exc:  # the window goes on without it: its rows say so
                        notes[f"the disturbance failed ({type(exc).__name__}: {exc})"[:120]] = 1.0
                        raise
                    finally:
                        done.set()

                worker = threading.Thread(target=work)
                try:
                    busy = _window(server, groups, 600.0 if bounded else seconds, worker.start,
                                   done if bounded else never)
                finally:
                    stop.set()
                    if worker.is_alive():
                        worker.join()
                out += _rows(label, busy, quiet, notes)
        finally:
            groups.send("stop")
            members.join(60)
            if members.is_alive():
                members.kill()
    return out


def _q(lat: list[float], q: float) -> float:
    """:func:`quantile`, NaN for no samples (a window where nothing got through: its target is missed)."""
    return quantile(lat, q) if lat else float("nan")


def _rows(label: str, w: _Window, quiet: _Window, notes: dict[str, float]) -> list[Row]:
    """The rows of one window (ratios to the quiet window's p99s)."""
    p99, d99 = _q(w.trips, 0.99), _q(w.delivered, 0.99)
    rows = [Row(f"{label}: produce acks=1 round trip p50 (n={len(w.trips)})", _q(w.trips, 0.5) * 1000, "ms"),
            Row(f"{label}: produce acks=1 round trip p99", p99 * 1000, "ms"),
            Row(f"{label}: tailing fetch, send to poll p99 (n={len(w.delivered)}, {w.lost} late)", d99 * 1000, "ms")]
    if w is not quiet:
        rows += [Row(f"{label}: produce p99 / quiet p99", p99 / _q(quiet.trips, 0.99), "x",
                     target=Target(2.0, at_most=True)),
                 Row(f"{label}: fetch p99 / quiet p99", d99 / _q(quiet.delivered, 0.99), "x",
                     target=Target(2.0, at_most=True))]
    rows += [Row(f"{label}: {proto} group members rebalanced", w.rebalanced.get(proto, -1), "",
                 target=Target(0, at_most=True)) for proto in PROTOCOLS]
    rows += [Row(f"{label}: slowest /healthz ({w.health_failures} failed)", w.health * 1000, "ms"),
             Row(f"{label}: /healthz failures", w.health_failures, "", target=Target(0, at_most=True))]
    rows += [Row(f"{label}: {what}", value, "") for what, value in notes.items()]
    return rows
