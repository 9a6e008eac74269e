"""walgate only: transactions as stock clients read (and, with the coordinator, write) them (issue 17, KIP-98).

1. read_committed over a partition holding every case: two transactions interleaved (one aborted, one committed),
   a record outside any transaction, a second transaction of the same producer, and a transaction still open at the
   end. The data dir is prepared with the engine (the batches a transactional producer sends, and the markers the
   coordinator writes, through ``Engine.write_txn_markers``), then served by ``walgate serve``; the readers are real
   clients: confluent-kafka, the Java consumer (kafka-console-consumer's calls), kcat, kafka-python and aiokafka with
   ``isolation.level=read_committed`` get the committed records and the plain one, exactly once and in order, and
   stop at the last stable offset (the open transaction's first offset), which ListOffsets answers them as the end;
   under read_uncommitted they get everything, never a marker. The Java Admin's ``describeProducers`` (what
   ``kafka-transactions.sh describe-producers`` calls) lists the partition's three producers, the open one with its
   transaction's first offset.
2. With the transaction coordinator: a confluent-kafka transactional producer commits one transaction and aborts
   another; read_committed consumers (confluent-kafka, Java) see the committed records only (the Java transactional
   producer and its fenced zombie are in ``test_transactions_coordinator.py``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import WalgateServer, running_walgate
from walgate.storage.engine import Engine
from walgate.wire import encode_batch

TOPIC = "txn_read"
A, C, D = 4001, 4002, 4003  # aborted, committed twice, left open
COMMITTED = ["c0", "c1", "p0", "c2"]
EVERYTHING = ["a0", "a1", "c0", "c1", "p0", "a2", "c2", "d0", "d1"]
LSO, HW = 10, 12


def _batch(pid: int | None, seq: int, *values: str) -> bytes:
    n = len(values)
    return encode_batch(0, [1_700_000_000_000 + i for i in range(n)], [None] * n, [v.encode() for v in values],
                        producer_id=-1 if pid is None else pid, producer_epoch=-1 if pid is None else 0,
                        base_sequence=-1 if pid is None else seq, is_transactional=pid is not None)


def prepare(data_dir: Path) -> None:
    """Offsets 0-1 A, 2-3 C, 4 plain, 5 A, 6 ABORT A, 7 COMMIT C, 8 C, 9 COMMIT C, 10-11 D (open)."""
    e = Engine.open(data_dir)
    try:
        e.create_kafka_topic(TOPIC, 1, {})
        for pid, seq, values in ((A, 0, ["a0", "a1"]), (C, 0, ["c0", "c1"]), (None, 0, ["p0"]), (A, 2, ["a2"])):
            e.append_batches(TOPIC, 0, [_batch(pid, seq, *values)])
        assert e.write_txn_markers(A, 0, 0, False, [(TOPIC, 0)]) == [None]
        assert e.write_txn_markers(C, 0, 0, True, [(TOPIC, 0)]) == [None]
        e.append_batches(TOPIC, 0, [_batch(C, 2, "c2")])
        assert e.write_txn_markers(C, 0, 0, True, [(TOPIC, 0)]) == [None]
        e.append_batches(TOPIC, 0, [_batch(D, 0, "d0", "d1")])
        assert (e.partitions.offsets(TOPIC, 0).last_stable, e.watermarks(TOPIC, 0)[1]) == (LSO, HW)
    finally:
        e.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    workdir = tmp_path_factory.mktemp("walgate")
    prepare(workdir / "data")
    with running_walgate(workdir) as server:
        yield server
        log = server.log()
        assert "Traceback" not in log, log[-3000:]


def ck_read(bootstrap: str, isolation: str, want: int, topic: str = TOPIC) -> tuple[list[str], int, int]:
    """confluent-kafka, assign() from the beginning: (values read until the partition's end, position, the end
    ListOffsets answers this isolation level)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{uuid.uuid4()}", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[str] = []
        deadline = time.monotonic() + 30
        eof = False
        while time.monotonic() < deadline and not (eof and len(got) >= want):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                eof = message.error().code() == KafkaError._PARTITION_EOF
                continue
            got.append(message.value().decode())
        [position] = consumer.position([TopicPartition(topic, 0)])
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        return got, position.offset, high
    finally:
        consumer.close()


def test_confluent_kafka_read_committed_gets_the_committed_records_and_stops_at_the_lso(server: WalgateServer) -> None:
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    assert ck_read(bootstrap, "read_committed", len(COMMITTED)) == (COMMITTED, LSO, LSO)
    assert ck_read(bootstrap, "read_uncommitted", len(EVERYTHING)) == (EVERYTHING, HW, HW)


