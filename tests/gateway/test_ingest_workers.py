"""Large write bodies are parsed and planned in ingest workers (walgate.gateway.ingest_workers), not on the storage
thread (issue 23).

Deterministic, not timed: the plan is held in its worker (the workers' gate, a shared flag) while real
clients get every other answer: confluent-kafka produces (acks=1) and reads metadata, ``/healthz`` says ok, a small
INSERT is acknowledged. Once the gate opens the write lands. A worker killed under a plan answers 503 with nothing
written, and the next write is planned in a new worker. A body planned in a real worker process writes the same WAL
bytes as the same body planned on the storage thread, and a bad body gets the same answer either way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_helpers import gateway_thread, sql
from tests.gateway.test_query_lane import post
from tests.storage.faults import FAULT_KINDS, Faults
from tests.storage.write_requests import REQUESTS, marks, seeded_engine, since
from walgate.gateway.ingest_workers import PLAN_IN_WORKER_BYTES, IngestWorkers, Prepared
from walgate.gateway.server import Gateway
from walgate.storage.errors import StorageUnavailable
from walgate.storage.write_plan import WriteRequest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SERIES = 2_000
LINES = 30_000  # about 1.4 MB: over PLAN_IN_WORKER_BYTES
BODY = "\n".join(f"big,host=h{i % SERIES} v={i}.5,n={i}i {1_700_000_000_000 + i}" for i in range(LINES)).encode()
COUNT = "SELECT COUNT(*) FROM q.big"
CSV_ROWS = 50_000  # about 1.5 MB
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(autouse=True)
def no_traceback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A traceback logged by a node a test ran fails the test."""
    yield
    assert not [r.getMessage() for r in caplog.records if r.exc_info]


def begun(gateway: Gateway, n: int) -> None:
    """Return once ``n`` plans have begun in the ingest workers."""
    deadline = time.monotonic() + 120  # the first plan waits for a worker process to start
    while gateway._ingest.begun.value < n:
        assert time.monotonic() < deadline, "the plan never reached a worker"
        time.sleep(0.02)


def rows(gateway: Gateway) -> int:
    try:
        return int(sql(gateway, COUNT)["data"][0][0])
    except Exception:  # noqa: BLE001 - no such supertable yet
        return 0


def test_a_held_plan_delays_no_produce_metadata_healthz_or_small_insert(tmp_path: Path) -> None:
    assert len(BODY) >= PLAN_IN_WORKER_BYTES
    with gateway_thread(tmp_path / "data") as gateway, concurrent.futures.ThreadPoolExecutor(1) as pool:
        sql(gateway, "CREATE DATABASE q VGROUPS 2")
        sql(gateway, "CREATE TABLE q.small (ts TIMESTAMP, v INT)")
        bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("k", 1)])["k"].result(30)
        gateway._ingest.gate.value = 0
        try:
            write = pool.submit(post, gateway, "/influxdb/v1/write?db=q&precision=ms", BODY)
            begun(gateway, 1)  # in its worker, held at the gate
            producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
            for i in range(20):
                producer.produce("k", str(i).encode(), partition=0)
            assert producer.flush(30) == 0
            assert "k" in admin.list_topics(timeout=30).topics  # a Metadata request
            assert post(gateway, "/healthz")[0] == 200
            assert sql(gateway, "INSERT INTO q.small VALUES (now, 1)")["data"] == [[1]]
            assert not write.done() and rows(gateway) == 0
        finally:
            gateway._ingest.gate.value = 1
        assert write.result(120) == (204, {})
        assert rows(gateway) == LINES
        assert gateway._engine is not None and gateway._engine.ingest.replans == 0


