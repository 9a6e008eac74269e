"""Group commit in a real gateway (issue 15): one fdatasync answers every write that arrived while the previous one
ran, the storage thread answers reads while an fdatasync is slow, and a failed fdatasync refuses exactly the writes
it covered, whose records are never served while they are not durable.

The WAL's fdatasyncs are held at a gate (``walgate.storage.fileio``'s ``os``, replaced as ``tests/storage/faults.py``
does): a test knows when one has started and releases it, optionally failing it, so every assertion is about the
order of events, never about time.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes, sql
from kio.schema.errors import ErrorCode

from walgate.gateway.kafka.handlers import advertised
from walgate.gateway.server import Gateway
from walgate.storage import fileio

WAIT = 30.0  # seconds a step may take before the test fails instead of hanging


class Gate:
    """Stands in for ``fileio.os``: counts the fdatasyncs of WAL segments (and fsyncs of the coordinator log); while
    ``held`` (a count), the next ones wait for :meth:`release` before running (``fail``: raise EIO instead)."""

    def __init__(self) -> None:
        self.synced: list[str] = []  # the WAL segment of each fdatasync begun
        self.held = 0
        self.waiting = threading.Semaphore(0)  # released once per fdatasync waiting at the gate
        self._open = threading.Semaphore(0)
        self._fail: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def fdatasync(self, fd: int) -> None:
        self._gate(fd, "/wal/")
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._gate(fd, "/coordinator/offsets-")
        os.fsync(fd)

    def _gate(self, fd: int, what: str) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if what in path:
            self.synced.append(path)
            if self.held:
                self.held -= 1
                self.waiting.release()
                assert self._open.acquire(timeout=WAIT), "the gate was never released"
                if self._fail.pop(0):
                    raise OSError(errno.EIO, "injected EIO")

    def hold(self, count: int = 1) -> None:
        self.held += count

    def started(self) -> None:
        """Return once an fdatasync waits at the gate."""
        assert self.waiting.acquire(timeout=WAIT), "no fdatasync reached the gate"

    def release(self, *, fail: bool = False) -> None:
        self._fail.append(fail)
        self._open.release()


@pytest.fixture()
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    gate = Gate()
    monkeypatch.setattr(fileio, "os", gate)
    return gate


@pytest.fixture()
def node(tmp_path: Path) -> Iterator[Gateway]:
    with gateway_thread(tmp_path / "data") as gateway:
        for statement in ("CREATE DATABASE gc VGROUPS 1 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0",
                          "CREATE STABLE gc.st (ts TIMESTAMP, v INT) TAGS (k INT)",
                          "CREATE TABLE gc.t USING gc.st TAGS (1)",
                          "CREATE TOPIC gct AS STABLE gc.st"):
            sql(gateway, statement)
        yield gateway


def newest(api_key: int, values: dict[str, Any]) -> Any:
    return build(kio_classes(api_key, advertised()[api_key][1])[0], values)


def insert(node: Gateway, v: int) -> int:
    """INSERT one row over HTTP; the status."""
    host, port = node.http_address
    request = urllib.request.Request(f"http://{host}:{port}/rest/sql", data=f"INSERT INTO gc.t VALUES ({1_700_000_000_000 + v}, {v})".encode())
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return response.status  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        return exc.code


class Inserting(threading.Thread):
    def __init__(self, node: Gateway, v: int) -> None:
        super().__init__(daemon=True)
        self.node, self.v, self.status = node, v, 0
        self.start()

    def run(self) -> None:
        self.status = insert(self.node, self.v)

    def result(self) -> int:
        self.join(WAIT)
        assert not self.is_alive(), f"INSERT {self.v} was never answered"
        return self.status


def rows(node: Gateway) -> int:
    """Rows appended, durable or not: the WAL's versions but the first, CREATE TABLE's (read off the storage thread:
    a counter that only grows; a SELECT answers only what is durable, as a Fetch does)."""
    assert node._engine is not None
    return node._engine.vnodes["gc"][0].wal.next_version - 1


def wait_rows(node: Gateway, count: int) -> None:
    for _ in range(int(WAIT * 100)):
        if rows(node) >= count:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"fewer than {count} rows were ever appended")


def fetch(node: Gateway) -> tuple[int, bytes]:
    """(high watermark, records) of the topic's partition 0, from offset 0, without waiting."""
    with KafkaConnection(node.kafka_address) as conn:
        [described] = conn.request(newest(3, {"topics": [{"name": "gct"}]})).topics
        response = conn.request(newest(1, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "replica_id": -1,
                                           "topics": [{"topic": "gct", "topic_id": described.topic_id, "partitions": [
                                               {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                                "current_leader_epoch": -1, "log_start_offset": -1,
                                                "last_fetched_epoch": -1}]}]}))
    [partition] = response.responses[0].partitions
    assert partition.error_code == ErrorCode.none
    return partition.high_watermark, bytes(partition.records or b"")


def test_one_fdatasync_answers_every_insert_that_arrived_while_the_previous_ran(node: Gateway, gate: Gate) -> None:
    gate.hold()
    first = Inserting(node, 1)
    gate.started()  # the first INSERT's fdatasync runs (held)
    others = [Inserting(node, v) for v in range(2, 10)]
    wait_rows(node, 9)  # every INSERT is appended while the fdatasync is held
    before = len(gate.synced)
    gate.release()
    assert first.result() == 200
    assert [t.result() for t in others] == [200] * 8
    assert len(gate.synced) == before + 1, f"{len(gate.synced) - before} fdatasyncs for 8 waiting INSERTs"
    assert fetch(node)[0] == 9


