"""Share-group benchmark (KIP-932, issue 27): a queue of 8 workers on one partition against a consumer group of 1.

A Kafka-native topic of one partition holds ``count`` records of 100 bytes, written before anyone reads. Then:

* share group: 8 confluent-kafka ``ShareConsumer`` workers (threads, explicit acknowledgement) read it from the
  earliest offset; each ACCEPTs every record it polls and commits (ShareAcknowledge, fsynced into
  ``share_groups.log``) before its next poll. Measured: records/s from the first poll until every record is
  acknowledged; the p99 of delivery-to-ack latency (a record's poll returning to its commit returning); the server's
  CPU seconds per acknowledged record.
* consumer group of 1: one ``Consumer`` (classic protocol) reads the same records and commits synchronously after
  each batch: the same three measures (poll-to-commit latency).
* a produce beside acking share workers: one producer (acks=all) sends one record at a time to another topic and
  waits for each; its round trip's p99 on a quiet node, then while 8 share workers acknowledge each poll of a topic a
  feeder keeps writing to (about ``FEED_RATE`` records/s; every acknowledgement a write of ``share_groups.log``: what
  its fsync on the storage thread cost every other request, before share-state writes were group-committed), with
  the workers' acknowledgement commits per second over the same window.
"""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from bench.report import Row
from bench.servers import cpu_seconds, walgate

WORKERS = 8
DEADLINE = 300.0
FEED_RATE = 2_000
"""Records/s the feeder writes to the share workers' topic while a produce's round trip is measured beside them."""


def fill(bootstrap: str, topic: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    for _ in range(count):
        producer.produce(topic, value=b"x" * 100)
    producer.flush(60)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("nan")


def share_group(bootstrap: str, topic: str, count: int, pid: int) -> tuple[float, float, float]:
    """(records/s, p99 delivery-to-ack ms, CPU µs per record) of 8 share workers draining ``topic``."""
    group = f"share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    done, lock = threading.Event(), threading.Lock()
    acked: list[int] = [0]
    latencies: list[float] = []
    started: list[float] = []

    def work() -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE
        while not done.is_set() and time.monotonic() < deadline:
            messages = consumer.poll(0.2) or []
            if not messages:
                continue
            polled = time.monotonic()
            with lock:
                if not started:
                    started.append(polled)
            for m in messages:
                consumer.acknowledge(m)
            consumer.commit_sync(60)
            committed = time.monotonic()
            with lock:
                latencies.extend([(committed - polled) * 1000] * len(messages))
                acked[0] += len(messages)
                if acked[0] >= count:
                    done.set()
        consumer.close()

    cpu0 = cpu_seconds(pid)
    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    done.wait(DEADLINE)
    end = time.monotonic()
    cpu = cpu_seconds(pid) - cpu0
    for t in threads:
        t.join(DEADLINE)
    return acked[0] / (end - started[0]), p99(latencies), cpu / max(acked[0], 1) * 1e6


def consumer_group(bootstrap: str, topic: str, count: int, pid: int) -> tuple[float, float, float]:
    """(records/s, p99 poll-to-commit ms, CPU µs per record) of a consumer group of 1 reading ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"one-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, latencies, start = 0, [], 0.0
    cpu0 = cpu_seconds(pid)
    deadline = time.monotonic() + DEADLINE
    while got < count and time.monotonic() < deadline:
        messages = [m for m in consumer.consume(500, 0.2) if m.error() is None]
        if not messages:
            continue
        polled = time.monotonic()
        start = start or polled
        consumer.commit(asynchronous=False)
        latencies.extend([(time.monotonic() - polled) * 1000] * len(messages))
        got += len(messages)
    end = time.monotonic()
    cpu = cpu_seconds(pid) - cpu0
    consumer.close()
    return got / (end - start), p99(latencies), cpu / max(got, 1) * 1e6


def produce_p99(bootstrap: str, topic: str, probes: int) -> float:
    """p99 ms of ``probes`` produce round trips (acks=all, one record at a time) to ``topic``."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[object] = []

    def delivered(err: object, _: object) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, value=b"warm", on_delivery=delivered)
    producer.flush(30)
    times = []
    for _ in range(probes):
        sent = time.monotonic()
        producer.produce(topic, value=b"y" * 100, on_delivery=delivered)
        producer.flush(30)
        times.append((time.monotonic() - sent) * 1000)
    if errors:
        raise RuntimeError(f"{len(errors)} probe records failed: {errors[0]}")
    return p99(times)


