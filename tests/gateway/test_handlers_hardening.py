"""Kafka handlers against a real Engine on its storage thread (issue 13: items 4, 5, 7 and "found by reading the code").

Each request is encoded, decoded and dispatched exactly as the server does (``walgate.wire.protocol``), and the
handler's answer must encode: what a client would receive, without the socket.

* Produce into a TDengine topic: records wrong in themselves are INVALID_RECORD with ``record_errors`` and nothing
  of the batch is written, in any vnode; a failing partition does not fail its siblings.
* Fetch / ListOffsets / SHOW SUBSCRIPTIONS over a WAL entry whose bytes were damaged on disk: a gap, never an error.
* OffsetCommit refused by the disk: NOT_COORDINATOR for the partitions of the vnode that refused it (the others are
  committed), the connection stays.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.schema.offset_commit.v8 import request as offset_commit_v8
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.produce.v9 import request as produce_v9

from tests.storage.faults import Faults
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.kafka.handlers import HANDLERS, advertised
from walgate.gateway.kafka.handlers.common import Deferred
from walgate.gateway.kafka.wakeups import FetchWakeups
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.wire import decode_batches, encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import build_response, decode_view, encode_request, encode_response, parse_request_header

DB = "hard"
TS = 1_700_000_000_000


class Node(SimpleNamespace):
    broker: Broker
    engine: Engine
    storage: StorageThread
    data_dir: Path

    async def sql(self, statement: str) -> Any:
        return await self.storage.call(self.engine.execute, statement)

    async def rows(self, source: str = f"{DB}.meters") -> list[list[Any]]:
        return (await self.sql(f"SELECT * FROM {source}")).rows


@asynccontextmanager
async def serving(data_dir: Path, port: int = 9092, cluster: ClusterMember | None = None) -> AsyncIterator[Node]:
    """Node 1's handlers over the engine of ``data_dir`` (``cluster``: a member of a cluster, the engine in cluster
    mode), its Kafka listener advertised on ``port``."""
    storage = StorageThread()
    wakeups = FetchWakeups(asyncio.get_running_loop())
    engine = await storage.call(Engine.open, data_dir, listener=wakeups, node_id=1)
    if cluster is not None:
        await storage.call(engine.cluster_mode)
    groups = GroupService(engine, storage)
    broker = Broker(engine=engine, storage=storage, node_id=1, host="127.0.0.1", port=port, cluster_id="hardening",
                    versions=advertised(), groups=groups, wakeups=wakeups, cluster=cluster)
    try:
        yield Node(broker=broker, engine=engine, storage=storage, data_dir=data_dir)
    finally:
        groups.close()
        await storage.call(engine.close)
        storage.shutdown()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with serving(tmp_path / "data") as served:
        yield served


async def call(node: Node, api_key: int, version: int, request: Any) -> dict[str, Any]:
    """Dispatch ``request`` as the server does and return the handler's answer (after checking it encodes)."""
    frame = encode_request(api_key, version, 7, "hardening-test", request)[4:]
    header = parse_request_header(frame)
    fields = await HANDLERS[api_key].fn(node.broker, RequestContext.of(header), decode_view(header, frame))
    if isinstance(fields, Deferred):  # Produce: the answer awaited after its appends
        fields = await fields.answer
    assert encode_response(header, build_response(api_key, version, fields))
    return fields


def produce_request(topic: str, partitions: dict[int, bytes]) -> Any:
    return produce_v9.ProduceRequest(acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        produce_v9.TopicProduceData(name=topic, partition_data=tuple(
            produce_v9.PartitionProduceData(index=i, records=records) for i, records in partitions.items())),))


async def produce(node: Node, topic: str, partitions: dict[int, bytes]) -> dict[int, dict[str, Any]]:
    fields = await call(node, 0, 9, produce_request(topic, partitions))
    [answer] = fields["responses"]
    return {p["index"]: p for p in answer["partition_responses"]}


def batch(*records: tuple[bytes | None, bytes, list[tuple[str, bytes]]]) -> bytes:
    """One RecordBatch of (key, value, headers) records."""
    return encode_batch(0, [TS + i for i in range(len(records))], [k for k, _, _ in records], [v for _, v, _ in records],
                        [h for _, _, h in records])


