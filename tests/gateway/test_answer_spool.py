"""A SELECT's answer is streamed from its worker's file (walgate.gateway.answer_spool), never held whole by the node.

Not timed: the node's memory is measured with tracemalloc (the node runs in this process; the client is curl, another
process), and a client that goes away mid-answer is a socket that stops reading. An answer of ~13 MB (many times
the relay's chunk) arrives complete, byte for byte what orjson makes of its content (the encoding the node used
before), with its Content-Length; the node's traced memory grows by a few chunks at most while it is sent (a whole
answer in memory, as when it came back through the worker's pipe, is 3x the bound). A client gone mid-answer ends
the relay: the file is closed and gone, and the only worker serves the next query. A read of the file failing
mid-answer (EIO) cuts the answer short and closes the connection, never a second response inside the first's
Content-Length (a merging node reading such a part gets a 503). An answer directory whose flock can be taken (a dead
node's) is removed by the next node that makes one, one locked (a running node's, whatever its pid) is kept; one
removed under a node is made again. The answers held are bounded together (``sql.answers.max.bytes``: a stalled
client's answer makes a second one refused, retriable) and a client that stops reading is cut off after
``SEND_TIMEOUT_S``, its answer's bytes given back. The worker's file is the encoding of the whole body for any
number of chunks (a scan's Arrow bytes: those bytes); a disk refusing any of its writes (ENOSPC, EIO, short: tests/storage/faults.py), an answer past
``sql.max.bytes`` or a cancelled query leave no file, the first with StorageUnavailable's clear message.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest
from aiohttp import web

from tests.gateway.gateway_helpers import gateway_thread, sql
from tests.storage.faults import FAULT_KINDS, Faults
from walgate.gateway import answer_spool, http_api, query_workers
from walgate.gateway.answer_spool import CHUNK_BYTES, CHUNK_ROWS, AnswersBudget, Spool, write_answer
from walgate.gateway.query_workers import SPOOL_PREFIX, spool_dir
from walgate.gateway.server import Gateway
from walgate.gateway.sql_forward import Caller, PartsBudget, SelectPart, select_here
from walgate.storage.cancel import Cancel
from walgate.storage.errors import LimitExceeded, QueryCancelled, StorageUnavailable
from walgate.storage.result import Result
from walgate.storage.select_merge import ARROW_STREAM

ROWS = 120_000  # ~13 MB of JSON: 8 doubles and a timestamp a row
COLUMNS = "abcdefgh"
QUERY = b"SELECT _ts, " + ", ".join(COLUMNS).encode() + b" FROM big.m ORDER BY _ts"


@pytest.fixture(autouse=True)
def no_traceback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A traceback logged by a node a test ran fails the test."""
    yield
    assert not [r.getMessage() for r in caplog.records if r.exc_info]


def value(row: int, column: int) -> float:
    return row * 8 + column + 0.25


def load(gateway: Gateway) -> None:
    """``ROWS`` rows of eight doubles into ``big.m`` (line protocol, bodies of 20,000 lines)."""
    host, port = gateway.http_address
    sql(gateway, "CREATE DATABASE big VGROUPS 2")
    for start in range(0, ROWS, 20_000):
        lines = "\n".join(
            f"m,t=d{i % 4} " + ",".join(f"{c}={value(i, k)}" for k, c in enumerate(COLUMNS)) + f" {1_700_000_000_000 + i}"
            for i in range(start, start + 20_000))
        request = urllib.request.Request(f"http://{host}:{port}/influxdb/v1/write?db=big&precision=ms",
                                         data=lines.encode())
        with urllib.request.urlopen(request, timeout=120) as response:
            assert response.status == 204


def spooled(gateway: Gateway) -> list[str]:
    """The answer files in the node's spool directory, and those this process still has open (taken, unlinked)."""
    spool = gateway._queries._spool
    assert spool is not None
    held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")]
    return os.listdir(spool) + [path for path in held if path.startswith(spool + "/")]