def produce_beside_shares(bootstrap: str, count: int, probes: int) -> tuple[float, float, float]:
    """(quiet produce p99 ms, produce p99 ms while 8 share workers acknowledge records of another topic, their
    acknowledgement commits/s meanwhile)."""
    topic, probe = f"busy-{uuid.uuid4().hex[:6]}", f"probe-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until its futures resolve (dropping it cancels them)
    admin.create_topics([NewTopic(probe, 1)])[probe].result(30)
    fill(bootstrap, topic, count)
    quiet = produce_p99(bootstrap, probe, probes)
    group = f"busy-{uuid.uuid4().hex[:8]}"
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    stop, acking, commits = threading.Event(), threading.Semaphore(0), [0]

    def feed() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        while not stop.is_set():
            for _ in range(FEED_RATE // 100):
                producer.produce(topic, value=b"x" * 100)
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)

    def work() -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit"})
        consumer.subscribe([topic])
        first = True
        deadline = time.monotonic() + DEADLINE
        while not stop.is_set() and time.monotonic() < deadline:
            messages = consumer.poll(0.2) or []
            for m in messages:
                consumer.acknowledge(m)
            if messages:
                consumer.commit_sync(60)
                commits[0] += 1  # (one thread at a time holds the GIL: a close count is all that is needed)
                if first:
                    acking.release()
                    first = False
        consumer.close()

    threads = [threading.Thread(target=work) for _ in range(WORKERS)] + [threading.Thread(target=feed)]
    for t in threads:
        t.start()
    for _ in range(WORKERS):  # every worker has acknowledged once: all are in the group, acking
        acking.acquire(timeout=DEADLINE)
    before, start = commits[0], time.monotonic()
    busy = produce_p99(bootstrap, probe, probes)
    rate = (commits[0] - before) / (time.monotonic() - start)
    stop.set()
    for t in threads:
        t.join(DEADLINE)
    return quiet, busy, rate


def run(*, quick: bool, repeat: int) -> list[Row]:
    count = 2_000 if quick else 20_000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp) / "walgate") as server:
        fill(server.bootstrap, "queue", count)
        shares = [share_group(server.bootstrap, "queue", count, server.pid) for _ in range(repeat)]
        groups = [consumer_group(server.bootstrap, "queue", count, server.pid) for _ in range(repeat)]
        beside = [produce_beside_shares(server.bootstrap, count, 200 if quick else 500) for _ in range(repeat)]
    share_rate, share_p99, share_cpu = (sorted(x)[len(x) // 2] for x in zip(*shares))
    group_rate, group_p99, group_cpu = (sorted(x)[len(x) // 2] for x in zip(*groups))
    for label, share, group, unit in (
            (f"share group of {WORKERS} on 1 partition: records/s acknowledged", share_rate, group_rate, "rec/s"),
            ("  share group: p99 delivery-to-ack", share_p99, group_p99, "ms"),
            ("  share group: server CPU per acknowledged record", share_cpu, group_cpu, "µs")):
        rows.append(Row(label, share, unit))
        rows.append(Row("    consumer group of 1, same records (poll-to-commit)", group, unit))
    quiet, busy, rate = (sorted(x)[len(x) // 2] for x in zip(*beside))
    rows.append(Row("produce p99 (acks=all, one at a time), quiet node", quiet, "ms"))
    rows.append(Row(f"  produce p99 beside {WORKERS} acknowledging share workers", busy, "ms"))
    rows.append(Row("    their acknowledgement commits meanwhile", rate, "/s"))
    return rows
