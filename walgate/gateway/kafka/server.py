"""The Kafka listener: one task per connection that only moves frames.

Each connection reads size-prefixed frames, dispatches them one at a time and
writes every response before reading the next request, so responses go out
in request order (Kafka's rule; clients pipeline requests and match them by
order). A long-poll Fetch therefore holds only its own connection; other
connections have their own tasks. Produce requests are the exception: once one's
appends are made, the connection reads and handles up to :data:`_PIPELINED` more
Produce requests while it waits for durability and the high watermark, and writes
their answers in request order (:mod:`.answer_order`); any other request waits
until they are answered.

Bad input: a frame over ``max_request_bytes``, a malformed frame or header, an
unknown api key or an unsupported version (other than ApiVersions, which gets
the KIP-511 v0 answer) closes the connection after one log line naming the
peer — what a Kafka broker does. A handler that raises closes the connection
too (never a half-written response) after one ERROR line naming the api key,
version, client and exception; other connections are unaffected. A peer
that reset the connection while its request was handled gets no answer.

Memory (Kafka's ``queued.max.request.bytes``): requests are paid for from one
:class:`RequestBudget` of ``queued_max_request_bytes`` shared by all
connections, at their announced size, until their answer is written. A
request is paid for once it is complete, or as soon as more than
``_UNPAID_BYTES`` of it arrived while the rest is still to come: then, before
reading on, the connection pays for all of it. A connection that cannot pay
stops reading (the peer is held back by TCP) until others give bytes back;
waiters are served first come, first served, and each connection holds at
most one request's bytes besides the Produce requests waiting for their answers
(which end within their timeout), so a request of any accepted size
(``max_request_bytes`` <= the budget) is read eventually. A node's WalFetch or
VnodeSnapshot request of at most ``_UNPAID_BYTES`` is not paid for: the fetches
that move a high watermark are read even while Produce requests waiting for it
hold the whole budget. Partial requests
that claim a big size but send little cost nothing (as on Kafka, they wait).
Outside the budget a connection holds at most ``_UNPAID_BYTES``, what one
read returns and asyncio's stream buffer (about a MiB).

Slow peers: a request whose first bytes arrived but which is not complete
``request_read_timeout_ms`` later (time spent waiting for the budget does not
count) closes the connection (slowloris). Idle connections (no request read
and no answer written for ``connections_max_idle_ms``, Kafka's
``connections.max.idle.ms``) are closed too; clients reconnect on their next
request, as with Kafka. One sweeper task enforces both. The listen backlog is
``listen_backlog`` (Kafka's ``socket.listen.backlog.size``), so a burst of
connections queues in the kernel instead of being retried by TCP.

Client quotas (:mod:`walgate.gateway.quotas`): an answer with a non-zero ``throttle_time`` (a Produce or Fetch over
its byte rate, a request over its ``request_percentage``) is sent at once, then the connection handles no further
request for that long (Kafka mutes the channel, KIP-219): a deferred Produce answer's too (client quotas configured
while it waited), the requests already in hand going on and the next one waiting out the mute.

Observability: every answered request is reported to :class:`Metrics` with four
``perf_counter`` stamps (last byte read, handler start, handler end, response
written: Kafka's request queue, local and response send times), and logged at
DEBUG on ``kafka.request.logger`` (Kafka's name) with its api, version,
correlation id, client id, peer, sizes and times. Each connection logs one INFO
line on ``walgate.kafka.connection`` when its first request names the client
(peer, client id, principal) and one when it closes (the same, the reason and
the number of requests).

Listeners: :meth:`KafkaServer.start` is called once per configured listener (Kafka's ``listeners``), each a
socket of its own, with a TLS context for SSL and SASL_SSL listeners (the handshake completes before the
connection task starts and must end within ``request_read_timeout_ms``; a failed handshake never reaches it).
Every connection task knows its peer, its listener (name and security protocol) and its principal: on an SSL
listener the client certificate's (:func:`walgate.gateway.tls.peer_principal`; ``User:ANONYMOUS`` without one),
on a SASL listener the one it authenticated as; and it hands each request's handler a
:class:`~walgate.gateway.kafka.context.RequestContext` of them and of the request's header. A certificate no
``ssl.principal.mapping.rules`` rule maps closes the connection, as Kafka fails its authentication.
Authentication (:mod:`.sasl`): a server made with ``sasl`` settings is a SASL listener. Each connection gets an
:class:`~.sasl.Authentication` (in each request's context; on a listener without SASL a node-only one, which accepts
every request until a cluster node authenticates) and the request loop is its gate: a request the
authentication state does not allow (anything but ApiVersions and SaslHandshake before authentication, anything
but SaslHandshake/SaslAuthenticate once the session expired) closes the connection, as Kafka's
``SaslServerAuthenticator`` does; after a v0 SaslHandshake the next frames are bare SASL tokens, answered as bare
size-prefixed tokens; a failed authentication closes the connection after its answer. The principal of the
connection lines is ``User:ANONYMOUS`` until the connection authenticates.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import ssl
import struct
import time
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any

from walgate.gateway.config import QUEUED_MAX_REQUEST_BYTES
from walgate.gateway.kafka.answer_order import Answered, AnswerQueue, Pending
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import ANONYMOUS, RequestContext
from walgate.gateway.kafka.frame_writer import FrameWriter
from walgate.gateway.kafka.handlers import HANDLERS, internal
from walgate.gateway.kafka.handlers.common import Deferred, Unanswered
from walgate.gateway.kafka.produce_gaps import ProduceGaps
from walgate.gateway.kafka.sasl import (
    Authentication,
    SaslFailed,
    SaslSettings,
)
from walgate.gateway.listeners import PLAINTEXT, ListenerInfo
from walgate.gateway.metrics import Metrics, api_name
from walgate.gateway.principal_mapping import NoMatchingRule, PrincipalMapper
from walgate.gateway.quotas import REQUEST as REQUEST_RATE
from walgate.gateway.tls import peer_principal
from walgate.wire.errors import WireError
from walgate.wire.framing import FrameReader
from walgate.wire.protocol import (
    Chunk,
    RequestHeader,
    api_versions_fallback,
    build_response,
    decode_view,
    encode_response,
    parse_request_header,
)

__all__ = ["KafkaServer", "RequestBudget"]

log = logging.getLogger("walgate.kafka")
connection_log = logging.getLogger("walgate.kafka.connection")
request_log = logging.getLogger("kafka.request.logger")

_API_VERSIONS = 18
_PRODUCE = 0
_PIPELINED = 64
"""Produce requests a connection has in hand at most, their answers awaited in request order
(:mod:`~walgate.gateway.kafka.answer_order`). librdkafka without idempotence keeps a request in flight per
``linger.ms`` and partition leader, its batches shrinking while answers take a replication round: 9 partitions of
factor 3 on 3 nodes, 200,000 1 KiB records at its defaults (acks=all, linger.ms=5) took 3-4 s at 64, 19-31 s at
16 and over 300 s at 1 and 5 (bench/RESULTS.md, 2026-12-01)."""
_INTERNAL = internal()  # handled, never advertised (walgate.wire.internal): only nodes are answered
_READ_CHUNK = 256 << 10
_AFTER_FAILED_AUTHENTICATION_S = 1.0
"""How long a connection whose authentication failed stays open after its answer, for the client to close it (as a
Kafka client does on SASL_AUTHENTICATION_FAILED): a client that finds the server's close together with the answer
may report the lost connection instead of the answer (kafka-python 3.0 did, now and then, on a loaded machine)."""
_UNPAID_BYTES = 64 << 10  # of an incomplete request, held before its whole size is paid for
_SWEEP_MAX_INTERVAL = 30.0


async def _until_closed_by_client(reader: asyncio.StreamReader) -> None:
    """Until the client closes the connection, at most :data:`_AFTER_FAILED_AUTHENTICATION_S`; what it sends
    meanwhile is dropped unread."""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(_AFTER_FAILED_AUTHENTICATION_S):
            while await reader.read(_READ_CHUNK):
                pass


def _replication_request(frame: bytes) -> bool:
    """Whether ``frame`` is a request of walgate's internal APIs (a follower's WalFetch, a VnodeSnapshot page) no
    bigger than :data:`_UNPAID_BYTES`: read without paying from the request budget, so that Produce requests waiting
    for the high watermark, which hold their bytes until answered, can never keep the fetches that move it from being
    read. (Another client's request of those APIs is refused: only nodes are answered.)"""
    return len(frame) <= _UNPAID_BYTES and int.from_bytes(frame[:2], "big", signed=True) in _INTERNAL


class _Close(Exception):
    """End this connection after logging ``message`` at ``level``."""

    def __init__(self, message: str, level: int = logging.WARNING) -> None:
        super().__init__(message)
        self.level = level


class _Ended(Exception):
    """End this connection, ``reason`` its closing line's reason (nothing else logged)."""


class RequestBudget:
    """Bytes of requests in hand across connections, at most ``limit`` (first come, first served)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, n: int) -> None:
        """Wait until *n* bytes fit (and every earlier waiter was served), then hold them; ``n <= limit``."""
        if not self._waiters and self.used + n <= self.limit:
            self.used += n
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(n)  # granted as the waiter was cancelled
            else:
                self._grant()  # a cancelled head of the line must not hold up the others
            raise

    def release(self, n: int) -> None:
        """Give back *n* bytes taken with :meth:`take`."""
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters and (waiters[0][1].done() or self.used + waiters[0][0] <= self.limit):
            n, future = waiters.popleft()
            if not future.done():
                self.used += n
                future.set_result(None)


class KafkaServer:
    def __init__(
        self,
        broker: Broker,
        max_request_bytes: int,
        connections_max_idle_ms: int = 600_000,
        *,
        metrics: Metrics,
        queued_max_request_bytes: int = QUEUED_MAX_REQUEST_BYTES,
        request_read_timeout_ms: int = 30_000,
        listen_backlog: int = 4096,
    ) -> None:
        self.broker = broker
        self.max_request_bytes = max_request_bytes
        self.max_idle = connections_max_idle_ms / 1000
        self.read_timeout = request_read_timeout_ms / 1000
        self.listen_backlog = listen_backlog
        self.metrics = metrics
        self.budget = RequestBudget(max(queued_max_request_bytes, max_request_bytes))
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._active: dict[asyncio.StreamWriter, float] = {}  # open connection -> loop time of its last request/answer
        self._reading: dict[asyncio.StreamWriter, float] = {}  # connection -> loop time its incomplete request began
        self._closing: dict[asyncio.StreamWriter, str] = {}  # connection closed by the sweeper -> why
        self._sweeper: asyncio.Task[None] | None = None
        self._stopping = False  # stop() began: a connection task that first runs from now on serves nothing

    @property
    def serving(self) -> bool:
        """Whether every listener accepts connections."""
        return bool(self._servers) and all(server.is_serving() for server in self._servers)

    async def start(
        self,
        host: str,
        port: int,
        listener: ListenerInfo = PLAINTEXT,
        tls: ssl.SSLContext | None = None,
        mapper: PrincipalMapper | None = None,
        sasl: SaslSettings | None = None,
        *,
        serving: bool = True,
    ) -> tuple[str, int]:
        """Open one listener (TLS with ``tls``; ``mapper`` maps its client certificates to principals; its clients
        authenticate with SASL when given ``sasl``); returns the bound (host, port). Call once per listener. With
        ``serving`` False its socket is bound (its port known, to be advertised) but not listening: connections are
        refused until :meth:`serve` (Kafka's ``SocketServer`` is bound first and enables request processing once
        the broker started)."""
        server = await asyncio.start_server(
            functools.partial(self._connection, listener=listener, mapper=mapper, sasl=sasl), host or None, port,
            limit=_READ_CHUNK, backlog=self.listen_backlog, ssl=tls,
            ssl_handshake_timeout=self.read_timeout if tls is not None else None, start_serving=serving,
        )
        self._servers.append(server)
        self.metrics.listener(listener.name)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep())
        bound: tuple[str, int] = server.sockets[0].getsockname()[:2]
        return bound

    async def serve(self) -> None:
        """Accept connections on every listener :meth:`start` opened not serving."""
        for server in self._servers:
            if not server.is_serving():
                await server.start_serving()

    async def _sweep(self) -> None:
        """Close idle connections and those whose request arrives too slowly."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(self.max_idle / 4, self.read_timeout / 4, _SWEEP_MAX_INTERVAL))
            now = loop.time()
            for writer, last in list(self._active.items()):
                if last < now - self.max_idle:
                    log.info("kafka %s: idle for %.0f s; closing the connection", writer.get_extra_info("peername"),
                             now - last)
                    self._closing[writer] = f"idle for {now - last:.0f} s"
                    writer.close()  # the connection's read ends, and its task cleans up
            for writer, began in list(self._reading.items()):
                if began < now - self.read_timeout:
                    log.warning("kafka %s: request not received in full within %.0f ms; closing the connection",
                                writer.get_extra_info("peername"), self.read_timeout * 1000)
                    del self._reading[writer]
                    self._closing[writer] = f"request not received in full within {self.read_timeout * 1000:.0f} ms"
                    writer.close()

    async def stop(self) -> None:
        """Stop accepting, then cancel and drain every connection task, the sweeper and the group and share
        timers. A connection accepted as the listeners closed whose task first runs after this began (so it is not
        among the tasks cancelled here) is closed unserved (:meth:`_connection`): nothing is handled once the
        node's storage is shut down after this."""
        self._stopping = True
        self.broker.groups.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self.broker.shares is not None:  # after the connections: a request's end arms it again
            self.broker.shares.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                          listener: ListenerInfo, mapper: PrincipalMapper | None, sasl: SaslSettings | None) -> None:
        if self._stopping:  # (accepted before the listener closed, first run after stop() took its tasks)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else ""
        address = f"{peer[0]}:{peer[1]}" if peer else "?"
        principal = ANONYMOUS  # until a client certificate or SASL says otherwise
        if mapper is not None and listener.security_protocol == "SSL":
            try:
                principal = peer_principal(writer.get_extra_info("ssl_object"), mapper)
            except (NoMatchingRule, ValueError) as exc:  # ValueError: a certificate cryptography cannot read
                log.warning("kafka %s: %s; closing the connection", address, exc)
                self._connections.discard(task)
                writer.close()
                return
        frames = FrameReader(self.max_request_bytes)
        out = FrameWriter(writer)
        loop = asyncio.get_running_loop()
        budget = self.budget
        metrics = self.metrics
        held = 0  # budget bytes held by this connection: the request being received or handled
        requests = 0
        client_id: str | None = None
        reason = "closed by the client"
        auth = Authentication(sasl, host)  # without SASL settings: only a cluster node may authenticate (.sasl)
        gaps = ProduceGaps()
        muted_until = 0.0  # (loop time) a throttled answer's mute: no request handled before it
        self._active[writer] = loop.time()
        metrics.connection(listener.name, opened=True)

        async def send(pending: Pending, answered: Answered) -> None:
            """Write one answer (nothing for acks=0) and record it, its request's bytes given back whatever happens;
            a throttled one mutes the connection. Raises _Ended when the connection is to end after it (or instead
            of it)."""
            nonlocal muted_until
            fields, response, handled = answered
            try:
                if writer.is_closing():
                    # the peer reset the connection while its request was handled (a long-poll Fetch), or it was
                    # closed as idle: the answer has nowhere to go (uvloop's writelines would raise)
                    raise _Ended("the client went away while its request was handled")
                await out.write(response)
            finally:
                budget.release(pending.held)
                pending.held = 0
            sent = time.perf_counter()
            unanswered = fields if isinstance(fields, Unanswered) else None
            if unanswered is not None:
                fields = unanswered.fields
            if fields is not None and fields.get("throttle_time"):  # over a client quota: muted, as Kafka does
                muted_until = max(muted_until, loop.time() + fields["throttle_time"] / 1000)
            metrics.request(pending.header, pending.request, fields, pending.received, pending.started, handled, sent,
                            bool(response))
            if request_log.isEnabledFor(logging.DEBUG):
                _log_request(pending.header, address, pending.size, response,
                             pending.received, pending.started, handled, sent)
            self._active[writer] = loop.time()
            if unanswered is not None and unanswered.refused:
                raise _Ended(f"a request that gets no answer (acks=0, correlation id {pending.header.correlation_id}) "
                             f"was refused, closed so that the client notices: {unanswered.refused}")

        answers = AnswerQueue(send, writer.close, _PIPELINED)
        try:
            while True:
                data = await reader.read(_READ_CHUNK)
                if not data:
                    answers.check()  # (a failed answer closed the transport: its reason, not the client's)
                    return
                done = frames.feed(data)
                if done:
                    self._reading.pop(writer, None)
                received = time.perf_counter()
                for frame in done:
                    if not held and not _replication_request(frame):  # not paid for while it arrived
                        await budget.take(len(frame))
                        held = len(frame)
                    self._active[writer] = loop.time()
                    started = time.perf_counter()
                    if auth.raw:  # a bare SASL token after a v0 SaslHandshake
                        await answers.empty()
                        await self._sasl_token(auth, frame, out)
                        budget.release(held)
                        held = 0
                        continue
                    header = parse_request_header(frame)
                    if not auth.allows(header.api_key):
                        raise _Close(auth.why_refused(header.api_key))
                    if auth.principal is not None:
                        principal = auth.principal
                    if not requests:
                        client_id = header.client_id
                        connection_log.info("kafka connection from %s opened: client id %r, principal %s", address,
                                            client_id, principal,
                                            extra={"peer": address, "client_id": client_id, "principal": principal})
                    requests += 1
                    ctx = RequestContext.of(header, principal=principal, peer=host, listener=listener,
                                            authentication=auth, produce_gaps=gaps)
                    produce = header.api_key == _PRODUCE
                    await (answers.room() if produce else answers.empty())  # (the module docstring: in order)
                    if muted_until > loop.time():
                        await asyncio.sleep(muted_until - loop.time())
                    request, answer = await self._dispatch(header, ctx, frame,
                                                           deferrable=produce and not self.broker.quotas.keys)
                    pending, held = Pending(header, request, received, started, held, len(frame)), 0
                    if isinstance(answer, asyncio.Future):
                        answers.add(pending, answer)
                        continue
                    await answers.empty()  # (a Produce answered here once client quotas came meanwhile: after those)
                    await send(pending, answer)
                    if auth.close:
                        reason = f"SASL authentication failed: {auth.failure or 'illegal SASL state'}"
                        await _until_closed_by_client(reader)
                        return
                buffered = frames.buffered
                if buffered:
                    size = frames.next_size
                    if size is not None and not held and buffered > _UNPAID_BYTES:
                        self._reading.pop(writer, None)  # waiting for others is not the peer's fault
                        await budget.take(size)
                        held = size
                    self._reading.setdefault(writer, loop.time())
        except _Close as why:
            log.log(why.level, "kafka %s: %s; closing the connection", peer, why)
            reason = str(why)
        except _Ended as why:
            reason = str(why)
        except WireError as exc:
            log.warning("kafka %s: bad frame (%s); closing the connection", peer, exc)
            reason = f"bad frame ({exc})"
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            reason = f"connection lost ({type(exc).__name__})"
        except asyncio.CancelledError:
            # stop(): end normally, because asyncio's stream callback (3.11) logs a cancelled connection task as an error
            reason = "the server is stopping"
        finally:
            for left in await answers.abandon():
                held += left.held
            if held:
                budget.release(held)
            self._connections.discard(task)
            self._active.pop(writer, None)
            self._reading.pop(writer, None)
            reason = self._closing.pop(writer, reason)
            out.close()
            writer.close()
            metrics.connection(listener.name, opened=False)
            if auth.principal is not None:
                principal = auth.principal
            connection_log.info("kafka connection from %s closed (%s): client id %r, principal %s, %d requests",
                                address, reason, client_id, principal, requests,
                                extra={"peer": address, "client_id": client_id, "principal": principal,
                                       "reason": reason, "requests": requests})

    async def _sasl_token(self, auth: Authentication, frame: bytes, out: FrameWriter) -> None:
        """Answer one bare SASL token (v0 SaslHandshake); a failure closes the connection without an answer."""
        try:
            token, _ = await auth.step(self.broker, frame)
        except SaslFailed as exc:
            await auth.pause_after_failure()
            raise _Close(f"SASL authentication failed: {exc}", logging.INFO) from None
        await out.write([struct.pack(">i", len(token)), token])

    async def _dispatch(self, header: RequestHeader, ctx: RequestContext, frame: bytes, *, deferrable: bool = False
                        ) -> tuple[Any, Answered | asyncio.Future[Answered]]:
        """(the decoded request, its answer: :data:`~.answer_order.Answered`); the request is None for the
        ApiVersions fallback. A handler's :class:`~.handlers.common.Deferred` answer is awaited here unless
        ``deferrable``: then the answer is a task of its own, the handler's work in request order done."""
        handler = HANDLERS.get(header.api_key)
        supported = self.broker.versions.get(header.api_key) or _INTERNAL.get(header.api_key)
        if handler is None or supported is None:
            raise _Close(f"unsupported api key {header.api_key} (client {header.client_id!r})")
        if not supported[0] <= header.api_version <= supported[1]:
            if header.api_key == _API_VERSIONS:
                return None, (None, api_versions_fallback(header.correlation_id, self.broker.versions),
                              time.perf_counter())
            raise _Close(
                f"unsupported version {header.api_version} of api key {header.api_key} "
                f"(supported {supported[0]}-{supported[1]}, client {header.client_id!r})"
            )
        request = decode_view(header, frame)
        began = time.perf_counter()
        with self._failing(header):
            fields = await handler.fn(self.broker, ctx, request)
            if isinstance(fields, Deferred):
                if deferrable:
                    answer = fields.answer
                    task = asyncio.ensure_future(self._deferred(header, ctx, answer, began))
                    task.add_done_callback(lambda _: answer.close())  # (cancelled before it began: closed)
                    return request, task
                fields = await fields.answer
            return request, self._answer(header, ctx, fields, began)

    async def _deferred(self, header: RequestHeader, ctx: RequestContext,
                        answer: Coroutine[Any, Any, Mapping[str, Any] | Unanswered], began: float) -> Answered:
        with self._failing(header):
            return self._answer(header, ctx, await answer, began)

    def _answer(self, header: RequestHeader, ctx: RequestContext, fields: Any, began: float) -> Answered:
        """The answer of ``fields`` (nothing to send for :class:`~.handlers.common.Unanswered`), a client quota's
        throttle on the handler's time since ``began`` in it."""
        if isinstance(fields, Unanswered):
            return fields, [], time.perf_counter()
        if REQUEST_RATE in self.broker.quotas.keys:  # client quotas: request_percentage on handler time
            throttle = self.broker.quotas.request_time(header.api_key, ctx.principal, header.client_id,
                                                       time.perf_counter() - began)
            if throttle > fields.get("throttle_time", 0):
                fields = {**fields, "throttle_time": throttle}
        return fields, encode_response(header, build_response(header.api_key, header.api_version, fields)), \
            time.perf_counter()

    @staticmethod
    @contextlib.contextmanager
    def _failing(header: RequestHeader) -> Iterator[None]:
        """A handler that raises closes the connection, after one ERROR line naming the request and the error."""
        try:
            yield
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _Close(
                f"api key {header.api_key} v{header.api_version} (client {header.client_id!r}) failed: "
                f"{type(exc).__name__}: {exc}",
                logging.ERROR,
            ) from exc


def _log_request(header: RequestHeader, peer: str, size: int, response: list[Chunk], received: float, started: float,
                 handled: float, sent: float) -> None:
    """One DEBUG line per answered request on ``kafka.request.logger`` (times in ms)."""
    out = sum(map(len, response))
    total, queue, local, send = ((sent - received) * 1000, (started - received) * 1000, (handled - started) * 1000,
                                 (sent - handled) * 1000)
    request_log.debug(
        "Completed request %s v%d correlation id %d from client %r at %s: %d bytes in, %d bytes out; "
        "totalTime %.3f ms, requestQueueTime %.3f ms, localTime %.3f ms, responseSendTime %.3f ms",
        api_name(header.api_key), header.api_version, header.correlation_id, header.client_id, peer, size + 4, out,
        total, queue, local, send,
        extra={"api": api_name(header.api_key), "api_version": header.api_version, "correlation_id": header.correlation_id,
               "client_id": header.client_id, "peer": peer, "request_bytes": size + 4, "response_bytes": out,
               "total_ms": round(total, 3), "request_queue_ms": round(queue, 3), "local_ms": round(local, 3),
               "response_send_ms": round(send, 3)},
    )
