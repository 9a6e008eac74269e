"""A connection's sequence gaps (walgate/gateway/kafka/produce_gaps.py): an idempotent producer's batch refused before
its append, and the batches of that producer and partition pipelined after it on the connection.

The rule's own cases first; then a real gateway and one connection: the WAL's next write refused once (ENOSPC, on a
hook of ``walgate.storage.fileio.os``, as the fault tests do), two pipelined requests of sequences 1 and 2 (the disk
well again when the second is checked). The second must be refused as the first was, never OUT_OF_ORDER_SEQUENCE_
NUMBER, which makes librdkafka bump its epoch and send its unacknowledged batches again under new numbers (what CI's
duplicate of 2026-12-02 fits); sent again in order, both are appended once. Last, librdkafka itself (confluent-kafka,
idempotent, five requests in flight) meeting such a refusal: it retries in order and never bumps its epoch (its own
``eos`` debug log says when it does).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import struct
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway.gateway_helpers import gateway_thread, produce_v9, read_frame
from tests.gateway.test_cleaner_lane import consume
from walgate.gateway.config import Config
from walgate.gateway.kafka.handlers.produce import _beyond_gaps
from walgate.gateway.kafka.produce_gaps import IN_FLIGHT_AFTER, Gap, ProduceGaps
from walgate.gateway.server import Gateway
from walgate.storage import fileio
from walgate.wire import batch_header, encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ProduceRequest,
    ProduceRequestPartitionProduceData,
    ProduceRequestTopicProduceData,
)

TOPIC = "gaps"
PRODUCER, EPOCH = 4242, 0
BOUND_S = 20.0  # (bounds the waits only)
WAL_SEGMENT = re.compile(r"/\d{20}\.log$")


def batch(seq: int, producer_id: int = PRODUCER, epoch: int = EPOCH, value: bytes | None = None) -> bytes:
    return encode_batch(0, [1_700_000_000_000], [b"k"], [value or b"v%d" % seq], [[]], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=seq)


# ----------------------------------------------------------------------------------------------- the rule


def test_a_batch_after_a_refused_one_is_refused_alike_until_the_refused_one_comes_again() -> None:
    gaps = ProduceGaps()
    gaps.refused("t", 0, batch(5), ErrorCode.not_enough_replicas)
    gap = Gap(PRODUCER, EPOCH, 5, ErrorCode.not_enough_replicas)
    assert gaps.beyond("t", 0, batch(6)) == gap and gaps.beyond("t", 0, batch(9)) == gap
    assert gaps.beyond("t", 1, batch(6)) is None  # (another partition)
    assert gaps.beyond("t", 0, batch(4)) is None  # a retry of an earlier batch: checked as usual, the gap kept
    assert gaps.beyond("t", 0, batch(5)) is None  # the refused batch again: the gap ends
    assert gaps.beyond("t", 0, batch(6)) is None


def test_a_gap_is_the_earliest_refused_batch_and_ends_with_another_producer_or_epoch() -> None:
    gaps = ProduceGaps()
    gaps.refused("t", 0, batch(7), ErrorCode.not_leader_or_follower)
    gaps.refused("t", 0, batch(8), ErrorCode.not_enough_replicas)  # (one beyond the gap, refused alike)
    gaps.refused("t", 0, batch(6), ErrorCode.kafka_storage_error)
    assert gaps.beyond("t", 0, batch(7)) == Gap(PRODUCER, EPOCH, 6, ErrorCode.kafka_storage_error)
    assert gaps.beyond("t", 0, batch(0, epoch=EPOCH + 1)) is None  # a bumped epoch starts afresh
    assert gaps.beyond("t", 0, batch(7)) is None
    gaps.refused("t", 0, batch(3), ErrorCode.not_enough_replicas)
    assert gaps.beyond("t", 0, batch(4, producer_id=PRODUCER + 1)) is None
    assert gaps.beyond("t", 0, batch(4)) is None


def test_a_gap_holds_back_only_the_batches_a_client_can_have_in_flight_after_the_refused_one() -> None:
    """Five requests in flight at most: a sixth batch beyond the gap means the client gave the refused one up; it is
    checked as usual (the sequence check answers it, as Kafka's would), the gap forgotten."""
    gaps = ProduceGaps()
    gaps.refused("t", 0, batch(10), ErrorCode.not_enough_replicas)
    for seq in range(11, 11 + IN_FLIGHT_AFTER):
        assert gaps.beyond("t", 0, batch(seq)) is not None
        gaps.refused("t", 0, batch(seq), ErrorCode.not_enough_replicas)  # (its refusal keeps the gap as it is)
    assert gaps.beyond("t", 0, batch(11)) is None
    assert gaps.beyond("t", 0, batch(12)) is None


def test_only_refusals_before_the_append_of_an_idempotent_producer_leave_a_gap() -> None:
    gaps = ProduceGaps()
    gaps.refused("t", 0, batch(1), ErrorCode.not_enough_replicas_after_append)  # (appended: its retry is a duplicate)
    gaps.refused("t", 0, batch(1), ErrorCode.invalid_record)  # (never retried)
    gaps.refused("t", 0, batch(1, producer_id=-1, epoch=-1), ErrorCode.not_enough_replicas)  # (no sequences)
    gaps.refused("t", 0, b"\x00" * 10, ErrorCode.not_enough_replicas)  # (no whole header: validation answers it)
    assert gaps.beyond("t", 0, batch(2)) is None


def test_the_answers_beyond_a_gap_name_the_leader_its_refusal_named() -> None:
    """KIP-951: a batch beyond a NOT_LEADER_OR_FOLLOWER gap is answered with the current leader the refusal named, so
    the client goes to it without a Metadata round trip."""
    gaps = ProduceGaps()
    gaps.refused("t", 0, batch(5), ErrorCode.not_leader_or_follower, (2, 7))
    assert gaps.beyond("t", 0, batch(6)) == Gap(PRODUCER, EPOCH, 5, ErrorCode.not_leader_or_follower, (2, 7))
    request = ProduceRequest(acks=-1, topic_data=(ProduceRequestTopicProduceData(name="t", partition_data=(
        ProduceRequestPartitionProduceData(index=0, records=batch(7)),)),))
    [answer] = _beyond_gaps(gaps, request, {}).values()
    assert (answer["error_code"], answer.get("current_leader")) == (
        ErrorCode.not_leader_or_follower, {"leader_id": 2, "leader_epoch": 7})
    gaps.refused("u", 0, batch(5), ErrorCode.not_enough_replicas)
    [answer] = _beyond_gaps(gaps, replace(request, topic_data=(replace(request.topic_data[0], name="u"),)), {}).values()
    assert answer["error_code"] == ErrorCode.not_enough_replicas and "current_leader" not in answer


def test_sequences_wrap() -> None:
    gaps = ProduceGaps()
    gaps.refused("t", 0, batch(2**31 - 1), ErrorCode.not_enough_replicas)
    assert gaps.beyond("t", 0, batch(0)) is not None
    assert gaps.beyond("t", 0, batch(2**31 - 2)) is None


_HEADER_BYTES = st.one_of(st.binary(max_size=80), st.builds(lambda seq, junk: batch(seq) + junk,
                                                            st.integers(0, 2**31 - 1), st.binary(max_size=8)))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(steps=st.lists(st.tuples(_HEADER_BYTES, st.sampled_from(list(ErrorCode)[:60])), max_size=12))
def test_any_records_and_answers_never_raise_and_a_gap_refuses_only_what_follows_it(
        steps: list[tuple[bytes, ErrorCode]]) -> None:
    """Fuzz (seeded): whatever bytes a client sends as a partition's records and whatever each is answered, the rule
    never raises, and a batch it refuses is an idempotent producer's, after the gap's sequence."""
    gaps = ProduceGaps()
    for records, error in steps:
        gap = gaps.beyond("t", 0, records)
        if gap is not None:
            info = batch_header(records)
            assert (info.producer_id, info.producer_epoch) == (gap.producer_id, gap.epoch)
            assert 0 < (info.base_sequence - gap.first_seq) % 2**31 < 2**30
        gaps.refused("t", 0, records, error)


# ---------------------------------------------------------------------------------- on a real connection


class _RefusedWalWrite:
    """``os`` for fileio, except that once :attr:`armed`, the first write to a WAL segment raises ENOSPC (after
    ``delay`` seconds: a slow disk, while a client sends its next requests)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.armed = False
        self.delay = delay

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: Any) -> int:
        if self.armed and WAL_SEGMENT.search(os.readlink(f"/proc/self/fd/{fd}")):
            self.armed = False
            time.sleep(self.delay)
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)


def _produce(correlation_id: int, records: bytes) -> bytes:
    return produce_v9(correlation_id, TOPIC, records, "gaps-test")


async def _answer(reader: asyncio.StreamReader) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a Produce v9 answer for one partition of :data:`TOPIC`."""
    correlation_id, body = await read_frame(reader, BOUND_S)
    at = body.index(TOPIC.encode()) + len(TOPIC) + 1  # (v9 is flexible: the partitions' compact array length)
    index, error, base = struct.unpack(">ihq", body[at:at + 14])
    assert index == 0
    return correlation_id, error, base


async def test_a_pipelined_batch_after_one_the_disk_refused_is_refused_alike_then_both_appended_once(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _RefusedWalWrite()
    monkeypatch.setattr(fileio, "os", hook)
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        engine, storage = gateway._engine, gateway._storage
        assert engine is not None
        await storage.call(engine.create_kafka_topic, TOPIC, 1, {})
        reader, writer = await asyncio.open_connection(*gateway.kafka_address)
        try:
            writer.write(_produce(1, batch(0)))
            assert await _answer(reader) == (1, ErrorCode.none, 0)
            hook.armed = True
            writer.write(_produce(2, batch(1)) + _produce(3, batch(2)))  # pipelined: the second comes before any answer
            assert await _answer(reader) == (2, ErrorCode.kafka_storage_error, -1)
            assert not hook.armed  # (the disk refused the first one's write, and only that one)
            assert await _answer(reader) == (3, ErrorCode.kafka_storage_error, -1)  # not OUT_OF_ORDER_SEQUENCE_NUMBER
            writer.write(_produce(4, batch(1)) + _produce(5, batch(2)))  # the client's retries, in order
            assert [await _answer(reader) for _ in range(2)] == [(4, ErrorCode.none, 1), (5, ErrorCode.none, 2)]
            writer.write(_produce(6, batch(0, producer_id=PRODUCER + 1)))  # (another producer: no gap of its own)
            assert await _answer(reader) == (6, ErrorCode.none, 3)
        finally:
            writer.close()
        values = await storage.call(lambda: [engine.partitions.read(TOPIC, 0, 0, 1 << 20, must_one=True,
                                                                    read_committed=False)])
    assert len(values[0].batches) == 4


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_retries_in_order_after_a_refused_write_and_never_bumps_its_epoch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    hook = _RefusedWalWrite(delay=0.5)
    monkeypatch.setattr(fileio, "os", hook)
    lines = _Lines()
    logger = logging.getLogger("test-produce-gaps-librdkafka")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        with gateway_thread(tmp_path / "data") as gateway:
            bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic(TOPIC, 1)]).values():
                future.result(30)
            producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                 "linger.ms": 0, "batch.num.messages": 1, "debug": "eos", "logger": logger})
            producer.produce(TOPIC, b"first", partition=0)
            assert producer.flush(30) == 0
            hook.armed = True
            for i in range(20):  # one record a request, up to five in flight: the first waits 0.5 s, then is refused
                producer.produce(TOPIC, b"%d" % i, partition=0)
            assert producer.flush(60) == 0
            assert not hook.armed  # (the refusal happened)
            got = [v for _, _, v in consume(bootstrap, TOPIC, 20)]
    finally:
        logger.removeHandler(lines)
    assert got == [b"first"] + [b"%d" % i for i in range(20)]  # each once, in order
    assert [line for line in lines.lines if "bump" in line] == []
