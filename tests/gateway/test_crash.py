"""Crash test with real process kills: nothing acknowledged is ever lost.

A writer thread sends INSERTs (multi-table SQL) and line-protocol bodies to a
``walgate serve`` under ``WAL_LEVEL 2`` / ``WAL_FSYNC_PERIOD 0`` and records
what was acknowledged; the server is ``kill -9``-ed at a random moment, then
restarted on the same data directory (8 cycles in the suite, 20 under ``WALGATE_SOAK=1``; the Kafka produce and
commit loops 3 and 4, 6 and 8 under it). After every cycle every acknowledged
row must be there, in acknowledgement order per table, nothing that was never
sent may appear, and the WAL must reopen (its replay truncates only torn,
unacknowledged tails).
"""

from __future__ import annotations

import http.client
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from livewalgate import running_walgate, soak_cycles

CYCLES = soak_cycles(8, 20)
TABLES = ("d0", "d1", "d2")


class Writer(threading.Thread):
    """Writes until the server dies; ``acked`` holds the sequence numbers acknowledged per table."""

    def __init__(self, url: str, start_seq: int) -> None:
        super().__init__(daemon=True)
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        self.seq = start_seq
        self.acked: dict[str, list[int]] = {t: [] for t in TABLES}
        self.lp_acked: list[int] = []
        self.sent: set[int] = set()

    def post(self, path: str, body: str) -> int:
        self.conn.request("POST", path, body=body.encode())
        resp = self.conn.getresponse()
        resp.read()
        return resp.status

    def run(self) -> None:
        try:
            for _ in range(100_000):  # bounded; the kill ends it far sooner
                batch = {t: [self.seq + i * len(TABLES) + k for i in range(4)] for k, t in enumerate(TABLES)}
                self.seq += 4 * len(TABLES)
                values = " ".join(
                    f"crash.{t} USING crash.st TAGS ('{t}') VALUES " + " ".join(f"({s}, {s})" for s in seqs)
                    for t, seqs in batch.items()
                )
                for seqs in batch.values():
                    self.sent.update(seqs)
                if self.post("/rest/sql", f"INSERT INTO {values}") != 200:
                    raise AssertionError("insert refused")
                for t, seqs in batch.items():
                    self.acked[t].extend(seqs)
                lp = [self.seq + i for i in range(5)]
                self.seq += 5
                self.sent.update(lp)
                body = "\n".join(f"lp,src=w v={s}i {s}" for s in lp)
                if self.post("/influxdb/v1/write?db=crash&precision=ms", body) != 204:
                    raise AssertionError("line protocol refused")
                self.lp_acked.extend(lp)
        except (OSError, http.client.HTTPException):
            return  # the server was killed


def query(url: str, sql: str) -> list[list]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("POST", "/rest/sql", body=sql.encode())
    resp = conn.getresponse()
    payload = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, payload
    return payload["data"]


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_row(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    data_dir = tmp_path / "data"
    acked: dict[str, list[int]] = {t: [] for t in TABLES}
    lp_acked: list[int] = []
    sent: set[int] = set()
    seq = 1
    with running_walgate(tmp_path / "run0", data_dir=data_dir) as server:
        query(server.http_url, "CREATE DATABASE crash VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
        query(server.http_url, "CREATE STABLE crash.st (ts TIMESTAMP, seq BIGINT) TAGS (name VARCHAR(8))")
    for cycle in range(CYCLES):
        with running_walgate(tmp_path / f"run{cycle + 1}", data_dir=data_dir) as server:
            check(server.http_url, acked, lp_acked, sent)
            writer = Writer(server.http_url, seq)
            writer.start()
            writer.join(timeout=rng.uniform(0.05, 0.8))
            server.proc.kill()  # SIGKILL at a random point of the write stream
            server.proc.wait(10)
            writer.join(timeout=15)
            assert not writer.is_alive()
            for t in TABLES:
                acked[t].extend(writer.acked[t])
            lp_acked.extend(writer.lp_acked)
            sent |= writer.sent
            seq = writer.seq
    assert sum(map(len, acked.values())) > 100, "the writer barely wrote: the test proves nothing"
    with running_walgate(tmp_path / "final", data_dir=data_dir) as server:
        check(server.http_url, acked, lp_acked, sent)
        assert "Traceback" not in server.log()


def check(url: str, acked: dict[str, list[int]], lp_acked: list[int], sent: set[int]) -> None:
    """Every acknowledged row is present, in order; nothing unsent is present."""
    for t in TABLES:
        try:
            got = [r[0] for r in query(url, f"SELECT seq FROM crash.{t}")]
        except AssertionError:
            got = []  # the table was never created before the first kill
        assert set(got) <= sent
        present = set(got)
        missing = [s for s in acked[t] if s not in present]
        assert not missing, f"{t}: {len(missing)} acknowledged rows lost, e.g. {missing[:5]}"
        assert got == sorted(got), f"{t}: rows out of order"
    if lp_acked:
        got_lp = [r[0] for r in query(url, "SELECT v FROM crash.lp")]
        assert set(lp_acked) <= set(got_lp)
        assert set(got_lp) <= sent


COMMITTER = """
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "crash-group", "enable.auto.commit": False})
n = int(sys.argv[2])
for _ in range(1_000_000):  # bounded; the test kills this process long before
    n += 1
    c.commit(offsets=[TopicPartition("oct", 1, n)], asynchronous=False)
    print(n, flush=True)  # acknowledged: the commit call returned
"""


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_offset_commit(tmp_path: Path) -> None:
    """A committer process (confluent-kafka, synchronous commits of growing offsets) is cut off by kill -9 of
    walgate at random points; after each restart the committed offset is at least the last acknowledged one."""
    from confluent_kafka import Consumer, TopicPartition

    rng = random.Random(7)
    data_dir = tmp_path / "data"
    with running_walgate(tmp_path / "setup", data_dir=data_dir) as server:
        query(server.http_url, "CREATE DATABASE oc VGROUPS 2")
        query(server.http_url, "CREATE STABLE oc.st (ts TIMESTAMP, v INT) TAGS (t INT)")
        query(server.http_url, "CREATE TOPIC oct AS STABLE oc.st")

    def committed(port: int) -> int:
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "crash-group"})
        try:
            return c.committed([TopicPartition("oct", 1)], timeout=15)[0].offset
        finally:
            c.close()

    acked = -1001  # OFFSET_INVALID: nothing committed yet
    for cycle in range(soak_cycles(4, 8)):
        with running_walgate(tmp_path / f"c{cycle}", data_dir=data_dir) as server:
            got = committed(server.kafka_port)
            assert got >= acked, f"cycle {cycle}: committed {got} < acknowledged {acked}"
            out = tmp_path / f"committer{cycle}.out"
            with open(out, "wb") as f:
                committer = subprocess.Popen(
                    [sys.executable, "-c", COMMITTER, f"127.0.0.1:{server.kafka_port}", str(max(got, 0))],
                    stdout=f, stderr=subprocess.DEVNULL,
                )
            try:
                time.sleep(rng.uniform(1.0, 2.0))
                server.proc.kill()
                server.proc.wait(10)
            finally:
                committer.kill()
                committer.wait(10)
            lines = out.read_text().split()
            if lines:
                acked = int(lines[-1])
    assert acked > 10, "too few commits were acknowledged: the test proves nothing"
    with running_walgate(tmp_path / "final", data_dir=data_dir) as server:
        assert committed(server.kafka_port) >= acked