def test_a_worker_killed_under_a_plan_answers_503_and_writes_nothing(tmp_path: Path) -> None:
    csv = ("tbname,ts,v,host\n" + "".join(f"d{i % SERIES},{1_700_000_000_000 + i},{i},h{i % SERIES}\n"
                                          for i in range(CSV_ROWS))).encode()
    assert len(csv) >= PLAN_IN_WORKER_BYTES
    with gateway_thread(tmp_path / "data") as gateway, concurrent.futures.ThreadPoolExecutor(1) as pool:
        sql(gateway, "CREATE DATABASE q VGROUPS 2")
        sql(gateway, "CREATE STABLE q.big (ts TIMESTAMP, v INT) TAGS (host VARCHAR(8))")
        gateway._ingest.gate.value = 0
        try:
            write = pool.submit(post, gateway, "/csv/v1/write?db=q&stable=big", csv)
            begun(gateway, 1)
            pids = gateway._ingest.pids
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            status, body = write.result(120)
        finally:
            gateway._ingest.gate.value = 1
        assert status == 503 and body["code"] == StorageUnavailable.code
        assert "planning this write stopped" in body["desc"] and "nothing was written" in body["desc"]
        assert rows(gateway) == 0 and sql(gateway, "SHOW q.TABLES")["data"] == []
        assert post(gateway, "/csv/v1/write?db=q&stable=big", csv) == (200, {"code": 0, "rows": CSV_ROWS})
        assert set(gateway._ingest.pids).isdisjoint(pids) and rows(gateway) == CSV_ROWS


BAD = [  # (path, body): refused, with the same answer inline and in a worker
    ("/influxdb/v1/write?db=q", b"big,host=a v=1\nbig,host=a v=\n"),
    ("/influxdb/v1/write?db=nosuch", b"big,host=a v=1\nbig,host=a v=\n"),
    ("/influxdb/v1/write?db=q", b"big,host=a v=1\nbig,host=a v=\"s\"\n"),
    ("/csv/v1/write?db=q&stable=big", b"tbname,ts,v\nd1,1700000000000,1\nd2,1700000000001,x\n"),
    ("/csv/v1/write?db=q&table=nosuch", b"ts,v\n1700000000000,1\n"),
    ("/csv/v1/write?db=q&table=t&stable=big", b"ts,v\n1700000000000,1\n"),
    ("/rest/sql", b"INSERT INTO q.nosuch VALUES (1700000000000, 1)"),
    ("/rest/sql", b"INSERT INTO q.d1 USING q.big TAGS ('a') VALUES (1700000000000, 1) (1700000000001, 'x', 2)"),
    ("/rest/sql", b"INSERT INTO q.t VALUES (1700000000000, 1) q.t VALUES (1700000000001, 2, 3)"),
    ("/rest/sql", b"INSERT INTO q.t VALUES (1700000000000, 1"),
    ("/rest/sql", b"  insert into q.d2 using q.nosuch tags ('a') values (1700000000000, 1)"),
]
GOOD = [
    ("/rest/sql", b"INSERT INTO q.d3 USING q.big TAGS ('c') VALUES (1700000000002, 3) q.t VALUES (1700000000003, 4)"),
    ("/rest/sql", b"SELECT COUNT(*) FROM q.big"),  # sniffed as no INSERT: the usual path
    ("/rest/sql", b"insert into q.t values (1700000000004, 5)"),
    ("/csv/v1/write?db=q&table=t", b"ts,v\n1700000000005,6\n"),
    ("/influxdb/v1/write?db=q&precision=ms", b"big,host=e v=7i 1700000000006\n"),
]


def test_a_body_gets_the_same_answer_planned_in_a_worker_or_inline(tmp_path: Path) -> None:
    answers = []
    for where in ("inline", "worker"):
        with gateway_thread(tmp_path / where) as gateway:
            sql(gateway, "CREATE DATABASE q VGROUPS 2")
            sql(gateway, "CREATE STABLE q.big (ts TIMESTAMP, v BIGINT) TAGS (host VARCHAR(8))")
            sql(gateway, "CREATE TABLE q.t (ts TIMESTAMP, v INT)")
            gateway._ingest.min_bytes = 0 if where == "worker" else 1 << 40
            answers.append([post(gateway, path, body) for path, body in BAD + GOOD]
                           + [sql(gateway, "SELECT tbname, ts, v FROM q.big ORDER BY ts")["data"],
                              sql(gateway, "SELECT * FROM q.t ORDER BY ts")["data"]])
            # every write body but the SELECT, once: the tables they name are read from the vnodes' stores, so
            # none is sent again with tables the node looked up
            assert gateway._ingest.begun.value == (len(BAD) + len(GOOD) - 1 if where == "worker" else 0)
    inline, worker = answers
    assert worker == inline
    assert all(status >= 400 for status, _ in inline[:len(BAD)])
    assert all(status < 300 for status, _ in inline[len(BAD):len(BAD) + len(GOOD)]), inline


