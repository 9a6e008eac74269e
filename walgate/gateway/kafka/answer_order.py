"""A Kafka connection's answers, written in request order while several Produce requests wait for theirs.

Kafka's rule: a connection's requests are handled in the order they came and answered in that order; clients keep
several in flight (``max.in.flight.requests.per.connection``: 5 for an idempotent producer, librdkafka's default
without idempotence a million). A Produce handler makes its appends and then waits for them to be durable and, with
acks=all on a replicated vnode, for the high watermark (:class:`~walgate.gateway.kafka.handlers.common.Deferred`).
While it waits, the connection reads and handles its next Produce, whose appends come after the first's, so that one
fsync and one replication round carry several requests: handled one at a time, a connection's throughput to a
replicated partition is one request per replication round trip, and a producer whose batches shrink while the
broker is slow (librdkafka's default, acks=all, a factor-3 topic) fell to ~1 MB/s.

Invariants: answers are written in the order their requests came, each whole before the next is begun; at most
``depth`` answers wait (:meth:`AnswerQueue.room`); a request of any other API is handled only once every answer
before it is written (:meth:`AnswerQueue.empty`), so it sees what the Produce requests before it did, as if they were
handled one at a time. A deferred answer that fails, or whose write fails, ends the connection: the failure is
raised by the next :meth:`~AnswerQueue.room`, :meth:`~AnswerQueue.empty` or :meth:`~AnswerQueue.check`, and the
transport is closed so that a read waiting on it ends.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from walgate.wire.protocol import Chunk

__all__ = ["AnswerQueue", "Answered", "Pending"]

Answered = tuple[Any, list[Chunk], float]
"""A request's answer: its handler's fields (or :class:`~walgate.gateway.kafka.handlers.common.Unanswered`), the
response frame (empty for none) and ``time.perf_counter()`` when the handler was done."""


@dataclass(slots=True)
class Pending:
    """A request whose answer is to be written: its header and decoded view, its ``perf_counter`` stamps (last byte
    read, handler start), the request-budget bytes it holds until written (``held``, zeroed once given back) and its
    frame's size."""

    header: Any
    request: Any
    received: float
    started: float
    held: int
    size: int


class AnswerQueue:
    """One connection's deferred answers (the module docstring). ``send`` writes one answer and gives its ``held``
    bytes back, whatever happens (raising to end the connection); ``close`` closes the connection's transport."""

    def __init__(self, send: Callable[[Pending, Answered], Awaitable[None]], close: Callable[[], None],
                 depth: int) -> None:
        self._send = send
        self._close = close
        self.depth = depth
        self._pending: collections.deque[tuple[Pending, asyncio.Future[Answered]]] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self._written = asyncio.Event()
        self._failure: BaseException | None = None

    def add(self, pending: Pending, answer: asyncio.Future[Answered]) -> None:
        """Write ``answer`` after every answer added before it, once it is done."""
        self._pending.append((pending, answer))
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())

    async def room(self) -> None:
        """Until fewer than ``depth`` answers wait; raises the failure that ends the connection."""
        await self._until(lambda: len(self._pending) < self.depth)

    async def empty(self) -> None:
        """Until every answer added is written; raises the failure that ends the connection."""
        await self._until(lambda: not self._pending)

    async def _until(self, done: Callable[[], bool]) -> None:
        while True:
            self.check()
            if done():
                return
            self._written.clear()  # (set by the writer after each answer written and when it stops)
            await self._written.wait()

    def check(self) -> None:
        """Raise the failure that ended the writing of answers, if one did."""
        if self._failure is not None:
            raise self._failure

    async def abandon(self) -> list[Pending]:
        """At the connection's end: every answer not written, its handling cancelled and ended (the appends made
        stay: the client, gone, learns nothing of them, as when it went away while waiting for one answer)."""
        tasks = [answer for _, answer in self._pending] + ([self._writer] if self._writer is not None else [])
        left = [p for p, _ in self._pending]
        self._pending.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return left

    async def _write(self) -> None:
        try:
            while self._pending:
                pending, answer = self._pending[0]
                answered = await answer
                self._pending.popleft()
                await self._send(pending, answered)
                self._written.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # (every failure ends the connection: raised where its requests are read)
            self._failure = exc
            self._close()
        finally:
            self._writer = None
            self._written.set()
