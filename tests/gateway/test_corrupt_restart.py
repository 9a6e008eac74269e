"""A real server restarted on a damaged data dir (issue 13, item 6): it starts, serves everything intact to a stock
Kafka client and over HTTP, lists the damage in ``SHOW QUARANTINE`` and ``/healthz``, and never logs a traceback.

One data dir is made by a live ``walgate serve``: a TDengine database (a supertable, rows, an ``AS DATABASE``
topic) over HTTP, and a Kafka-native topic with 1 MB segments that confluent-kafka fills past one segment, with
offsets a consumer group commits. Each case copies it, damages one file with the server stopped, and starts a
server on the copy. :mod:`tests.storage.test_corruption_sweep` sweeps every kind of file in-process; this is the
same promise seen through the network.
"""

from __future__ import annotations

import http.client
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from livewalgate import running_walgate  # noqa: E402

TOPIC = "corrupt.events"
RECORDS = 400
VALUE = 4096  # 400 x 4 KiB: one sealed 1 MB segment and an active one
ROWS = 60
COMMITS = (50, 120, 200)  # committed in this order: the coordinator log holds one line each


def value(seq: int) -> bytes:
    return b"%06d" % seq + bytes([97 + seq % 26]) * (VALUE - 6)


class Http:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

    def request(self, method: str, path: str, body: str = "") -> tuple[int, dict]:
        self.conn.request(method, path, body=body.encode())
        resp = self.conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")

    def sql(self, statement: str) -> dict:
        status, answer = self.request("POST", "/rest/sql", statement)
        assert status == 200, (statement, answer)
        return answer


def fill_meters(web: Http, rows: int) -> None:
    """Database ``d`` (2 vgroups), supertable ``d.st`` and ``rows`` rows over three subtables, ten an INSERT."""
    web.sql("CREATE DATABASE d VGROUPS 2")
    web.sql("CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (k INT)")
    for i in range(0, rows, 10):
        values = " ".join(f"({1_700_000_000_000 + i + j}, {i + j})" for j in range(10))
        web.sql(f"INSERT INTO d.t{i % 3} USING d.st TAGS ({i % 3}) VALUES {values}")


@dataclass(frozen=True)
class Template:
    data: Path
    offsets: dict[int, bytes]  # offset -> value, as produced


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    work = tmp_path_factory.mktemp("corrupt")
    with running_walgate(work / "run") as server:
        web = Http(server.http_url)
        fill_meters(web, ROWS)
        web.sql("CREATE TOPIC t_all AS DATABASE d")
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1, config={"segment.bytes": "1048576"})])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 65536,
                             "enable.idempotence": True})
        offsets: dict[int, bytes] = {}

        def report(err, msg) -> None:  # noqa: ANN001
            assert err is None, err
            offsets[msg.offset()] = msg.value()

        for seq in range(RECORDS):
            producer.produce(TOPIC, value=value(seq), partition=0, on_delivery=report)
            producer.poll(0)
        assert producer.flush(60) == 0 and len(offsets) == RECORDS
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
        for offset in COMMITS:
            group.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
        group.close()
        assert "Traceback" not in server.log()
        data = server.data_dir
    return Template(data, offsets)


def read_partition(port: int) -> tuple[dict[int, bytes], int]:
    """({offset: value} a stock consumer reads from the beginning to the high watermark, the high watermark)."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "reader", "enable.auto.commit": False})
    tp = TopicPartition(TOPIC, 0, 0)
    try:
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([tp])
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen[msg.offset()] = msg.value()
            if consumer.position([tp])[0].offset >= high:
                break
        assert consumer.position([tp])[0].offset >= high, f"stuck at {consumer.position([tp])} of {high}"
        return seen, high
    finally:
        consumer.close()


def committed(port: int) -> int:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))


def _native_wal(data: Path) -> list[Path]:
    """The Kafka topic's segments, oldest first (its database is the one whose WAL has two)."""
    for wal in data.glob("db/*/vnode0/wal"):
        logs = sorted(wal.glob("*.log"))
        if len(logs) == 2:
            return logs
    raise AssertionError("no WAL with a sealed and an active segment")


