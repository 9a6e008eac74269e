"""A real full disk under a real server (issue 13, items 4 and 5): nothing acknowledged is lost, nothing refused
becomes visible, committed offsets never go backwards, the server stays up, resumes by itself once space is freed,
and starts again on the same data dir.

The data dir lives on a small tmpfs mounted for the test (root only; a clear skip otherwise). A filler file takes
all but a few hundred KiB of it, then confluent-kafka produces 1 KiB records with ``acks=all`` into a topic with
``flush.messages=1`` (an fsync before every answer), an HTTP client INSERTs rows and a consumer commits offsets,
until every one of them has been refused for lack of space. The filler is removed and each of them must succeed
again without a restart. Finally the server is restarted and everything acknowledged is read back.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from livewalgate import running_walgate  # noqa: E402

TOPIC = "full.disk"
FS_BYTES = 32 << 20
LEFT_FREE = 384 << 10
VALUE = 1024


@contextlib.contextmanager
def small_fs(path: Path) -> Iterator[Path]:
    """A tmpfs of FS_BYTES mounted at ``path`` for the block (skip when this process cannot mount)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(fs: Path, leave: int) -> Path:
    """A file taking all of ``fs`` but ``leave`` bytes."""
    filler = fs / "filler"
    st = os.statvfs(fs)
    size = max(st.f_bavail * st.f_frsize - leave, 0)
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        while size > 0:
            f.write(chunk[: min(size, len(chunk))])
            size -= min(size, len(chunk))
    return filler


class Http:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

    def sql(self, statement: str) -> tuple[int, dict]:
        self.conn.request("POST", "/rest/sql", body=statement.encode())
        resp = self.conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")


def produce(producer: Producer, values: list[int]) -> tuple[dict[int, int], set[int]]:
    """Produce one record per value; ({value: offset} acknowledged, {value} refused)."""
    acked: dict[int, int] = {}
    refused: set[int] = set()

    def report(err, msg) -> None:  # noqa: ANN001
        seq = int(msg.value()[:12])
        if err is None:
            acked[seq] = msg.offset()
        else:
            refused.add(seq)

    for seq in values:
        producer.produce(TOPIC, value=b"%012d" % seq + b"x" * (VALUE - 12), partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0
    return acked, refused


def read_all(port: int) -> dict[int, int]:
    """{value: offset} of every record of the topic's partition 0, read from the beginning to the end."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "reader", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        seen: dict[int, int] = {}
        deadline = time.monotonic() + 60
        last = -1
        while last + 1 < high and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            seq = int(msg.value()[:12])
            assert seq not in seen, f"value {seq} stored twice (offsets {seen[seq]} and {msg.offset()})"
            seen[seq] = msg.offset()
            last = msg.offset()
        assert last + 1 >= high, f"read up to offset {last} of {high}"
        return seen
    finally:
        consumer.close()


def test_full_disk_loses_nothing_and_resumes(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs") as fs:
        data = fs / "data"
        with running_walgate(tmp_path / "run", data_dir=data) as server:
            bootstrap = f"127.0.0.1:{server.kafka_port}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1, config={"flush.messages": "1"})])[TOPIC].result(30)
            web = Http(server.http_url)
            assert web.sql("CREATE DATABASE full_db VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")[0] == 200
            assert web.sql("CREATE TABLE full_db.t (ts TIMESTAMP, v INT)")[0] == 200
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                                 "linger.ms": 0, "message.timeout.ms": 30000})
            committer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer",
                                  "enable.auto.commit": False})

            acked, refused = produce(producer, list(range(100)))
            assert not refused and len(acked) == 100
            committed = 0
            rows_acked: list[int] = []
            rows_refused: list[int] = []

            def insert(k: int) -> None:
                status, body = web.sql(f"INSERT INTO full_db.t VALUES ({1_700_000_000_000 + k}, {k})")
                if status == 200:
                    rows_acked.append(k)
                else:
                    assert status == 503, (status, body)  # a clear "disk full" error, never 500
                    assert body["code"] != 0 and body["desc"]
                    rows_refused.append(k)

            def commit(offset: int) -> bool:
                nonlocal committed
                try:
                    committer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
                except KafkaException:
                    return False
                committed = offset
                return True

            # the disk fills up: keep writing until produce, INSERT and commit have each been refused
            filler = fill(fs, LEFT_FREE)
            seq = 100
            commit_refused = False
            for _ in range(40):
                more_acked, more_refused = produce(producer, list(range(seq, seq + 64)))
                acked.update(more_acked)
                refused |= more_refused
                for k in range(seq, seq + 16):
                    insert(k)
                for k in range(seq, seq + 32):  # a page of the coordinator log has room for a few dozen lines
                    commit_refused = not commit(k) or commit_refused
                seq += 64
                if refused and rows_refused and commit_refused:
                    break
            assert refused, "the disk never filled up"
            assert rows_refused and commit_refused

            # space is freed: the same server accepts writes again, by itself
            filler.unlink()
            more_acked, more_refused = produce(producer, list(range(seq, seq + 50)))
            assert not more_refused and len(more_acked) == 50
            acked.update(more_acked)
            insert(seq)
            assert rows_acked[-1] == seq
            assert commit(seq + 1)
            producer.flush(10)
            committer.close()

            seen = read_all(server.kafka_port)
            assert seen == acked, "acknowledged and stored records differ"
            assert not set(seen) & refused
            assert "Traceback" not in server.log()

        with running_walgate(tmp_path / "run2", data_dir=data) as server:
            assert read_all(server.kafka_port) == acked
            web = Http(server.http_url)
            status, body = web.sql("SELECT v FROM full_db.t")
            assert status == 200
            assert sorted(r[0] for r in body["data"]) == sorted(rows_acked)
            check = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "committer"})
            got = check.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset
            check.close()
            assert got == committed
            assert "Traceback" not in server.log()
