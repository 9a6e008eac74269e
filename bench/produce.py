"""Produce and Kafka-native fetch benchmarks, confluent-kafka (librdkafka) as the client on both brokers.

* produce throughput into a 4-partition Kafka-native topic: 100 B and 1 KiB
  values, acks=1 and acks=all; walgate at WAL_LEVEL 1 (the topic's default:
  fsync every 3 s) and WAL_LEVEL 2 (``flush.messages=1``: fsync before every
  answer), beside Tansu (memory storage, nothing on disk) with the same client
  and payloads, beside the raw os.write (+fsync) rate of the same bytes;
* fetch throughput of a Kafka-native topic of 1 KiB records (stored batches
  sent with sendfile), beside Tansu and the loopback socket limit, read by the
  Python client, by the C consumer (bench/cconsume.c: librdkafka counting
  records) and by two C consumers at once; what the server spends on it (bytes
  served per CPU-second of the server process) and what the clients spend
  (CPU-seconds per second): the client, not the server, is the bound.

Without the Tansu binary or the C consumer's build tools their rows are left out, with a message (bench/tools.py).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import cclient
from bench.consume import consume_all
from bench.ingest import _raw_writes
from bench.report import Row, median_run
from bench.servers import cpu_seconds, loopback_mb_s, tansu_process, walgate

PARTITIONS = 4
FETCH_RECORDS = {True: 100_000, False: 500_000}  # by --quick


def create(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs or {})])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, size: int, acks: str) -> tuple[int, float]:
    """(records acknowledged, seconds) for one producer sending ``count`` values of ``size`` bytes."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": acks == "all"})
    value = b"x" * size
    acked = [0]

    def report(err, msg) -> None:
        if err is None:
            acked[0] += 1

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    return acked[0], time.perf_counter() - start


Read = tuple[int, int, float, float, float]
"""records, bytes, seconds, server CPU-seconds, client CPU-seconds (0: not measured)"""


FETCH_CONF = {"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20, "fetch.queue.backoff.ms": 10}
"""Large fetches; and a 10 ms pause (librdkafka's default: 1 s) when the client's own queue is full, which a fast
server fills: with the default, single runs of the same code spread from 105k to 630k records/s."""


def fetch(bootstrap: str, topic: str, expected: int, pid: int) -> Read:
    """The Python client reading every partition from offset 0 (:data:`FETCH_CONF`)."""
    cpu = cpu_seconds(pid)
    n, b, s = consume_all(bootstrap, expected, topic=topic, partitions=PARTITIONS, **FETCH_CONF)
    return n, b, s, cpu_seconds(pid) - cpu, 0.0


def cfetch(binary: Path, bootstrap: str, topic: str, expected: int, pid: int, processes: int) -> Read:
    """``processes`` C consumers at once, the partitions split between them."""
    cpu = cpu_seconds(pid)
    n, b, s, client_cpu = cclient.consume(binary, bootstrap, topic,
                                          [list(range(k, PARTITIONS, processes)) for k in range(processes)], expected)
    return n, b, s, cpu_seconds(pid) - cpu, client_cpu


def _produce_rate(run: tuple[int, float]) -> float:
    return run[0] / run[1]


def _read_rate(run: Read) -> float:
    return run[0] / run[2]


def fetch_rows(readers: dict[str, Callable[[str, int], Read]], walgate_bs: tuple[str, int],
               peer: tuple[str, int] | None, expected: int, repeat: int, limit: float) -> list[Row]:
    """Rows for each reader (label -> read(bootstrap, server pid)) on walgate, beside the peer where given."""
    rows: list[Row] = []
    for label, read in readers.items():
        n, b, s, cpu, client_cpu = median_run([read(*walgate_bs) for _ in range(repeat)], _read_rate)
        name = f"fetch 1 KiB records, {label}"
        rows.append(Row(name, n / s, "records/s"))
        if peer is not None:
            pn, pb, ps, pcpu, _ = median_run([read(*peer) for _ in range(repeat)], _read_rate)
            rows.append(Row("  Tansu, same client", pn / ps, "records/s"))
            rows.append(Row("  walgate / Tansu", 100 * (n / s) / (pn / ps), "%"))
        rows.append(Row(name, b / s / 1e6, "MB/s", "loopback sendfile", limit))
        rows.append(Row("  served per walgate CPU-s", b / max(cpu, 0.01) / 1e6, "MB/s", "loopback sendfile", limit))
        if peer is not None:
            rows.append(Row("  served per Tansu CPU-s", pb / max(pcpu, 0.01) / 1e6, "MB/s"))
        if client_cpu:
            rows.append(Row("  client CPU-seconds per second", client_cpu / s, "CPU"))
            rows.append(Row("  walgate CPU-seconds per second", cpu / s, "CPU"))
    return rows


def run(*, quick: bool, repeat: int) -> list[Row]:
    counts = {100: 20_000 if quick else 200_000, 1024: 10_000 if quick else 100_000}
    cases = [(100, "1", None), (1024, "1", None), (1024, "all", None), (1024, "all", "1")]
    rows: list[Row] = []
    limit = loopback_mb_s(1 << 28 if quick else 1 << 30)
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp)) as server, \
            tansu_process() as peer:
        raw = {fsync: _raw_writes(Path(tmp), 1 << 20, 64, fsync) for fsync in (False, True)}
        for k, (size, acks, flush) in enumerate(cases):
            count = counts[size]
            label = f"produce {size} B, acks={acks}, WAL_LEVEL {2 if flush else 1}"
            runs, peer_runs = [], []
            for r in range(repeat):
                topic = f"p{k}r{r}"
                create(server.bootstrap, topic, {"flush.messages": flush} if flush else None)
                runs.append(produce(server.bootstrap, topic, count, size, acks))
                if peer is not None:
                    create(peer[0], topic)
                    peer_runs.append(produce(peer[0], topic, count, size, acks))
            n, s = median_run(runs, _produce_rate)
            raw_n, raw_s = raw[bool(flush)]
            rows.append(Row(label, n / s, "records/s"))
            if peer_runs:
                pn, ps = median_run(peer_runs, _produce_rate)
                rows.append(Row("  Tansu (memory), same client", pn / ps, "records/s"))
                rows.append(Row("  walgate / Tansu", 100 * (n / s) / (pn / ps), "%"))
            rows.append(Row(label, n * size / s / 1e6, "MB/s", f"os.write{' + fsync' if flush else ''} 1 MiB",
                            raw_n / raw_s / 1e6))
        expected = FETCH_RECORDS[quick]
        for bootstrap in [server.bootstrap] + ([peer[0]] if peer else []):
            create(bootstrap, "fetch")
            produce(bootstrap, "fetch", expected, 1024, "1")
        readers: dict[str, Callable[[str, int], Read]] = {
            "Python client": lambda bs, pid: fetch(bs, "fetch", expected, pid)}
        binary = cclient.build()
        if binary is not None:
            readers["C consumer"] = lambda bs, pid: cfetch(binary, bs, "fetch", expected, pid, 1)
        rows += fetch_rows(readers, (server.bootstrap, server.pid), peer, expected, repeat, limit)
        if binary is not None:  # Tansu's side of two at once is the same as one: it is not the bound
            rows += fetch_rows({"2 C consumers at once": lambda bs, pid: cfetch(binary, bs, "fetch", expected, pid, 2)},
                               (server.bootstrap, server.pid), None, expected, repeat, limit)
    return rows