PRODUCER = """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "enable.idempotence": True, "linger.ms": 2,
              "message.timeout.ms": 60000})
n = int(sys.argv[2])


def acked(err, msg):
    if err is None:
        print(msg.value().decode(), flush=True)  # acknowledged: the delivery report says so


for _ in range(1_000_000):  # bounded; the test kills this process long before
    n += 1
    p.produce("pt", str(n).encode(), partition=n % 2, on_delivery=acked)
    p.poll(0)
    if n % 50 == 0:
        p.flush(10)
"""


@pytest.mark.slow
def test_kill_9_loses_no_acknowledged_produce(tmp_path: Path) -> None:
    """An idempotent acks=all producer is cut off by kill -9 of walgate at random points; after every restart
    each acknowledged record is in its partition exactly once, in order, and nothing never sent appears."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    rng = random.Random(11)
    data_dir = tmp_path / "data"
    with running_walgate(tmp_path / "setup", data_dir=data_dir) as server:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
        admin.create_topics([NewTopic("pt", 2, 1)])["pt"].result(timeout=30)

    def read_all(port: int) -> dict[int, list[int]]:
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "reader", "enable.partition.eof": True})
        try:
            got: dict[int, list[int]] = {0: [], 1: []}
            c.assign([TopicPartition("pt", p, 0) for p in (0, 1)])
            ends = {p: c.get_watermark_offsets(TopicPartition("pt", p), timeout=15)[1] for p in (0, 1)}
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < sum(ends.values()) and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got[m.partition()].append(int(m.value()))
            return got
        finally:
            c.close()

    acked: set[int] = set()
    start = 0
    for cycle in range(soak_cycles(3, 6)):
        with running_walgate(tmp_path / f"p{cycle}", data_dir=data_dir) as server:
            got = read_all(server.kafka_port)
            stored = got[0] + got[1]
            assert len(stored) == len(set(stored)), f"cycle {cycle}: duplicates"
            assert acked <= set(stored), f"cycle {cycle}: lost {sorted(acked - set(stored))[:10]}"
            assert all(v % 1_000_000 and v < start + 1_000_000 for v in stored), f"cycle {cycle}: never sent"
            assert all(a < b for p in (0, 1) for a, b in zip(got[p], got[p][1:])), f"cycle {cycle}: out of order"
            out = tmp_path / f"producer{cycle}.out"
            with open(out, "wb") as f:
                producer = subprocess.Popen(
                    [sys.executable, "-c", PRODUCER, f"127.0.0.1:{server.kafka_port}", str(start)],
                    stdout=f, stderr=subprocess.DEVNULL,
                )
            try:
                time.sleep(rng.uniform(1.5, 3.0))
                server.proc.kill()
                server.proc.wait(10)
            finally:
                producer.kill()
                producer.wait(10)
            lines = [int(x) for x in out.read_text().split()]
            acked.update(lines)
            start += 1_000_000  # the next producer's records cannot be confused with this one's
    assert len(acked) > 100, "too few records were acknowledged: the test proves nothing"