def test_a_large_answer_arrives_whole_and_the_node_holds_a_few_chunks_of_it(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway:
        load(gateway)
        host, port = gateway.http_address
        out = tmp_path / "answer.json"
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            subprocess.run(["curl", "-sS", "--fail-with-body", "-D", str(tmp_path / "headers"), "-o", str(out),
                            "--data-binary", "@-", f"http://{host}:{port}/rest/sql"],
                           input=QUERY, check=True, timeout=300)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        body = out.read_bytes()
        answer = json.loads(body)  # the standard library's decoder, not walgate's
        assert answer["rows"] == ROWS and answer["code"] == 0
        assert [name for name, _, _ in answer["column_meta"]] == ["_ts", *COLUMNS]
        assert [row[1:] for row in answer["data"]] == [[value(i, k) for k in range(8)] for i in range(ROWS)]
        assert body == orjson.dumps(answer)  # byte for byte the encoding of the whole body at once
        assert f"content-length: {len(body)}" in (tmp_path / "headers").read_text().lower()
        assert len(body) > 8 * CHUNK_BYTES and ROWS > 16 * CHUNK_ROWS  # many chunks each way
        assert peak < 4 * CHUNK_BYTES, f"the node held {peak} bytes of a {len(body)}-byte answer"
        assert spooled(gateway) == []


def test_a_client_gone_mid_answer_ends_the_relay_and_frees_the_file_and_the_worker(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "walgate.gateway.answer_spool")
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway:
        load(gateway)
        host, port = gateway.http_address
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the node can send little ahead of us
            s.settimeout(120)
            s.connect((host, port))
            s.sendall(b"POST /rest/sql HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(QUERY), QUERY))
            assert s.recv(4096).startswith(b"HTTP/1.1 200")  # the answer has begun
        deadline = time.monotonic() + 60
        while not any("went away while its answer was sent" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the relay never noticed its client was gone"
            time.sleep(0.05)
        assert spooled(gateway) == []
        assert sql(gateway, "SELECT COUNT(*) FROM big.m")["data"] == [[ROWS]]  # the one worker is free


def test_a_dead_nodes_answer_directory_is_removed_and_a_locked_one_kept_whatever_its_pid(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    stale = tmp_path / f"{SPOOL_PREFIX}{os.getpid()}-x"  # a pid alive here, but its directory unlocked: a dead node's
    stale.mkdir()
    (stale / "7.json").write_bytes(b'{"code":0,"column_meta":[],"da')  # a killed node's worker's half answer
    holder = subprocess.Popen(  # a node in another PID namespace: its directory locked, its pid renamed to a dead one
        [sys.executable, "-c", "import sys; from walgate.gateway.query_workers import spool_dir; "
         "path, lock = spool_dir(sys.argv[1]); print(path, flush=True); sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        live = Path(holder.stdout.readline().strip())
        assert live.is_dir()
        renamed = tmp_path / f"{SPOOL_PREFIX}{gone.pid}-y"  # as a pid of another namespace looks here
        live.rename(renamed)
        made, lock = spool_dir(str(tmp_path))
        try:
            assert sorted(p.name for p in tmp_path.iterdir()) == sorted([renamed.name, Path(made).name])
            assert Path(made).name.startswith(f"{SPOOL_PREFIX}{os.getpid()}-")
            assert os.stat(made).st_mode & 0o777 == 0o700
        finally:
            os.close(lock)
        assert holder.stdin is not None
        holder.stdin.close()  # that node stops (its lock is released with its process)
        assert holder.wait(timeout=60) == 0
        again, lock = spool_dir(str(tmp_path))
        os.close(lock)
        assert sorted(p.name for p in tmp_path.iterdir()) == [Path(again).name]  # both unlocked ones removed
    finally:
        holder.kill()
        holder.wait()


def test_an_answer_directory_removed_under_the_node_is_made_again_off_its_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made_on: list[str] = []  # the threads spool_dir ran on (it lists TMPDIR and may remove directories)

    def spool_dir_here(parent: str) -> Any:
        made_on.append(threading.current_thread().name)
        return spool_dir(parent)

    monkeypatch.setattr(query_workers, "spool_dir", spool_dir_here)
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway:
        small_table(gateway)
        assert sql(gateway, "SELECT COUNT(*) FROM few.t")["data"] == [[50]]
        first = gateway._queries._spool
        assert first is not None
        shutil.rmtree(first)  # another node, or an ageing of TMPDIR
        assert sql(gateway, "SELECT COUNT(*) FROM few.t")["data"] == [[50]]
        assert gateway._queries._spool != first and os.path.isdir(gateway._queries._spool or "")
    assert len(made_on) == 2 and "walgate-gateway" not in made_on  # never on the node's event loop's thread


def wide_result(rows: int) -> Result:
    """``rows`` rows of ~330 bytes of JSON each (so 3 chunks of rows are a few writes of CHUNK_BYTES)."""
    return Result([("ts", "TIMESTAMP", 8), ("v", "DOUBLE", 8), ("s", "VARCHAR", 300)],
                  [[f"2026-11-29T10:00:{i % 60:02}.000Z", i + 0.5, f"{i:0300}"] for i in range(rows)])


def test_an_answer_file_is_the_encoding_of_the_whole_body(tmp_path: Path) -> None:
    for rows in (0, 1, CHUNK_ROWS, CHUNK_ROWS + 1, 3 * CHUNK_ROWS + 7):
        result = wide_result(rows)
        path = tmp_path / f"{rows}.json"
        size = write_answer(str(path), result, 1 << 30, Cancel())
        assert path.read_bytes() == orjson.dumps(result.rest_body()) and size == path.stat().st_size
    blob = os.urandom(3 * CHUNK_BYTES + 5)  # a scan's Arrow IPC rows: written as they are
    assert write_answer(str(tmp_path / "scan"), blob, 1 << 30, Cancel()) == len(blob)
    assert (tmp_path / "scan").read_bytes() == blob


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_a_disk_that_refuses_an_answer_fails_the_query_and_leaves_no_file(tmp_path: Path, kind: str) -> None:
    result = wide_result(3 * CHUNK_ROWS)
    clean = Faults()
    with clean.active():
        write_answer(str(tmp_path / "clean.json"), result, 1 << 30, Cancel())
    writes = clean.calls["write"]
    assert writes >= 2  # (so the first and the last are different writes)
    for at in sorted({1, writes}):
        faults = Faults()
        with faults.active():
            faults.fail_kind("write", kind, at=at)
            with pytest.raises(StorageUnavailable, match="the query's answer could not be written to"):
                write_answer(str(tmp_path / f"{at}.json"), result, 1 << 30, Cancel())
        assert not (tmp_path / f"{at}.json").exists()


def test_an_answer_past_sql_max_bytes_or_cancelled_leaves_no_file(tmp_path: Path) -> None:
    result = wide_result(3 * CHUNK_ROWS)
    with pytest.raises(LimitExceeded, match="sql.max.bytes"):
        write_answer(str(tmp_path / "big.json"), result, 1000, Cancel())
    cancel = Cancel()
    cancel.cancel("the client went away")
    with pytest.raises(QueryCancelled):
        write_answer(str(tmp_path / "gone.json"), result, 1 << 30, cancel)
    assert list(tmp_path.iterdir()) == []


def small_table(gateway: Gateway) -> None:
    sql(gateway, "CREATE DATABASE few")
    sql(gateway, "CREATE TABLE few.t (ts TIMESTAMP, v DOUBLE)")
    sql(gateway, "INSERT INTO few.t VALUES " + " ".join(f"({1_700_000_000_000 + i}, {i}.5)" for i in range(50)))


class FailingFile:
    """An answer file whose first read gives 20 bytes and the next fails with EIO (a disk failing under the relay)."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def read(self, size: int = -1) -> bytes:
        if self._file.tell() == 0:
            return self._file.read(20)
        raise OSError(errno.EIO, "Input/output error")

    def close(self) -> None:
        self._file.close()


def failing_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every spool's file made a :class:`FailingFile`."""
    made = Spool.__init__

    def init(self: Spool, file: BinaryIO, *args: Any) -> None:
        made(self, FailingFile(file), *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Spool, "__init__", init)


def exchange(address: tuple[str, int], request: bytes) -> bytes:
    """What the node sends for ``request`` until it closes the connection (a node that kept it open: a timeout)."""
    with socket.create_connection(address, timeout=60) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_a_read_failing_mid_answer_cuts_the_answer_short_and_closes_the_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    with gateway_thread(tmp_path / "data", sql_workers=1) as gateway:
        small_table(gateway)
        failing_reads(monkeypatch)
        query = b"SELECT * FROM few.t"
        data = exchange(gateway.http_address, b"POST /rest/sql HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(query), query))
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 " not in body  # never a second response inside it
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        assert len(body) == 20 < length  # cut short: the client knows the answer is not whole
        assert any("could not be read from its file" in r.getMessage() for r in caplog.records)
        assert spooled(gateway) == []
        monkeypatch.undo()
        assert sql(gateway, "SELECT COUNT(*) FROM few.t")["data"] == [[50]]  # the node serves on


async def test_a_merging_node_takes_a_part_cut_short_for_no_answer(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """The node asked for a scan part relays it as any answer (Spool.send, under the API's error middleware); its
    read failing mid-part, the merging node (select_here, aiohttp's client) gets a 503 naming it, never the bytes of
    whatever else came within its Content-Length taken for the part."""
    failing_reads(monkeypatch)
    path = tmp_path / "part"
    path.write_bytes(os.urandom(60))

    async def part(request: web.Request) -> web.StreamResponse:
        return await Spool.take(str(path), 60).send(request, ARROW_STREAM)

    app = web.Application(middlewares=[http_api._errors])
    app[http_api._MAX_REQUEST_BYTES] = 1 << 20
    app.router.add_post("/rest/sql", part)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        status, answered = await select_here(2, f"http://127.0.0.1:{port}", "/rest/sql", b"SELECT 1", 1,
                                             Caller("root", "127.0.0.1", "token"), 30, SelectPart(scan=True), PartsBudget(1 << 20))
    finally:
        await runner.cleanup()
    assert status == 503 and isinstance(answered, dict) and "gave no answer" in answered["desc"], answered


WIDE = 2000  # rows of a 5000-character string: an answer of ~10 MB, far more than a connection's buffers hold


def stalled(address: tuple[str, int], query: bytes) -> socket.socket:
    """A client that asked ``query`` and reads none of its answer (the caller may read its first bytes)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the node can send little ahead of us
    s.settimeout(120)
    s.connect(address)
    s.sendall(b"POST /rest/sql HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(query), query))
    return s


def eventually(done: Callable[[], bool], what: str) -> None:
    """Waits (bounded: 60 s) until ``done()``; fails saying ``what`` did not happen."""
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_answers_held_are_bounded_and_a_client_that_stops_reading_is_cut_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "walgate.gateway.answer_spool")
    with gateway_thread(tmp_path / "data", sql_workers=1, sql_max_bytes=16 << 20,
                        sql_answers_max_bytes=16 << 20) as gateway:
        host, port = gateway.http_address
        lines = "\n".join(f'w,t=a s="{i:05000}" {1_700_000_000_000 + i}' for i in range(WIDE))
        request = urllib.request.Request(f"http://{host}:{port}/influxdb/v1/write?db=wide&precision=ms",
                                         data=lines.encode())
        sql(gateway, "CREATE DATABASE wide")
        with urllib.request.urlopen(request, timeout=120) as response:
            assert response.status == 204
        query = b"SELECT * FROM wide.w"
        budget = gateway._queries.answers
        held = stalled((host, port), query)  # its ~10 MB answer held while it is (not) sent
        assert held.recv(4096).startswith(b"HTTP/1.1 200")
        size = budget.used
        assert 8 << 20 < size <= 16 << 20
        with pytest.raises(urllib.error.HTTPError) as refused:  # a second one would pass the 16 MiB
            sql(gateway, query.decode())
        assert refused.value.code == 503
        assert "sql.answers.max.bytes (16777216)" in json.loads(refused.value.read())["desc"]
        assert budget.used == size and len(spooled(gateway)) == 1  # the refused answer's file is gone
        held.close()  # that client goes away: its answer's bytes are given back
        eventually(lambda: budget.used == 0, "the relay never noticed its client was gone")
        assert sql(gateway, query.decode())["rows"] == WIDE  # the retry is answered
        monkeypatch.setattr(answer_spool, "SEND_TIMEOUT_S", 0.5)
        with stalled((host, port), query):  # connected, but reading nothing
            eventually(lambda: any("took no part of its answer" in r.getMessage() for r in caplog.records),
                       "a client that stopped reading was never cut off")
            eventually(lambda: budget.used == 0, "a client cut off held its answer")
        assert spooled(gateway) == []


def test_the_answers_budget_refuses_past_its_limit_and_takes_back_what_is_given() -> None:
    budget = AnswersBudget(100)
    budget.take(60)
    with pytest.raises(StorageUnavailable, match=r"holds 60 bytes .* allows not this one's 41: retry"):
        budget.take(41)
    budget.take(40)
    with pytest.raises(StorageUnavailable, match=r"allows no more: retry"):
        budget.check()  # full: refused before it runs
    budget.give(60)
    budget.check()
    assert budget.used == 40
