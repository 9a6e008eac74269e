"""A connection's Produce requests are appended while the first waits for its answer, and answered in request order
(walgate/gateway/kafka/answer_order.py).

Ordering, never timing: the WAL's fdatasync is held on an Event the test owns, so the first request's answer cannot
be given (its durability is awaited under group commit); the requests after it on the same connection must be
appended meanwhile (the old server read nothing more until it answered). The other tests drive
:class:`AnswerQueue` itself: answers in order whatever order they complete in, at most ``depth`` waiting, a failure
that ends the connection, and abandoned answers that give their request bytes back.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_helpers import produce_v9, read_frame
from walgate.gateway.config import Config
from walgate.gateway.kafka.answer_order import Answered, AnswerQueue, Pending
from walgate.gateway.kafka.server import KafkaServer
from walgate.gateway.server import Gateway
from walgate.storage import fileio
from walgate.storage.quotas import entity
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import encode_request, request_class
from walgate.wire.serial import fields_of

TOPIC = "pipelined"
REQUESTS = 3
BOUND_S = 20.0  # (bounds the waits only: a server that does not pipeline fails instead of hanging)


def _held_fsyncs(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """(holding, release): once ``holding`` is set, every fdatasync waits for ``release`` (at most BOUND_S)."""
    holding, release = threading.Event(), threading.Event()
    synced = fileio.fdatasync

    def held_fdatasync(fd: int, *args: Any, **kwargs: Any) -> None:
        if holding.is_set():
            release.wait(BOUND_S)
        synced(fd, *args, **kwargs)

    monkeypatch.setattr(fileio, "fdatasync", held_fdatasync)
    return holding, release


_BATCH = encode_batch(0, [1_700_000_000_000], [b"k"], [b"v1"], [[]])  # (each request's records: one batch this size)


def _produce(correlation_id: int, value: bytes) -> bytes:
    return produce_v9(correlation_id, TOPIC, encode_batch(0, [1_700_000_000_000], [b"k"], [value], [[]]),
                      "pipelined-test")


def _metadata(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 3, 1, correlation_id, 4) + b"test" + b"\x00\x00\x00\x00"  # Metadata v1, no topics
    return struct.pack(">i", len(body)) + body


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    return await read_frame(reader, BOUND_S)


@dataclass
class _Connected:
    """A gateway's Kafka server with topic :data:`TOPIC` (fsynced before answered), a client's connection to it,
    and the WAL's fdatasyncs held (:func:`_held_fsyncs`)."""

    server: KafkaServer
    address: tuple[str, int]
    end_offset: Callable[[], Awaitable[int]]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    holding: threading.Event
    release: threading.Event

    async def appended(self, records: int) -> None:
        """Until the topic holds ``records`` (bounded; asserted)."""
        for _ in range(int(BOUND_S / 0.05)):
            if await self.end_offset() == records:
                return
            await asyncio.sleep(0.05)
        assert await self.end_offset() == records, "the requests after the first were not appended"


@asynccontextmanager
async def _connected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> AsyncIterator[_Connected]:
    """:class:`_Connected` on a gateway of ``config``; the fdatasyncs released and the connection closed after."""
    holding, release = _held_fsyncs(monkeypatch)
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, **config)) as gateway:
        engine, storage, server = gateway._engine, gateway._storage, gateway._kafka
        assert engine is not None and server is not None
        await storage.call(engine.create_kafka_topic, TOPIC, 1, {"flush.messages": "1"})

        async def end_offset() -> int:
            return await storage.call(lambda: int(engine.store.indexes[(TOPIC, 0)].end_offset))

        host, port = gateway.kafka_address
        reader, writer = await asyncio.open_connection(host, port)
        try:
            yield _Connected(server, (host, port), end_offset, reader, writer, holding, release)
        finally:
            release.set()
            writer.close()


async def test_a_connections_produce_requests_are_appended_while_the_first_waits_and_answered_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _connected(tmp_path, monkeypatch) as c:
        c.holding.set()
        c.writer.write(b"".join(_produce(i, b"v%d" % i) for i in range(1, REQUESTS + 1)) + _metadata(REQUESTS + 1))
        await c.appended(REQUESTS)  # every request appended while the first one's fsync is held
        assert not c.release.is_set()
        c.release.set()
        answers = [await _answer(c.reader) for _ in range(REQUESTS + 1)]
    assert [cid for cid, _ in answers] == list(range(1, REQUESTS + 2))  # in request order, the Metadata last
    offsets = []
    for _, body in answers[:REQUESTS]:  # v9 (flexible): tagged header, one topic, one partition
        at = body.index(TOPIC.encode()) + len(TOPIC) + 1  # partitions' compact array length
        index, error, base = struct.unpack(">ihq", body[at:at + 14])
        assert (index, error) == (0, 0)
        offsets.append(base)
    assert offsets == list(range(REQUESTS))


