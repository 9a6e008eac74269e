"""walgate only: stock consumers read past WAL entries whose bytes were lost (issue 13, item 4).

A running server's WAL is damaged on disk (one flipped byte in two entries, the last one included). Fetch serves
each lost entry as a gap, a control batch covering its offsets (what Kafka's transaction markers look like), so
every client skips it as it skips markers and compacted-away records: the consumers get every intact record, their
position reaches the high watermark (lag 0, no consumer stuck behind the lost tail) and the server logs the damage
without a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from livewalgate import WalgateServer, running_walgate

DB = "lossy"
TOPIC = "lossy_in"
NOTES = ["intact-0", "lost-1111", "intact-2", "lost-3333"]  # one INSERT (one WAL entry, 2 rows) each
INTACT = [n for n in NOTES for _ in range(2) if n.startswith("intact")]
END = 2 * len(NOTES)


def sql(server: WalgateServer, statement: str) -> dict:
    import urllib.request

    request = urllib.request.Request(f"{server.http_url}/rest/sql", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def damage(data_dir: Path, marker: bytes) -> None:
    """Flip one byte of the WAL entry holding ``marker`` (found by content)."""
    [(path, at)] = [(p, at) for p in data_dir.rglob("*.log") if (at := p.read_bytes().find(marker)) >= 0]
    with path.open("r+b") as f:
        f.seek(at)
        f.write(bytes([marker[0] ^ 0xFF]))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    with running_walgate(tmp_path_factory.mktemp("walgate")) as server:
        sql(server, f"CREATE DATABASE {DB} VGROUPS 1")
        sql(server, f"CREATE STABLE {DB}.meters (ts TIMESTAMP, current DOUBLE, note VARCHAR(16)) TAGS (loc VARCHAR(8))")
        sql(server, f"CREATE TOPIC {TOPIC} AS STABLE {DB}.meters")
        sql(server, f"CREATE TABLE {DB}.d1 USING {DB}.meters TAGS ('SF')")
        for k, note in enumerate(NOTES):
            ts = 1_700_000_000_000 + 10 * k
            sql(server, f"INSERT INTO {DB}.d1 VALUES ({ts}, {k}.0, '{note}') ({ts + 1}, {k}.5, '{note}')")
        for note in NOTES:
            if note.startswith("lost"):
                damage(server.data_dir, note.encode())
        yield server
        log = server.log()
        assert "Traceback" not in log, log[-3000:]


def test_confluent_kafka_reads_every_intact_record_and_reaches_the_end(server: WalgateServer) -> None:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "lossy-ck",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        got: list[str] = []
        deadline = time.monotonic() + 30
        position = -1
        while time.monotonic() < deadline and (len(got) < len(INTACT) or position < END):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(json.loads(message.value())["note"])
            assigned = consumer.assignment()
            position = consumer.position(assigned)[0].offset if assigned else -1
        assert got == INTACT
        assert position == END, "the consumer is stuck before the lost tail"
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition(TOPIC, 0)], 10)
        assert committed.offset == END
    finally:
        consumer.close()


def test_kafka_python_reads_every_intact_record_and_reaches_the_end(server: WalgateServer) -> None:
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.kafka_port}", enable_auto_commit=False,
                                   consumer_timeout_ms=1000)
    try:
        tp = kafka.TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(got) < len(INTACT) or consumer.position(tp) < END):
            for batch in consumer.poll(timeout_ms=500).values():
                got += [json.loads(r.value)["note"] for r in batch]
        assert got == INTACT
        assert consumer.position(tp) == END, "the consumer is stuck before the lost tail"
    finally:
        consumer.close()


async def test_aiokafka_reads_every_intact_record_and_reaches_the_end(server: WalgateServer) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{server.kafka_port}", enable_auto_commit=False)
    await consumer.start()
    try:
        tp = aiokafka.TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (len(got) < len(INTACT) or await consumer.position(tp) < END):
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                got += [json.loads(r.value)["note"] for r in batch]
        assert got == INTACT
        assert await consumer.position(tp) == END, "the consumer is stuck before the lost tail"
    finally:
        await consumer.stop()