def row(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


async def rows_topic(node: Node, vgroups: int = 4) -> None:
    await node.sql(f"CREATE DATABASE {DB} VGROUPS {vgroups}")
    await node.sql(f"CREATE STABLE {DB}.meters (ts TIMESTAMP, current DOUBLE, note VARCHAR(32)) TAGS (location VARCHAR(32))")
    await node.sql(f"CREATE TOPIC meters_in AS STABLE {DB}.meters")


# ----------------------------------------------------------------------------------------------- Produce


async def test_records_wrong_in_themselves_get_record_errors_and_nothing_is_written(node: Node) -> None:
    await rows_topic(node)
    good = [(f"d{i}".encode(), row(current=1.0 + i, location="SF"), []) for i in range(6)]  # over several vnodes
    bad = [
        (b"\xff\xfe", row(current=2.0), []),  # a key that is not UTF-8
        (None, row(tbname=5, current=2.0), []),  # tbname a number, a bool, a list, an object
        (None, row(tbname=True, current=2.0), []),
        (None, row(tbname=["d1"], current=2.0), []),
        (None, row(tbname={"a": 1}, current=2.0), []),
        (b"d9", b"{not json", []),
        (b"d9", b"[1, 2]", []),
    ]
    answers = await produce(node, "meters_in", {0: batch(*good[:3], *bad, *good[3:])})
    assert answers[0]["error_code"] == ErrorCode.invalid_record
    errors = answers[0]["record_errors"]
    assert [e["batch_index"] for e in errors] == list(range(3, 3 + len(bad))), errors
    assert "not UTF-8" in errors[0]["batch_index_error_message"]
    assert all("tbname" in e["batch_index_error_message"] for e in errors[1:5]), errors
    assert answers[0]["error_message"].startswith(f"{len(bad)} records refused; record 3: ")
    assert await node.rows() == []
    assert (await node.sql(f"SHOW {DB}.TABLES")).rows == []

    answers = await produce(node, "meters_in", {0: batch(*good)})  # the good ones alone: written, once
    assert answers[0]["error_code"] == ErrorCode.none
    assert len(await node.rows()) == len(good)


async def test_line_protocol_with_a_bad_precision_header_writes_nothing(node: Node) -> None:
    await rows_topic(node)
    line = b"meters,location=LA current=%d %d"
    answers = await produce(node, "meters_in", {0: batch(
        (None, line % (1, TS), [("precision", b"ms")]),
        (None, line % (2, TS + 1), [("precision", b"\xff\xfe")]),  # not UTF-8
        (None, line % (3, TS + 2), [("precision", b"h")]),  # not a precision
        (None, line % (4, TS + 3), []),  # ns, while the first record says ms
        (None, b"meters,location=LA current=", [("precision", b"ms")]),  # does not parse
    )})
    assert answers[0]["error_code"] == ErrorCode.invalid_record
    assert [e["batch_index"] for e in answers[0]["record_errors"]] == [1, 2, 3], answers
    assert await node.rows() == []
    answers = await produce(node, "meters_in", {0: batch(
        (None, line % (1, TS), [("precision", b"ms")]),
        (None, b"meters,location=LA current=", [("precision", b"ms")]),
    )})
    assert [e["batch_index"] for e in answers[0]["record_errors"]] == [1], answers
    assert "current=" in answers[0]["record_errors"][0]["batch_index_error_message"]
    assert await node.rows() == []


async def test_rows_that_do_not_fit_the_schema_are_refused_whole(node: Node) -> None:
    await rows_topic(node)
    answers = await produce(node, "meters_in", {0: batch((b"d1", row(current=1.0), []), (b"d2", row(current="x"), []))})
    assert answers[0]["error_code"] == ErrorCode.invalid_record
    assert "record 1 (d2)" in answers[0]["error_message"], answers
    assert await node.rows() == []


async def test_a_partition_the_disk_refuses_does_not_fail_its_siblings(node: Node) -> None:
    await node.broker.call(lambda engine: engine.create_kafka_topic("two", 2, {}))
    one = batch((b"k", b"v", []))
    faults = Faults()
    with faults.active():
        assert (await produce(node, "two", {0: one}))[0]["error_code"] == ErrorCode.none
        writes = faults.calls["write"]  # what one partition's append writes
        assert writes, "the WAL must write through walgate.storage.fileio"
        faults.fail("write", at=writes + 1)  # partition 1's first write
        answers = await produce(node, "two", {0: one, 1: one})
    assert answers[0]["error_code"] == ErrorCode.none and answers[0]["base_offset"] == 1
    assert answers[1]["error_code"] == ErrorCode.kafka_storage_error, answers
    answers = await produce(node, "two", {1: one})  # the disk has room again: the same partition takes it
    assert answers[1]["error_code"] == ErrorCode.none and answers[1]["base_offset"] == 0


# ---------------------------------------------------------------------------------------------- lost data


async def insert_entries(node: Node, notes: list[str]) -> None:
    """One INSERT (one WAL data entry of 2 rows) per note, into one subtable (one vnode: partition 0)."""
    await rows_topic(node, vgroups=1)
    await node.sql(f"CREATE TABLE {DB}.d1 USING {DB}.meters TAGS ('SF')")
    for k, note in enumerate(notes):
        await node.sql(f"INSERT INTO {DB}.d1 VALUES ({TS + 10 * k}, {k}.0, '{note}') ({TS + 10 * k + 1}, {k}.5, '{note}')")


def damage(data_dir: Path, marker: bytes) -> None:
    """Flip one byte of the only WAL entry holding ``marker`` (found by content: no WAL internals)."""
    hits = [(p, p.read_bytes().find(marker)) for p in data_dir.rglob("*.log")]
    [(path, at)] = [(p, at) for p, at in hits if at >= 0]
    with path.open("r+b") as f:
        f.seek(at)
        f.write(bytes([marker[0] ^ 0xFF]))


async def fetch(node: Node, offset: int) -> dict[str, Any]:
    request = fetch_v12.FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, topics=(fetch_v12.FetchTopic(
        topic="meters_in", partitions=(fetch_v12.FetchPartition(partition=0, fetch_offset=offset,
                                                                 partition_max_bytes=1 << 20),)),),
                                     forgotten_topics_data=())
    [topic] = (await call(node, 1, 12, request))["responses"]
    [partition] = topic["partitions"]
    return partition