def test_the_java_consumer_read_committed_gets_the_committed_records_only(server: WalgateServer,
                                                                          java: Callable[..., object]) -> None:
    run = java("ConsoleConsumer.java", "--bootstrap-server", f"127.0.0.1:{server.kafka_port}", "--topic", TOPIC,
               "--group", f"txn-java-{uuid.uuid4()}", "--from-beginning", "--max-messages", str(len(COMMITTED) + 1),
               "--timeout-ms", "15000", "--consumer-property", "isolation.level=read_committed", check=False)
    # (the tool's timeout bounds its first poll too, which joins the group: 2 s of initial rebalance delay, and a
    # loaded CI machine's JVM took longer than the 5 s this once allowed, reading nothing)
    assert run.stdout.splitlines() == COMMITTED, run.stderr  # type: ignore[attr-defined]
    assert "TimeoutException" in run.stderr  # type: ignore[attr-defined]  # nothing after them: not d0, d1
    everything = java("ConsoleConsumer.java", "--bootstrap-server", f"127.0.0.1:{server.kafka_port}", "--topic", TOPIC,
                      "--group", f"txn-java-{uuid.uuid4()}", "--from-beginning", "--max-messages",
                      str(len(EVERYTHING)), "--timeout-ms", "10000")
    assert everything.stdout.splitlines() == EVERYTHING  # type: ignore[attr-defined]


def test_kcat_read_committed_gets_the_committed_records_only(server: WalgateServer, kcat: Callable[..., object]) -> None:
    common = ["-b", f"127.0.0.1:{server.kafka_port}", "-C", "-t", TOPIC, "-p", "0", "-o", "beginning", "-e",
              "-f", "%s\\n"]
    committed = kcat(*common, "-X", "isolation.level=read_committed")
    assert committed.stdout.splitlines() == COMMITTED  # type: ignore[attr-defined]
    uncommitted = kcat(*common, "-X", "isolation.level=read_uncommitted")
    assert uncommitted.stdout.splitlines() == EVERYTHING  # type: ignore[attr-defined]



@pytest.mark.parametrize("isolation, want, end", [("read_committed", COMMITTED, LSO),
                                                  ("read_uncommitted", EVERYTHING, HW)])
def test_kafka_python_reads_by_isolation_level(server: WalgateServer, isolation: str, want: list[str], end: int) -> None:
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.kafka_port}", enable_auto_commit=False,
                                   isolation_level=isolation)
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(got) < len(want) or consumer.position(tp) < end):
            for batch in consumer.poll(timeout_ms=500).values():
                got += [r.value.decode() for r in batch]
        assert (got, consumer.position(tp), consumer.end_offsets([tp])[tp]) == (want, end, end)
    finally:
        consumer.close()


@pytest.mark.parametrize("isolation, want, end", [("read_committed", COMMITTED, LSO),
                                                  ("read_uncommitted", EVERYTHING, HW)])
def test_aiokafka_reads_by_isolation_level(server: WalgateServer, isolation: str, want: list[str], end: int) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def read() -> tuple[list[str], int, int]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.kafka_port}",
                                             enable_auto_commit=False, isolation_level=isolation)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[str] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (len(got) < len(want) or await consumer.position(tp) < end):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value.decode() for r in batch]
            return got, await consumer.position(tp), (await consumer.end_offsets([tp]))[tp]
        finally:
            await consumer.stop()

    assert asyncio.run(read()) == (want, end, end)

def test_the_java_admin_describes_the_partitions_producers(server: WalgateServer, java: Callable[..., object]) -> None:
    run = java("DescribeProducers.java", f"127.0.0.1:{server.kafka_port}", TOPIC, "0")
    producers = [json.loads(line) for line in run.stdout.splitlines()]  # type: ignore[attr-defined]
    assert [(p["event"], p["id"], p["epoch"], p["last_sequence"], p["txn_start_offset"]) for p in producers] == [
        ("producer", A, 0, 2, None), ("producer", C, 0, 2, None), ("producer", D, 0, 1, LSO)]
    assert [p["coordinator_epoch"] for p in producers] == [0, 0, None]  # D has no marker yet (-1 on the wire)
    assert producers[2]["last_timestamp"] == 1_700_000_000_001

# ------------------------------------------------------------------ with the coordinator


@pytest.fixture(scope="module")
def coordinated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    pytest.importorskip("walgate.gateway.kafka.transactions", reason="the transaction coordinator is not merged")
    with running_walgate(tmp_path_factory.mktemp("walgate")) as server:
        yield server
        log = server.log()
        assert "Traceback" not in log, log[-3000:]


def test_a_transactional_producer_commits_and_aborts_and_read_committed_sees_the_commit(
        coordinated: WalgateServer, java: Callable[..., object]) -> None:
    bootstrap = f"127.0.0.1:{coordinated.kafka_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("txn_write", 1, 1)])["txn_write"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "compat-txn", "linger.ms": 5})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("txn_write", f"kept-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(2):
        producer.produce("txn_write", f"dropped-{i}".encode(), partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("txn_write", b"kept-3", partition=0)
    producer.commit_transaction(30)
    kept = [f"kept-{i}" for i in range(4)]
    got, position, end = ck_read(bootstrap, "read_committed", len(kept), "txn_write")
    assert got == kept
    assert position == end  # the markers are skipped: the end is reached
    everything, _, _ = ck_read(bootstrap, "read_uncommitted", 6, "txn_write")
    assert everything == kept[:3] + ["dropped-0", "dropped-1", "kept-3"]
    run = java("ConsoleConsumer.java", "--bootstrap-server", bootstrap, "--topic", "txn_write", "--group",
               f"txn-java-{uuid.uuid4()}", "--from-beginning", "--max-messages", "4", "--timeout-ms", "10000",
               "--consumer-property", "isolation.level=read_committed")
    assert run.stdout.splitlines() == kept  # type: ignore[attr-defined]

