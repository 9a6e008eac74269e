"""kill -9 between append and fdatasync with many waiters (issue 15): group commit never acknowledges what is lost.

A client process runs, at once, several ``acks=all`` producers into a ``flush.messages=1`` topic, several consumers
committing offsets synchronously (each its own group) and several HTTP clients INSERTing into a ``WAL_LEVEL 2``
database, each writing as fast as it is answered, so appends and commits keep arriving while fdatasyncs run. A real
``walgate serve`` is SIGKILLed at a random moment and restarted on the same data directory: every acknowledged
record, commit and row must be there after every restart.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_crash import query  # the same SQL-over-HTTP helper

from livewalgate import running_walgate

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

CYCLES = 4
WRITERS = 4  # of each kind
TOPIC = "gcp"

CLIENTS = """
import http.client, sys, threading
from urllib.parse import urlsplit
from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, url, base = sys.argv[1], urlsplit(sys.argv[2]), int(sys.argv[3])
lock = threading.Lock()

def say(line):
    with lock:
        print(line, flush=True)

def produce(i):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
                  "message.timeout.ms": 60000})
    def acked(err, msg):
        if err is None:
            say(f"p {msg.value().decode()}")
    for n in range(base + i * 100_000, base + (i + 1) * 100_000):
        p.produce("gcp", str(n).encode(), partition=n % 2, on_delivery=acked)
        p.poll(0)
        if n % 20 == 0:
            p.flush(10)

def commit(i):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{i}", "enable.auto.commit": False})
    for n in range(base, base + 100_000):
        c.commit(offsets=[TopicPartition("gcp", i % 2, n)], asynchronous=False)
        say(f"c {i} {n}")

def insert(i):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    for n in range(base, base + 100_000):
        conn.request("POST", "/rest/sql", body=f"INSERT INTO gc.t{i} VALUES ({1_700_000_000_000 + n}, {n})".encode())
        resp = conn.getresponse()
        resp.read()
        if resp.status == 200:
            say(f"r {i} {n}")

threads = [threading.Thread(target=f, args=(i,), daemon=True) for f in (produce, commit, insert)
           for i in range(int(sys.argv[4]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def stored_records(port: int) -> set[int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "reader",
                                  "enable.auto.commit": False})
    try:
        tps = [confluent_kafka.TopicPartition(TOPIC, p, 0) for p in (0, 1)]
        ends = sum(c.get_watermark_offsets(tp, timeout=15)[1] for tp in tps)
        c.assign(tps)
        got: list[int] = []
        deadline = time.monotonic() + 60
        while len(got) < ends and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(int(m.value()))
        assert len(got) >= ends, f"read {len(got)} of {ends} records"
        return set(got)
    finally:
        c.close()


def committed(port: int, group: int) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"g{group}"})
    try:
        return c.committed([confluent_kafka.TopicPartition(TOPIC, group % 2)], timeout=15)[0].offset
    finally:
        c.close()


def check(server, records: set[int], commits: dict[int, int], rows: dict[int, set[int]], cycle: str) -> None:  # noqa: ANN001
    lost = records - stored_records(server.kafka_port)
    assert not lost, f"{cycle}: {len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    for i, offset in commits.items():
        got = committed(server.kafka_port, i)
        assert got >= offset, f"{cycle}: group g{i} committed {got} < acknowledged {offset}"
    for i, seqs in rows.items():
        present = {r[0] for r in query(server.http_url, f"SELECT v FROM gc.t{i}")}
        assert seqs <= present, f"{cycle}: {len(seqs - present)} acknowledged rows of t{i} lost"


@pytest.mark.slow
def test_kill_9_with_many_waiters_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(15)
    data_dir = tmp_path / "data"
    with running_walgate(tmp_path / "setup", data_dir=data_dir) as server:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
        admin.create_topics([NewTopic(TOPIC, 2, 1, config={"flush.messages": "1"})])[TOPIC].result(timeout=30)
        query(server.http_url, "CREATE DATABASE gc VGROUPS 2 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
        query(server.http_url, "CREATE STABLE gc.st (ts TIMESTAMP, v BIGINT) TAGS (k INT)")
        for i in range(WRITERS):
            query(server.http_url, f"CREATE TABLE gc.t{i} USING gc.st TAGS ({i})")
    records: set[int] = set()
    commits: dict[int, int] = {}
    rows: dict[int, set[int]] = {i: set() for i in range(WRITERS)}
    for cycle in range(CYCLES):
        with running_walgate(tmp_path / f"run{cycle}", data_dir=data_dir) as server:
            check(server, records, commits, rows, f"cycle {cycle}")
            out = tmp_path / f"clients{cycle}.out"
            with open(out, "wb") as f:
                clients = subprocess.Popen(
                    [sys.executable, "-c", CLIENTS, f"127.0.0.1:{server.kafka_port}", server.http_url,
                     str(cycle * 1_000_000), str(WRITERS)], stdout=f, stderr=subprocess.DEVNULL)
            try:
                time.sleep(rng.uniform(1.0, 2.0))
                server.proc.kill()  # SIGKILL while appends and commits wait for their fdatasync
                server.proc.wait(10)
            finally:
                clients.kill()
                clients.wait(10)
            for line in out.read_text().splitlines():
                kind, *values = line.split()
                if kind == "p":
                    records.add(int(values[0]))
                elif kind == "c":
                    commits[int(values[0])] = max(commits.get(int(values[0]), -1), int(values[1]))
                elif kind == "r":
                    rows[int(values[0])].add(int(values[1]))
    assert len(records) > 100 and len(commits) == WRITERS and sum(map(len, rows.values())) > 100, (
        "too little was acknowledged: the test proves nothing")
    with running_walgate(tmp_path / "final", data_dir=data_dir) as server:
        check(server, records, commits, rows, "final")
        assert "Traceback" not in server.log()