def read(partition: dict[str, Any]) -> tuple[list[tuple[int, str]], int]:
    """(offset, note) of the data records, and the offset a client fetches next (after the last batch)."""
    got, next_offset = [], -1
    for b in decode_batches(b"".join(partition["records"]), with_records=True):
        next_offset = b.base_offset + b.last_offset_delta + 1
        if not b.is_control:
            got += [(r.offset, json.loads(r.value)["note"]) for r in b.records]
    return got, next_offset


async def test_fetch_serves_lost_entries_as_a_gap_consumers_move_past(node: Node) -> None:
    await insert_entries(node, ["intact-0", "lost-111", "intact-2", "lost-333"])
    damage(node.data_dir, b"lost-111")
    damage(node.data_dir, b"lost-333")  # the last entry: nothing after it to skip to
    partition = await fetch(node, 0)
    assert partition["error_code"] == ErrorCode.none and partition["high_watermark"] == 8
    got, next_offset = read(partition)
    assert got == [(0, "intact-0"), (1, "intact-0"), (4, "intact-2"), (5, "intact-2")]
    assert next_offset == 8  # the client's position passes the lost tail too
    controls = [b for b in decode_batches(b"".join(partition["records"]), with_records=True) if b.is_control]
    assert [(b.base_offset, b.last_offset_delta) for b in controls] == [(2, 1), (6, 1)]
    got, next_offset = read(await fetch(node, 3))  # a fetch inside the lost range
    assert got == [(4, "intact-2"), (5, "intact-2")] and next_offset == 8


