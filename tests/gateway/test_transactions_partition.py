"""Transactions at the partition's Kafka face (handlers over a real Engine, dispatched as the server does): Fetch
read_committed stops at the last stable offset and answers the aborted transactions, a read_committed long-poll is
woken by the marker that moves it, ListOffsets answers the last stable offset under read_committed, Produce checks
transactional batches with the coordinator's verification first, DescribeProducers lists a partition's producers.

Until the coordinator (``broker.transactions``) is merged in, the verification is a small recording object here;
the markers are written by the engine call the coordinator makes."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway_helpers import build, kio_classes

from tests.gateway.test_handlers_hardening import Node, call, node, rows_topic  # noqa: F401 - node: the fixture
from walgate.security.authorizer import Authorizer
from walgate.storage.errors import StorageUnavailable
from walgate.wire import decode_batches, encode_batch
from walgate.wire.errors import ErrorCode

TOPIC = "tx"


def txn(pid: int, seq: int, n: int = 2, epoch: int = 0, ts: int = 1000, transactional: bool = True) -> bytes:
    return encode_batch(0, [ts + i for i in range(n)], [None] * n, [b"%d-%d" % (pid, seq + i) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


async def setup(gw: Node) -> None:
    """0-1: producer 7 (aborted, marker at 5); 2: a plain record; 3-4: producer 8 (open)."""
    e = gw.engine
    await gw.storage.call(e.create_kafka_topic, TOPIC, 1, {})
    await gw.storage.call(e.append_batches, TOPIC, 0, [txn(7, 0)])
    await gw.storage.call(e.append_batches, TOPIC, 0, [encode_batch(0, [1], [None], [b"plain"])])
    await gw.storage.call(e.append_batches, TOPIC, 0, [txn(8, 0)])
    assert await gw.storage.call(e.write_txn_markers, 7, 0, 0, False, [(TOPIC, 0)]) == [None]


async def fetch(gw: Node, offset: int, isolation: int, max_wait: int = 0) -> dict[str, Any]:
    request = build(kio_classes(1, 12)[0], {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1}]}]})
    [topic] = (await call(gw, 1, 12, request))["responses"]
    [part] = topic["partitions"]
    return part


def offsets(part: dict[str, Any]) -> list[int]:
    return [b.base_offset for b in decode_batches(b"".join(bytes(x) for x in part["records"] or []))]


async def test_read_committed_stops_at_the_last_stable_offset_and_answers_the_aborted(node: Node) -> None:  # noqa: F811 - the fixture
    await setup(node)
    committed = await fetch(node, 0, 1)
    assert (committed["high_watermark"], committed["last_stable_offset"]) == (6, 3)
    assert offsets(committed) == [0, 2]
    assert committed["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]
    uncommitted = await fetch(node, 0, 0)
    assert offsets(uncommitted) == [0, 2, 3, 5]
    assert uncommitted["last_stable_offset"] == 3 and uncommitted["aborted_transactions"] is None
    at_lso = await fetch(node, 3, 1)
    assert (offsets(at_lso), at_lso["aborted_transactions"], at_lso["error_code"]) == ([], [], ErrorCode.none)
    assert offsets(await fetch(node, 2, 1)) == [2]
    assert (await fetch(node, 2, 1))["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]  # marker at 5


async def test_a_read_committed_long_poll_is_woken_by_the_marker_that_moves_the_lso(node: Node) -> None:  # noqa: F811 - the fixture
    await setup(node)
    waiting = asyncio.create_task(fetch(node, 3, 1, max_wait=60_000))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await node.storage.call(node.engine.write_txn_markers, 8, 0, 0, True, [(TOPIC, 0)])
    part = await asyncio.wait_for(waiting, 30)  # far below its max wait: woken, not timed out
    assert part["last_stable_offset"] == 7 and offsets(part) == [3, 5, 6]
    assert part["aborted_transactions"] == [{"producer_id": 7, "first_offset": 0}]


async def test_list_offsets_latest_is_the_lso_under_read_committed(node: Node) -> None:  # noqa: F811 - the fixture
    await setup(node)

    async def latest(isolation: int, timestamp: int = -1) -> tuple[int, int]:
        request = build(kio_classes(2, 7)[0], {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": timestamp, "current_leader_epoch": -1}]}]})
        [part] = (await call(node, 2, 7, request))["topics"][0]["partitions"]
        return part["offset"], part["timestamp"]

    assert (await latest(0))[0] == 6 and (await latest(1))[0] == 3
    assert await latest(0, 1000) == (0, 1000)  # producer 7's record is below the LSO
    assert await latest(1, 1001) == (1, 1001)
    assert (await latest(0, 1002))[0] == 5  # the marker, stamped when written
    assert await latest(1, 1002) == (-1, -1)  # nothing from 1002 on below the LSO


class Verifier:
    """The coordinator's answer to ``verify``, per partition (default NONE; an exception for any partition asked is
    raised for the whole question, as the coordinator lane raises it); the calls it got, one per Produce."""

    def __init__(self, codes: dict[tuple[str, int], int | Exception] | None = None) -> None:
        self.codes = codes or {}
        self.calls: list[tuple[str | None, int, int, list[tuple[str, int]]]] = []

    async def verify(self, tid: str | None, pid: int, epoch: int, partitions: list[tuple[str, int]],
                     api_version: int) -> dict[tuple[str, int], int]:
        assert api_version == 9  # what :func:`produce` sends
        self.calls.append((tid, pid, epoch, sorted(partitions)))
        codes = {tp: self.codes.get(tp, ErrorCode.none) for tp in partitions}
        for code in codes.values():
            if isinstance(code, Exception):
                raise code
        return {tp: int(code) for tp, code in codes.items() if not isinstance(code, Exception)}


async def produce(gw: Node, tid: str | None, topic: str, partitions: dict[int, bytes]) -> dict[int, Any]:
    request = build(kio_classes(0, 9)[0], {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": i, "records": r} for i, r in partitions.items()]}]})
    [answer] = (await call(gw, 0, 9, request))["responses"]
    return {p["index"]: (p["error_code"], p["base_offset"]) for p in answer["partition_responses"]}


async def test_transactional_produce_is_verified_by_the_coordinator(node: Node) -> None:  # noqa: F811 - the fixture
    await node.storage.call(node.engine.create_kafka_topic, TOPIC, 3, {})
    assert await produce(node, "app", TOPIC, {0: txn(7, 0)}) == {0: (ErrorCode.invalid_txn_state, -1)}  # none here
    node.broker.transactions = verifier = Verifier({(TOPIC, 1): ErrorCode.invalid_txn_state,
                                                    (TOPIC, 2): ErrorCode.concurrent_transactions})
    answers = await produce(node, "app", TOPIC, {0: txn(7, 0), 1: txn(7, 0), 2: txn(7, 0)})
    assert answers == {0: (ErrorCode.none, 0), 1: (ErrorCode.invalid_txn_state, -1),
                       2: (ErrorCode.not_enough_replicas, -1)}
    assert verifier.calls == [("app", 7, 0, [(TOPIC, p) for p in range(3)])]  # one question for all, as Kafka's
    assert await node.storage.call(node.engine.ongoing_transactions) == {7: [(TOPIC, 0, 0)]}
    assert await produce(node, None, TOPIC, {1: txn(7, 0)}) == {1: (ErrorCode.transactional_id_authorization_failed, -1)}
    assert await produce(node, "app", TOPIC, {0: txn(7, 2), 1: txn(9, 0)}) == {
        0: (ErrorCode.invalid_producer_id_mapping, -1), 1: (ErrorCode.invalid_producer_id_mapping, -1)}
    assert await produce(node, "app", TOPIC, {0: txn(7, 2, transactional=False)}) == {0: (ErrorCode.invalid_txn_state, -1)}
    await node.storage.call(node.engine.write_txn_markers, 7, 1, 0, False, [(TOPIC, 0)])  # fenced by an epoch bump
    assert await produce(node, "app", TOPIC, {0: txn(7, 2)}) == {0: (ErrorCode.invalid_producer_epoch, -1)}
    assert await produce(node, "app", TOPIC, {0: txn(7, 0, epoch=1)}) == {0: (ErrorCode.none, 3)}
    verifier.codes[(TOPIC, 1)] = StorageUnavailable("the transaction log refused a write")
    assert await produce(node, "app", TOPIC, {0: txn(7, 2, epoch=1), 1: txn(7, 0, epoch=1)}) == {
        0: (ErrorCode.kafka_storage_error, -1), 1: (ErrorCode.kafka_storage_error, -1)}  # the question failed: each
    assert await produce(node, "app", TOPIC, {0: txn(7, 2, epoch=1)}) == {0: (ErrorCode.none, 5)}  # partition's
    calls = len(verifier.calls)
    assert await produce(node, None, TOPIC, {1: encode_batch(0, [1], [None], [b"x"])}) == {1: (ErrorCode.none, 0)}
    assert len(verifier.calls) == calls  # a non-transactional request is not verified


async def test_a_tdengine_topic_takes_no_transactional_batch(node: Node) -> None:  # noqa: F811 - the fixture
    await rows_topic(node, 1)
    node.broker.transactions = Verifier()
    row = b'{"tbname": "d1", "current": 1.5, "location": "SF"}'
    batch = encode_batch(0, [1000], [None], [row], producer_id=7, producer_epoch=0, base_sequence=0,
                         is_transactional=True)
    assert await produce(node, "app", "meters_in", {0: batch}) == {0: (ErrorCode.unsupported_for_message_format, -1)}
    assert (await node.sql("SELECT COUNT(*) FROM hard.meters")).rows in ([], [[0]])


async def test_describe_producers_lists_a_partitions_producers(node: Node) -> None:  # noqa: F811 - the fixture
    await setup(node)
    request = build(kio_classes(61, 0)[0], {"topics": [{"name": TOPIC, "partition_indexes": [0, 4]},
                                                       {"name": "missing", "partition_indexes": [0]},
                                                       {"name": "bad/name", "partition_indexes": [0]}]})
    topics = (await call(node, 61, 0, request))["topics"]
    [p0, p4] = topics[0]["partitions"]
    assert p0["error_code"] == ErrorCode.none and p0["active_producers"] == [
        {"producer_id": 7, "producer_epoch": 0, "last_sequence": 1, "last_timestamp": p0["active_producers"][0][
            "last_timestamp"], "coordinator_epoch": 0, "current_txn_start_offset": -1},
        {"producer_id": 8, "producer_epoch": 0, "last_sequence": 1, "last_timestamp": 1001, "coordinator_epoch": -1,
         "current_txn_start_offset": 3}]
    assert p4["error_code"] == ErrorCode.unknown_topic_or_partition
    assert topics[1]["partitions"][0]["error_code"] == ErrorCode.unknown_topic_or_partition
    assert topics[2]["partitions"][0]["error_code"] == ErrorCode.invalid_topic_exception


async def test_describe_producers_needs_read_on_the_topic(node: Node) -> None:  # noqa: F811 - the fixture
    await setup(node)
    node.broker.authorizer = Authorizer(node.engine.catalog.acls)  # no ACL: nothing is allowed
    request = build(kio_classes(61, 0)[0], {"topics": [{"name": TOPIC, "partition_indexes": [0]},
                                                       {"name": "bad/name", "partition_indexes": [0]}]})
    topics = (await call(node, 61, 0, request))["topics"]
    assert [t["partitions"][0]["error_code"] for t in topics] == [ErrorCode.topic_authorization_failed,
                                                                  ErrorCode.invalid_topic_exception]
    assert topics[0]["partitions"][0]["active_producers"] == []