def test_fetch_and_metadata_are_answered_while_an_fdatasync_is_held(node: Gateway, gate: Gate) -> None:
    gate.hold()
    first = Inserting(node, 1)
    gate.started()
    with KafkaConnection(node.kafka_address) as conn:
        metadata = conn.request(newest(3, {"topics": [{"name": "gct"}]}))
    assert metadata.topics[0].error_code == ErrorCode.none
    high, records = fetch(node)
    assert (high, records) == (0, b""), "a record was served before it was durable"
    assert sql(node, "SELECT count(*) FROM gc.t")["data"] == [[0]], "a query read a row before it was durable"
    assert first.is_alive(), "the INSERT was answered before its fdatasync ran"
    gate.release()
    assert first.result() == 200
    assert fetch(node)[0] == 1


def test_a_failed_fdatasync_refuses_exactly_the_inserts_it_covered(node: Gateway, gate: Gate) -> None:
    gate.hold(2)
    covered = Inserting(node, 1)
    gate.started()  # its fdatasync covers row 1 only
    later = Inserting(node, 2)
    wait_rows(node, 2)
    gate.release(fail=True)
    assert covered.result() == 503, "an INSERT whose fdatasync failed was acknowledged"
    gate.started()  # the next sync (row 2, and row 1 rewritten: fsyncgate) is held
    assert later.is_alive()
    assert fetch(node) == (0, b""), "records were served while not durable"
    gate.release()
    assert later.result() == 200
    assert fetch(node)[0] == 2  # the refused row was rewritten and synced with the next one (see wal.py)


def offset_commit(node: Gateway, offset: int) -> int:
    """Group g commits ``offset`` for the topic's partition 0; the partition's error code."""
    with KafkaConnection(node.kafka_address) as conn:
        response = conn.request(newest(8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                           "topics": [{"name": "gct", "partitions": [
                                               {"partition_index": 0, "committed_offset": offset,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}]}))
    return int(response.topics[0].partitions[0].error_code)


def offset_fetched(node: Gateway) -> int:
    with KafkaConnection(node.kafka_address) as conn:
        response = conn.request(newest(9, {"require_stable": False, "groups": [
            {"group_id": "g", "topics": [{"name": "gct", "partition_indexes": [0]}]}]}))
    return int(response.groups[0].topics[0].partitions[0].committed_offset)


class Committing(threading.Thread):
    def __init__(self, node: Gateway, offset: int) -> None:
        super().__init__(daemon=True)
        self.node, self.offset, self.error = node, offset, -1
        self.start()

    def run(self) -> None:
        self.error = offset_commit(self.node, self.offset)

    def result(self) -> int:
        self.join(WAIT)
        assert not self.is_alive(), f"OffsetCommit {self.offset} was never answered"
        return self.error


def test_an_offset_commit_is_answered_after_its_fsync_and_a_failed_one_is_never_seen(node: Gateway,
                                                                                    gate: Gate) -> None:
    assert offset_commit(node, 3) == ErrorCode.none
    gate.hold()
    refused = Committing(node, 5)
    gate.started()
    assert offset_fetched(node) == 3, "a commit was seen before it was durable"
    assert refused.is_alive()
    gate.release(fail=True)
    assert refused.result() == ErrorCode.not_coordinator
    assert offset_fetched(node) == 3, "a refused commit is seen"
    assert offset_commit(node, 7) == ErrorCode.none
    assert offset_fetched(node) == 7


def run_sql(node: Gateway, statement: str) -> int:
    """``POST /rest/sql``; the status."""
    host, port = node.http_address
    request = urllib.request.Request(f"http://{host}:{port}/rest/sql", data=statement.encode())
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return response.status  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_coordinator_lane_syncs_its_own_log_and_a_failed_sync_refuses_only_the_commit(node: Gateway,
                                                                                          gate: Gate) -> None:
    """Issue 23: the coordinator lane takes its own notes; a held coordinator-log fsync holds the commit only (an
    INSERT on the storage lane is answered meanwhile), and its failure refuses the commit, not the INSERT."""
    assert offset_commit(node, 3) == ErrorCode.none
    gate.hold()
    refused = Committing(node, 5)
    gate.started()
    assert Inserting(node, 1).result() == 200
    assert refused.is_alive(), "the commit was answered before its fsync ran"
    gate.release(fail=True)
    assert refused.result() == ErrorCode.not_coordinator
    assert offset_fetched(node) == 3


def test_drop_consumer_group_answers_once_the_coordinator_lane_synced_and_a_failed_sync_is_an_error(
        node: Gateway, gate: Gate) -> None:
    """Issue 23: DROP CONSUMER GROUP runs on the storage lane and deletes on the coordinator lane; its answer waits
    for the coordinator log's fsync, and a failed one is answered as an error (the offsets stay), never as done."""
    assert offset_commit(node, 3) == ErrorCode.none
    gate.hold()
    dropping = concurrent.futures.ThreadPoolExecutor(1)
    try:
        answer = dropping.submit(run_sql, node, "DROP CONSUMER GROUP g ON gct")
        gate.started()
        assert not answer.done(), "DROP CONSUMER GROUP was answered before its deletion was durable"
        gate.release(fail=True)
        assert answer.result(WAIT) == 503
    finally:
        dropping.shutdown()
    assert offset_fetched(node) == 3, "a deletion whose fsync failed is seen"
    assert run_sql(node, "DROP CONSUMER GROUP g ON gct") == 200
    assert offset_fetched(node) == -1