async def test_a_nodes_wal_fetch_is_read_while_waiting_produce_requests_hold_the_whole_request_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The requests that move the high watermark are never kept unread by the Produce requests waiting for it: here
    two requests wait for their fsync holding most of the budget and a third waits to be paid for; a WalFetch on
    another connection is still read and answered (CLUSTER_AUTHORIZATION_FAILED: this client is no node)."""
    budget = 8 << 10
    async with _connected(tmp_path, monkeypatch, max_request_bytes=budget, queued_max_request_bytes=budget) as c:
        fetcher_reader, fetcher = await asyncio.open_connection(*c.address)
        try:
            c.holding.set()
            c.writer.write(b"".join(_produce(i, b"x" * 3000) for i in (1, 2, 3)))  # ~3.1 KiB each: 2 fit, 1 waits
            await c.appended(2)
            request_type: Any = request_class(10001, 0)
            partition: Any = next(f.entity for f in fields_of(request_type) if f.name == "partitions")
            request = request_type(replica_id=2, broker_epoch=1, max_wait=datetime.timedelta(0), min_bytes=1,
                                   partitions=(partition(db_id=uuid.uuid4(), vgroup=0, current_leader_epoch=1,
                                                         fetch_version=0, partition_max_bytes=1 << 20),))
            fetcher.write(encode_request(10001, 0, 9, "walgate-node-2", request))
            correlation_id, body = await _answer(fetcher_reader)
            assert not c.release.is_set()  # answered while the Produce requests still hold the budget
            assert correlation_id == 9
            assert struct.pack(">h", ErrorCode.cluster_authorization_failed) in body
            c.release.set()
            assert [(await _answer(c.reader))[0] for _ in range(3)] == [1, 2, 3]
        finally:
            fetcher.close()


async def test_a_client_gone_while_its_answers_wait_leaves_its_appends_and_gives_every_byte_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _connected(tmp_path, monkeypatch) as c:
        c.holding.set()
        c.writer.write(b"".join(_produce(i, b"v") for i in range(1, REQUESTS + 1)))
        await c.appended(REQUESTS)
        assert c.server.budget.used > 0  # the requests waiting for their answers hold their bytes
        c.writer.close()
        for _ in range(int(BOUND_S / 0.05)):  # the connection ends, its answers abandoned
            if c.server.budget.used == 0:
                break
            await asyncio.sleep(0.05)
        assert c.server.budget.used == 0
        c.release.set()
        assert await c.end_offset() == REQUESTS


async def test_a_deferred_answer_over_a_client_quota_mutes_the_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client quota configured while a connection's Produce answers wait (they were deferred: there was none): the
    answer over the quota carries its throttle time and the connection handles its next request no sooner (Kafka
    mutes the channel, KIP-219; before, only an answer given at once muted it). A lower bound on time only: the mute
    is a sleep, never shorter."""
    loop = asyncio.get_running_loop()
    async with _connected(tmp_path, monkeypatch) as c:
        c.holding.set()
        c.writer.write(_produce(1, b"v1") + _produce(2, b"v2"))
        await c.appended(2)
        size = len(_BATCH)  # each request's record bytes; over Kafka's 10 s minimum span: the first within
        c.server.broker.quotas.configure({entity([("client-id", None)]): {"producer_byte_rate": 2 * size / 10.5}})
        c.release.set()  # the second over the rate by 5 %: throttled up to (2 / 10 - 1 / 5.25) * 5.25 * 10 s = 0.5 s
        throttles = [struct.unpack(">i", (await _answer(c.reader))[1][-5:-1])[0] for _ in range(2)]
        answered = loop.time()
        c.writer.write(_metadata(3))
        correlation_id, _ = await _answer(c.reader)
        waited = loop.time() - answered
    assert throttles[0] == 0 < throttles[1] < 1000, throttles
    assert correlation_id == 3 and waited >= throttles[1] / 1000 - 0.05, (waited, throttles)


def _queue(sent: list[int], depth: int = 2) -> tuple[AnswerQueue, list[bool]]:
    closed: list[bool] = []

    async def send(pending: Pending, answered: Answered) -> None:
        pending.held = 0
        sent.append(answered[0])

    return AnswerQueue(send, lambda: closed.append(True), depth), closed


def _pending(n: int) -> Pending:
    return Pending(header=None, request=None, received=0.0, started=0.0, held=n, size=n)


async def test_answers_are_written_in_request_order_whatever_order_they_complete_in() -> None:
    sent: list[int] = []
    queue, closed = _queue(sent, depth=3)
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[Answered]] = [loop.create_future() for _ in range(3)]
    for i, future in enumerate(futures):
        queue.add(_pending(i), future)
    room = asyncio.ensure_future(queue.room())
    futures[2].set_result((2, [], 0.0))
    futures[1].set_result((1, [], 0.0))
    await asyncio.sleep(0)
    assert sent == [] and not room.done()  # the first is not answered yet: nothing written, no room
    futures[0].set_result((0, [], 0.0))
    await asyncio.wait_for(queue.empty(), BOUND_S)
    assert sent == [0, 1, 2] and room.done() and not closed


async def test_a_failed_answer_ends_the_connection_and_the_answers_after_it_are_abandoned() -> None:
    sent: list[int] = []
    queue, closed = _queue(sent)
    loop = asyncio.get_running_loop()
    failing, after = loop.create_future(), loop.create_future()
    queue.add(_pending(10), failing)
    queue.add(_pending(20), after)
    failing.set_exception(RuntimeError("the handler failed"))
    with pytest.raises(RuntimeError, match="the handler failed"):
        await asyncio.wait_for(queue.empty(), BOUND_S)
    assert closed == [True] and sent == []
    with pytest.raises(RuntimeError):
        queue.check()
    left = await queue.abandon()
    assert [p.held for p in left] == [10, 20]  # the connection gives their bytes back
    assert after.cancelled()