def damage_catalog(data: Path) -> tuple[str, set[int]]:
    """Flip a byte in the middle of the catalog's ``create_topic`` record (the AS DATABASE topic): that topic goes."""
    path = data / "catalog.log"
    raw = path.read_bytes()
    start = raw.index(b'"op":"create_topic"')
    _flip(path, (raw.rfind(b"\n", 0, start) + 1 + raw.index(b"\n", start)) // 2)
    return "catalog.log", set()


def damage_sealed(data: Path) -> tuple[str, set[int]]:
    """Flip a byte in the middle of the Kafka topic's sealed segment: the batch holding it is lost."""
    sealed = _native_wal(data)[0]
    lost = _batch_offsets(sealed, sealed.stat().st_size // 2)
    _flip(sealed, sealed.stat().st_size // 2)
    return str(sealed.relative_to(data)), lost


def damage_active(data: Path) -> tuple[str, set[int]]:
    """Flip a byte in the middle of the active segment: only the batch holding it is lost, not what follows."""
    active = _native_wal(data)[1]
    lost = _batch_offsets(active, active.stat().st_size // 2)
    _flip(active, active.stat().st_size // 2)
    return str(active.relative_to(data)), lost


def _batch_offsets(segment: Path, pos: int) -> set[int]:
    """The Kafka offsets of the batch whose WAL entry holds byte ``pos`` (read before the flip)."""
    raw = segment.read_bytes()
    at = 0
    while True:
        body_len = int.from_bytes(raw[at + 4 : at + 8], "little")
        end = at + 36 + body_len
        if at <= pos < end:
            base = int.from_bytes(raw[at + 36 : at + 44], "big")
            count = int.from_bytes(raw[at + 24 : at + 28], "little")
            return set(range(base, base + count))
        at = end


def tear_commits(data: Path) -> tuple[str, set[int]]:
    """Cut the last committed offset's line in half (a crash while committing)."""
    for path in data.glob("coordinator/offsets-*.log"):
        raw = path.read_bytes()
        if TOPIC.encode() in raw:
            last = raw.rfind(b"\n", 0, len(raw) - 1) + 1
            path.write_bytes(raw[: (last + len(raw)) // 2])
            return "", set()
    raise AssertionError("no coordinator partition holds the group's offsets")


@pytest.mark.parametrize("damage", [damage_catalog, damage_sealed, damage_active, tear_commits],
                         ids=["catalog flip", "sealed segment flip", "active segment flip", "coordinator log torn"])
def test_a_damaged_data_dir_starts_and_serves_what_is_intact(template: Template, tmp_path: Path, damage) -> None:  # noqa: ANN001
    data = tmp_path / "data"
    shutil.copytree(template.data, data)
    damaged_file, lost = damage(data)
    with running_walgate(tmp_path / "run", data_dir=data) as server:
        web = Http(server.http_url)
        rows = web.sql("SELECT * FROM d.st")["data"]
        assert sorted(r[1] for r in rows) == list(range(ROWS))
        topics = {r[0] for r in web.sql("SHOW TOPICS")["data"]}
        assert topics == ({TOPIC} if damage is damage_catalog else {TOPIC, "t_all"})
        got, high = read_partition(server.kafka_port)
        assert high == RECORDS
        wrong = {o: v[:12] for o, v in got.items() if template.offsets.get(o) != v}
        assert not wrong, f"records served that were never produced there: {wrong}"
        missing = sorted(set(template.offsets) - set(got) - lost)
        assert not missing, f"intact records not served: {missing[:10]} ({len(missing)})"
        assert committed(server.kafka_port) == (COMMITS[-2] if damage is tear_commits else COMMITS[-1])
        status, health = web.request("GET", "/healthz")
        assert status == 200 and health["status"] == "ok"
        if damaged_file:
            assert damaged_file in {d["file"] for d in health["quarantined"]}, health
        else:  # a torn last line is what a crash leaves: dropped, not damage
            assert health["quarantined"] == []
        assert "Traceback" not in server.log(), server.log()
        quarantine = web.sql("SHOW QUARANTINE")["data"]
        assert {row[0] for row in quarantine} == {d["file"] for d in health["quarantined"]}, quarantine
    assert "Traceback" not in server.log(), server.log()