def test_a_body_planned_in_a_worker_process_writes_what_it_writes_planned_here(tmp_path: Path) -> None:
    here, elsewhere = seeded_engine(tmp_path / "here"), seeded_engine(tmp_path / "elsewhere")
    start = marks(here)
    workers = IngestWorkers()

    async def plan(request: WriteRequest) -> Prepared:
        async def snapshot(keys: list[tuple[str, str]]) -> Any:
            return elsewhere.write_snapshot(keys)

        planned = await workers.plan(request, snapshot)
        assert isinstance(planned, Prepared)
        return planned

    async def run() -> None:
        try:
            for request in REQUESTS:
                planned = await plan(request)
                assert here.ingest.write(request) == elsewhere.apply_write(planned.write, request)
                assert since(here, start) == since(elsewhere, start)
        finally:
            await workers.close()

    asyncio.run(run())
    assert workers.begun.value == len(REQUESTS)  # no table asked of the node: the workers read the vnodes' stores
    assert elsewhere.ingest.replans == elsewhere.ingest.rechecked == 0  # and the storage thread checked none again


@pytest.mark.parametrize("kind", FAULT_KINDS)
@pytest.mark.parametrize("at", [1, 2])
def test_a_planned_write_the_disk_refuses_answers_503_writes_nothing_and_service_resumes(
    tmp_path: Path, kind: str, at: int
) -> None:
    """The apply of a plan made in a worker is today's commit: a WAL append refused (the first vnode's, or a later
    one's, the first then taken back) answers 503, writes nothing, and the same body then succeeds."""
    with gateway_thread(tmp_path / "data") as gateway:
        sql(gateway, "CREATE DATABASE q VGROUPS 2")
        gateway._ingest.min_bytes = 0
        assert post(gateway, "/influxdb/v1/write?db=q&precision=ms", BODY[:BODY.index(b"\n")])[0] == 204
        faults = Faults()
        with faults.active():
            faults.fail_kind("write", kind, at=at, times=3)
            status, body = post(gateway, "/influxdb/v1/write?db=q&precision=ms", BODY)
            faults.clear()
        assert status == 503 and body["code"] == StorageUnavailable.code, body
        assert rows(gateway) == 1 and len(sql(gateway, "SHOW q.TABLES")["data"]) == 1
        assert post(gateway, "/influxdb/v1/write?db=q&precision=ms", BODY) == (204, {})
        assert rows(gateway) == 1 + LINES


def test_a_write_whose_client_went_away_while_it_was_planned_is_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "walgate.gateway.http_api")
    with gateway_thread(tmp_path / "data") as gateway:
        sql(gateway, "CREATE DATABASE q VGROUPS 2")
        host, port = gateway.http_address
        gateway._ingest.gate.value = 0
        try:
            with socket.create_connection((host, port), timeout=30) as s:
                s.sendall(b"POST /influxdb/v1/write?db=q&precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                          % len(BODY) + BODY)
                begun(gateway, 1)
            assert gateway._http is not None and gateway._http.server is not None
            deadline = time.monotonic() + 60
            while any(h.transport is not None for h in gateway._http.server.connections):  # the node saw it closed
                assert time.monotonic() < deadline, "the closed connection was never noticed"
                time.sleep(0.02)
        finally:
            gateway._ingest.gate.value = 1
        deadline = time.monotonic() + 120
        while not any("planned after its client went away: not written" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the planned write was never dropped"
            time.sleep(0.05)
        assert rows(gateway) == 0 and sql(gateway, "SHOW q.STABLES")["data"] == []


def test_an_insert_a_principal_may_not_run_is_refused_for_that_first_in_a_worker_too(tmp_path: Path) -> None:
    """ACLs are checked on the statement before its planning error is answered, as before a statement runs: a
    principal that may not write learns nothing of what exists."""
    answers = []
    for where in ("inline", "worker"):
        with gateway_thread(tmp_path / where, authorizer_class_name=AUTHORIZER) as gateway:  # no ACL: nobody may
            gateway._ingest.min_bytes = 0 if where == "worker" else 1 << 40
            answers.append([post(gateway, "/rest/sql", body) for body in (
                b"INSERT INTO nosuch.t VALUES (1700000000000, 1)",
                b"INSERT INTO q.t USING q.m TAGS (1) VALUES (1700000000000, 1)",
            )])
    inline, worker = answers
    assert worker == inline and {status for status, _ in inline} == {403}, inline