async def test_list_offsets_by_timestamp_skips_lost_entries(node: Node) -> None:
    await insert_entries(node, ["intact-0", "lost-111", "intact-2"])
    damage(node.data_dir, b"lost-111")
    request = list_offsets_v7.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        list_offsets_v7.ListOffsetsTopic(name="meters_in", partitions=tuple(
            list_offsets_v7.ListOffsetsPartition(partition_index=0, timestamp=ts) for ts in (TS + 10, TS + 1, -3))),))
    [topic] = (await call(node, 2, 7, request))["topics"]
    answers = [(p["error_code"], p["offset"], p["timestamp"]) for p in topic["partitions"]]
    assert answers == [(ErrorCode.none, 4, TS + 20), (ErrorCode.none, 1, TS + 1), (ErrorCode.none, 5, TS + 21)]


async def test_show_subscriptions_with_a_committed_offset_in_lost_data(node: Node) -> None:
    await insert_entries(node, ["intact-0", "lost-111", "intact-2"])
    damage(node.data_dir, b"lost-111")
    await node.storage.call(node.engine.commit_offsets, "g1", [("meters_in", 0, 2, -1, "")], TS)
    rows = (await node.sql("SHOW SUBSCRIPTIONS")).rows
    assert [r for r in rows if r[1] == "g1"] == [["meters_in", "g1", 0, None, 2, None, 4]]


# ------------------------------------------------------------------------------------------- OffsetCommit


def commit_request(offsets: dict[int, int]) -> Any:
    return offset_commit_v8.OffsetCommitRequest(group_id="g", member_id="", topics=(
        offset_commit_v8.OffsetCommitRequestTopic(name="meters_in", partitions=tuple(
            offset_commit_v8.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset,
                                                          committed_metadata="")
            for p, offset in offsets.items())),))


async def committed(node: Node) -> dict[int, int]:
    """Group g's committed offsets of meters_in as OffsetFetch answers them."""
    request = offset_fetch_v8.OffsetFetchRequest(require_stable=False, groups=(offset_fetch_v8.OffsetFetchRequestGroup(
        group_id="g", topics=(offset_fetch_v8.OffsetFetchRequestTopics(name="meters_in", partition_indexes=(0, 1)),)),))
    [group] = (await call(node, 9, 8, request))["groups"]
    assert group["error_code"] == ErrorCode.none
    return {p["partition_index"]: p["committed_offset"] for t in group["topics"] for p in t["partitions"]}


async def test_offset_commit_the_disk_refuses_is_not_coordinator(node: Node) -> None:
    await rows_topic(node, vgroups=2)
    request = commit_request({0: 0, 1: 0})
    faults = Faults()
    with faults.active():
        faults.fail("write", at=1, times=2)
        [topic] = (await call(node, 8, 8, request))["topics"]
    assert [p["error_code"] for p in topic["partitions"]] == [ErrorCode.not_coordinator] * 2
    [topic] = (await call(node, 8, 8, request))["topics"]  # room again: committed
    assert [p["error_code"] for p in topic["partitions"]] == [ErrorCode.none] * 2


async def test_offset_commit_refused_by_the_disk_fails_the_groups_partitions_and_a_retry_commits(node: Node) -> None:
    """A group's offsets are one write to its coordinator partition (issue 23): the disk refusing it fails every
    partition of the request with a retriable error; the client's retry commits them."""
    await rows_topic(node, vgroups=2)
    faults = Faults()
    with faults.active():
        [topic] = (await call(node, 8, 8, commit_request({0: 5})))["topics"]
        assert topic["partitions"][0]["error_code"] == ErrorCode.none
        assert faults.calls["write"] == 1, "a group's commit is one write, through walgate.storage.fileio"
        faults.fail("write")
        [topic] = (await call(node, 8, 8, commit_request({0: 7, 1: 7})))["topics"]
    assert [(p["partition_index"], p["error_code"]) for p in topic["partitions"]] == [
        (0, ErrorCode.not_coordinator), (1, ErrorCode.not_coordinator)]
    assert await committed(node) == {0: 5, 1: -1}
    [topic] = (await call(node, 8, 8, commit_request({0: 7, 1: 7})))["topics"]  # the client's retry
    assert [p["error_code"] for p in topic["partitions"]] == [ErrorCode.none] * 2
    assert await committed(node) == {0: 7, 1: 7}
