"""Produce and Kafka-native fetch benchmarks, confluent-kafka (librdkafka) as the client on both brokers.

* produce throughput into a 4-partition Kafka-native topic, each producer a
  process of its own (bench/together.py), all starting at once: 100 B and
  1 KiB values with two producers at acks=1, 1 KiB with one at acks=all, and
  1 KiB with eight at acks=all at WAL_LEVEL 2, and 100 B with two C producers
  (bench/cproduce.c: the Python client's per-record work bounds its 100 B row) (``flush.messages=1``: fsync
  before every answer; the others at WAL_LEVEL 1, the topic's default: fsync
  every 3 s); beside Tansu (memory storage, nothing on disk) with the same
  clients and payloads, with each server's CPU-seconds per million records,
  and beside the raw os.write rate of 1 MiB appends (the median of three;
  WAL_LEVEL 2: eight writers at once, each fdatasyncing every append: the
  disk's write+fsync bandwidth at the producers' concurrency); issue 15's
  targets on the rows;
* fetch throughput of a Kafka-native topic of 1 KiB records (stored batches
  sent with sendfile), beside Tansu and the loopback socket limit, read by the
  Python client, by the C consumer (bench/cconsume.c: librdkafka counting
  records) and by two C consumers at once; what the server spends on it (bytes
  served per CPU-second of the server process) and what the clients spend
  (CPU-seconds per second): the client, not the server, is the bound;
* the same fetch by the Python client and the C consumer through walgate's SSL listener (TLS 1.3: no sendfile,
  the stored batches are read and encrypted by the server) beside the PLAINTEXT listener, measured in turns, with
  the bytes served per CPU-second of the server on each: what TLS costs.

Without the Tansu binary or the C clients' build tools their rows are left out, with a message (bench/tools.py).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import cclient
from bench.consume import consume_all
from bench.limits import write_mb_s
from bench.report import Row, Target, median_run
from bench.servers import Walgate, cpu_seconds, loopback_mb_s, tansu_process, walgate
from bench.together import Gate, Tally, at_once

PARTITIONS = 4
WAL2_WRITERS = 8  # producers at once at WAL_LEVEL 2, and writers of its disk limit
FETCH_RECORDS = {True: 100_000, False: 500_000}  # by --quick


def create(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=configs or {})])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, count: int, size: int, acks: str,
            ready: Callable[[], None] = lambda: None, partition: int | None = None) -> tuple[int, float]:
    """(records acknowledged, seconds) for one producer sending ``count`` values of ``size`` bytes, over the
    topic's :data:`PARTITIONS` partitions in turn or all to ``partition``; the clock starts when ``ready()``
    returns, called once the producer has the topic's metadata."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "enable.idempotence": acks == "all"})
    p.list_topics(topic, timeout=30)
    ready()
    value = b"x" * size
    acked = [0]

    def report(err, msg) -> None:
        if err is None:
            acked[0] += 1

    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS if partition is None else partition,
                          on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    return acked[0], time.perf_counter() - start


def producer_process(bootstrap: str, topic: str, count: int, size: int, acks: str, gate: Gate) -> tuple[int, float]:
    """:data:`bench.together.Work`: one of several producer processes."""
    acked, _ = produce(bootstrap, topic, count, size, acks, gate.open)
    return acked, time.perf_counter()


