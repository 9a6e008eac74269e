"""SQL SELECTs run in query workers (walgate.gateway.query_workers), so a query delays no other lane (issue 23).

Deterministic, not timed: the query worker is stopped (SIGSTOP) while a SELECT is in it, which is what a query
that runs for ever looks like from the node. Meanwhile real clients get every other answer: confluent-kafka produces
(acks=1) and consumes, an INSERT is acknowledged, ``/healthz`` and ``/readyz`` say ok. Once the worker goes on, the
SELECT answers what was visible when it started (without the INSERT made meanwhile). A query past
``sql.timeout.ms``, or whose client went away, is stopped with TDengine's "Query killed" code; a worker killed under a
query answers that query with the same code, and the next query is served by a new worker. A node killed with
SIGKILL leaves no worker behind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from livewalgate import running_walgate
from tests.gateway.gateway_helpers import gateway_thread, sql
from walgate.gateway.server import Gateway
from walgate.storage.errors import QueryCancelled

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

COUNT = "SELECT COUNT(*) FROM q.m"


@pytest.fixture(autouse=True)
def no_traceback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A traceback logged by a node a test ran fails the test."""
    yield
    assert not [r.getMessage() for r in caplog.records if r.exc_info]


def post(gateway: Gateway, path: str, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of a request to the HTTP API, error statuses included."""
    host, port = gateway.http_address
    request = urllib.request.Request(f"http://{host}:{port}{path}", data=body if body else None)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def sample(gateway: Gateway, series: str) -> float:
    """The value of one series in ``/metrics``."""
    host, port = gateway.http_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    [value] = [line.split()[-1] for line in text.splitlines() if line.startswith(series + " ")]
    return float(value)


def in_workers(gateway: Gateway, count: int = 1) -> None:
    """Return once ``count`` queries are in the query workers (submitted; a stopped worker keeps them there)."""
    deadline = time.monotonic() + 60
    while sample(gateway, "walgate_sql_queries_in_workers") < count:
        assert time.monotonic() < deadline, "the query never reached the workers"
        time.sleep(0.05)


def prepare(gateway: Gateway) -> None:
    sql(gateway, "CREATE DATABASE q VGROUPS 2")
    sql(gateway, "CREATE STABLE q.m (ts TIMESTAMP, v DOUBLE) TAGS (t INT)")
    for i in range(10):
        sql(gateway, f"INSERT INTO q.d{i} USING q.m TAGS ({i}) VALUES (now, {i})")
    assert sql(gateway, COUNT)["data"] == [[10]]  # starts the worker


@contextlib.contextmanager
def stopped_workers(gateway: Gateway) -> Iterator[list[int]]:
    """The query workers stopped (SIGSTOP) inside the block; always continued after it."""
    pids = gateway._queries.pids
    assert pids, "no query worker is running"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_stopped_query_delays_no_kafka_client_and_no_other_statement(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        prepare(gateway)
        bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("k", 1)])["k"].result(30)
        with stopped_workers(gateway):
            query = pool.submit(post, gateway, "/rest/sql", COUNT.encode())
            in_workers(gateway)  # prepared, and in the stopped worker
            assert not query.done()
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
            for i in range(20):
                producer.produce("k", str(i).encode(), partition=0)
            assert producer.flush(30) == 0
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
            consumer.assign([TopicPartition("k", 0, 0)])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 20 and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    values.append(m.value())
            consumer.close()
            assert values == [str(i).encode() for i in range(20)]
            assert sql(gateway, "INSERT INTO q.d0 VALUES (now + 1s, 99)")["data"] == [[1]]
            assert post(gateway, "/healthz")[0] == 200
            assert post(gateway, "/readyz")[0] == 200
            assert not query.done()
            assert sample(gateway, "walgate_sql_queries_in_workers") == 1
        status, body = query.result(60)
        assert (status, body["data"]) == (200, [[10]])  # what was visible when it started
        assert sql(gateway, COUNT)["data"] == [[11]]
        assert sample(gateway, 'walgate_sql_query_seconds_count{outcome="ok"}') == 3
        assert sample(gateway, "walgate_sql_queries_in_workers") == 0


def test_a_query_past_sql_timeout_ms_is_killed(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1, sql_timeout_ms=1) as gateway:
        sql(gateway, "CREATE DATABASE q VGROUPS 2")
        lines = "\n".join(f"m,t=d{i % 100} v={i}.5 {1_700_000_000_000 + i}" for i in range(100_000))
        assert post(gateway, "/influxdb/v1/write?db=q&precision=ms", lines.encode())[0] == 204
        # 100,000 rows in 100 windows take tens of milliseconds to scan and aggregate anywhere: far past 1 ms
        status, body = post(gateway, "/rest/sql", b"SELECT _wstart, AVG(v) FROM q.m INTERVAL(1s)")
        assert status == 400 and body["code"] == QueryCancelled.code == 0x022D
        assert "sql.timeout.ms (1 ms)" in body["desc"]
        assert sample(gateway, 'walgate_sql_query_seconds_count{outcome="cancelled"}') == 1
        status, body = post(gateway, "/rest/sql", b"SELECT x FROM q.m")
        assert status == 400 and sample(gateway, 'walgate_sql_query_seconds_count{outcome="refused"}') == 0


def test_a_query_whose_client_went_away_is_killed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "walgate.gateway.http_api")
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway:
        prepare(gateway)
        host, port = gateway.http_address
        with stopped_workers(gateway):
            with socket.create_connection((host, port), timeout=10) as s:
                s.sendall(b"POST /rest/sql HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(COUNT), COUNT.encode()))
                in_workers(gateway)
            deadline = time.monotonic() + 60  # the node sees the connection closed while the query waits
            while 1 not in gateway._queries._flags[:]:  # the query's flag: the client went away
                assert time.monotonic() < deadline, "the closed connection was never noticed"
                time.sleep(0.05)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("client went away" in r.getMessage() for r in caplog.records):
            time.sleep(0.1)
        assert any("SELECT from 127.0.0.1 stopped: query cancelled: the client went away" in r.getMessage()
                   for r in caplog.records)
        assert sql(gateway, COUNT)["data"] == [[10]]


def test_a_worker_killed_fails_the_query_it_began_and_runs_the_others_in_new_workers(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        prepare(gateway)
        lines = "\n".join(f"big,t=d{i % 100} v={i}.5 {1_700_000_000_000 + i}" for i in range(100_000))
        assert post(gateway, "/influxdb/v1/write?db=q&precision=ms", lines.encode())[0] == 204
        workers = gateway._queries
        long = pool.submit(post, gateway, "/rest/sql", b"SELECT _wstart, AVG(v) FROM q.big INTERVAL(1a)")
        in_workers(gateway)  # its slot taken and its "begun" mark cleared
        deadline = time.monotonic() + 60
        while 1 not in workers._started[:]:  # the worker began it: 100,000 windows keep it busy for a while
            assert time.monotonic() < deadline, "the worker never began the query"
            time.sleep(0.001)
        with stopped_workers(gateway) as pids:
            queued = pool.submit(post, gateway, "/rest/sql", COUNT.encode())
            in_workers(gateway, 2)  # queued behind the long one in the only worker
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        status, body = long.result(60)
        assert status == 400 and body["code"] == QueryCancelled.code and "worker process stopped" in body["desc"]
        assert queued.result(60) == (200, queued.result()[1]) and queued.result()[1]["data"] == [[10]]
        assert workers.pids and set(workers.pids).isdisjoint(pids)
        idle = workers.pids
        for pid in idle:  # killed while idle: the next query finds the pool broken and runs in a new one
            os.kill(pid, signal.SIGKILL)
        while any(_alive(pid) for pid in idle):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert sql(gateway, COUNT)["data"] == [[10]]
        assert sql(gateway, COUNT)["data"] == [[10]]


def test_workers_keep_no_deleted_segment_open(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway:
        prepare(gateway)
        [worker] = gateway._queries.pids
        sql(gateway, "DROP DATABASE q")
        held = [os.readlink(fd) for fd in Path(f"/proc/{worker}/fd").iterdir()]
        assert not [path for path in held if "/wal/" in path], held


def test_no_select_from_a_kafka_native_topics_database_and_answers_are_bounded(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1, sql_max_bytes=2000) as gateway:
        prepare(gateway)
        bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("k", 1, config={"cleanup.policy": "compact"})])["k"].result(30)
        [kafka_db] = [row[0] for row in sql(gateway, "SHOW DATABASES")["data"] if row[0] not in ("q",)]
        sql(gateway, f"CREATE TABLE {kafka_db}.t (ts TIMESTAMP, v INT)")
        status, body = post(gateway, "/rest/sql", f"SELECT * FROM {kafka_db}.t".encode())
        assert status == 400 and "Kafka-native topic k" in body["desc"]
        for i in range(10, 60):
            sql(gateway, f"INSERT INTO q.d{i} USING q.m TAGS ({i}) VALUES (now, {i})")
        status, body = post(gateway, "/rest/sql", b"SELECT * FROM q.m")  # 60 rows: past 2,000 bytes of JSON
        assert status == 400 and "larger than 2000 bytes" in body["desc"]


def _children(pid: int) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
            for c in (t / "children").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_node_killed_with_sigkill_leaves_no_query_worker_behind(tmp_path: Path) -> None:
    with running_walgate(tmp_path) as server:
        def run(statement: str) -> dict[str, Any]:
            request = urllib.request.Request(f"{server.http_url}/rest/sql", data=statement.encode())
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]

        run("CREATE DATABASE q VGROUPS 1")
        run("CREATE TABLE q.t (ts TIMESTAMP, v INT)")
        run("INSERT INTO q.t VALUES (now, 1)")
        assert run("SELECT COUNT(*) FROM q.t")["data"] == [[1]]
        workers = _children(server.proc.pid)
        assert workers and all(_alive(pid) for pid in workers)
        server.proc.kill()
        server.proc.wait(30)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers)
        assert "Traceback" not in server.log()  # the node's and its workers' output