def producers(bootstrap: str, pid: int, topic: str, case: Case, c_binary: Path | None = None) -> Tally:
    """``case.producers`` processes at once sending ``case.count`` records in all (server ``pid``'s CPU counted);
    C producers (``c_binary``) for a ``case.c_client`` case."""
    if case.c_client:
        assert c_binary is not None
        return cclient.produce(c_binary, bootstrap, topic, PARTITIONS, case.producers, case.count, case.size, case.acks,
                               pid)
    argsets = [(bootstrap, topic, case.count // case.producers, case.size, case.acks)] * case.producers
    with at_once(producer_process, argsets, pid) as tally:
        pass
    return tally


Read = tuple[int, int, float, float, float]
"""records, bytes, seconds, server CPU-seconds, client CPU-seconds (0: not measured)"""


FETCH_CONF = {"fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20, "fetch.queue.backoff.ms": 10}
"""Large fetches; and a 10 ms pause (librdkafka's default: 1 s) when the client's own queue is full, which a fast
server fills: with the default, single runs of the same code spread from 105k to 630k records/s."""


def fetch(bootstrap: str, topic: str, expected: int, pid: int, **conf: str) -> Read:
    """The Python client reading every partition from offset 0 (:data:`FETCH_CONF`, then ``conf``)."""
    cpu = cpu_seconds(pid)
    n, b, s = consume_all(bootstrap, expected, topic=topic, partitions=PARTITIONS, **(FETCH_CONF | conf))
    return n, b, s, cpu_seconds(pid) - cpu, 0.0


def cfetch(binary: Path, bootstrap: str, topic: str, expected: int, pid: int, processes: int,
           conf: dict[str, str] | None = None) -> Read:
    """``processes`` C consumers at once, the partitions split between them (extra client settings ``conf``)."""
    cpu = cpu_seconds(pid)
    n, b, s, client_cpu = cclient.consume(binary, bootstrap, topic,
                                          [list(range(k, PARTITIONS, processes)) for k in range(processes)], expected,
                                          conf)
    return n, b, s, cpu_seconds(pid) - cpu, client_cpu


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


def tls_rows(server: Walgate, expected: int, repeat: int, binary: Path | None) -> list[Row]:
    """Each reader (the Python client; the C consumer when built) through the SSL listener and the PLAINTEXT one,
    in turns: the TLS rate, its ratio to plaintext, and what the server spends per byte on each."""
    assert server.tls is not None
    tls = dict(server.tls)
    ssl_bootstrap = tls.pop("bootstrap.servers")
    readers: dict[str, Callable[[str, dict[str, str]], Read]] = {
        "Python client": lambda bs, conf: fetch(bs, "fetch", expected, server.pid, **conf)}
    if binary is not None:
        readers["C consumer"] = lambda bs, conf: cfetch(binary, bs, "fetch", expected, server.pid, 1, conf)
    rows: list[Row] = []
    for label, read in readers.items():
        plain_runs, tls_runs = [], []
        for _ in range(repeat):
            plain_runs.append(read(server.bootstrap, {}))
            tls_runs.append(read(ssl_bootstrap, tls))
        n, b, s, cpu, _ = median_run(tls_runs, _read_rate)
        plain = median_run(plain_runs, _read_rate)
        rows += [Row(f"fetch 1 KiB records over TLS, {label}", n / s, "records/s"),
                 Row("  TLS / plaintext, same client", 100 * (n / s) / _read_rate(plain), "%"),
                 Row("  served per walgate CPU-s, TLS", b / max(cpu, 0.01) / 1e6, "MB/s"),
                 Row("  served per walgate CPU-s, plaintext", plain[1] / max(plain[3], 0.01) / 1e6, "MB/s")]
    return rows


def _rate(tally: Tally) -> float:
    return tally.rate


@dataclass(frozen=True)
class Case:
    size: int
    acks: str
    level: int  # WAL_LEVEL: 2 is flush.messages=1
    producers: int
    count: int  # records in all
    vs_tansu: float = 0.0  # issue 15's target: walgate / Tansu in records/s, %, and CPU per record at most Tansu's
    of_disk: float = 0.0  # issue 15's target: MB/s at least this fraction of the disk's limit
    c_client: bool = False  # bench/cproduce.c processes instead of the Python client's

    @property
    def label(self) -> str:
        return (f"produce {self.size} B, acks={self.acks}, WAL_LEVEL {self.level}, "
                f"{self.producers}{' C' if self.c_client else ''} producer{'s' if self.producers > 1 else ''}")


def cases(quick: bool, c_producers: bool) -> list[Case]:
    """The produce rows; with ``c_producers`` also the small-record and WAL_LEVEL 2 rows with C producers (the Python
    client spends more CPU per record than either server, so it bounds those rows)."""
    k = 1 if quick else 5
    small = [Case(100, "1", 1, 2, 1_000_000 * k, vs_tansu=120, c_client=True)] if c_producers else []
    wal2 = [Case(1024, "all", 2, WAL2_WRITERS, 200_000 * k, of_disk=0.30, c_client=True)] if c_producers else []
    return [Case(100, "1", 1, 2, 400_000 * k, vs_tansu=120), *small, Case(1024, "1", 1, 2, 100_000 * k, vs_tansu=120),
            Case(1024, "all", 1, 1, 20_000 * k), Case(1024, "all", 2, WAL2_WRITERS, 40_000 * k, of_disk=0.30), *wal2]


def produce_rows(case: Case, tally: Tally, peer: Tally | None, limit: tuple[str, float]) -> list[Row]:
    """Records/s beside the peer's, each server's CPU per million records, MB/s beside the disk's limit."""
    rows = [Row(case.label, tally.rate, "records/s")]
    if peer is not None:
        rows += [Row("  Tansu (memory), same clients", peer.rate, "records/s"),
                 Row("  walgate / Tansu", 100 * tally.rate / peer.rate, "%",
                     target=Target(case.vs_tansu) if case.vs_tansu else None),
                 Row("  walgate CPU-s per million records", tally.cpu_per_million(), "CPU-s",
                     target=Target(peer.cpu_per_million(), at_most=True) if case.vs_tansu else None),
                 Row("  Tansu CPU-s per million records", peer.cpu_per_million(), "CPU-s")]
    else:
        rows.append(Row("  walgate CPU-s per million records", tally.cpu_per_million(), "CPU-s"))
    rows.append(Row(case.label, tally.rate * case.size / 1e6, "MB/s", *limit,
                    target=Target(case.of_disk, of_limit=True) if case.of_disk else None))
    return rows


def run(*, quick: bool, repeat: int) -> list[Row]:
    rows: list[Row] = []
    limit = loopback_mb_s(1 << 28 if quick else 1 << 30)
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp), tls=True) as server, \
            tansu_process() as peer:
        disk = {1: ("os.write 1 MiB", write_mb_s(Path(tmp) / "raw1", 1 << 20, 256, fsync=False)),
                2: (f"{WAL2_WRITERS} x (os.write 1 MiB + fdatasync)",
                    write_mb_s(Path(tmp) / "raw2", 1 << 20, 256, fsync=True, writers=WAL2_WRITERS))}
        c_producer = cclient.build("cproduce")
        for k, case in enumerate(cases(quick, c_producer is not None)):
            runs, peer_runs = [], []
            for r in range(repeat):
                topic = f"p{k}r{r}"
                create(server.bootstrap, topic, {"flush.messages": "1"} if case.level == 2 else None)
                runs.append(producers(server.bootstrap, server.pid, topic, case, c_producer))
                if peer is not None:
                    create(peer[0], topic)
                    peer_runs.append(producers(*peer, topic, case, c_producer))
            rows += produce_rows(case, median_run(runs, _rate), median_run(peer_runs, _rate) if peer_runs else None,
                                 disk[case.level])
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
        rows += tls_rows(server, expected, repeat, binary)
        if binary is not None:  # Tansu's side of two at once is the same as one: it is not the bound
            rows += fetch_rows({"2 C consumers at once": lambda bs, pid: cfetch(binary, bs, "fetch", expected, pid, 2)},
                               (server.bootstrap, server.pid), None, expected, repeat, limit)
    return rows
