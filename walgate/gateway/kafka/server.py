"""The Kafka listener: one task per connection that only moves frames.

Each connection reads size-prefixed frames, dispatches them one at a time and
writes every response before reading the next request, so responses go out
in request order (Kafka's rule; clients pipeline requests and match them by
order). A long-poll Fetch therefore holds only its own connection; other
connections have their own tasks.

Bad input: a frame over ``max_request_bytes``, a malformed frame or header, an
unknown api key or an unsupported version (other than ApiVersions, which gets
the KIP-511 v0 answer) closes the connection after one log line naming the
peer — what a Kafka broker does. A handler that raises closes the connection
too (never a half-written response); other connections are unaffected. A peer
that reset the connection while its request was handled gets no answer.

Idle connections (no request read and no answer written for
``connections_max_idle_ms``, Kafka's ``connections.max.idle.ms``) are closed by
one sweeper task, so peers that vanish or stall mid-frame do not hold a socket
forever; clients reconnect on their next request, as with Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from walgate.gateway.kafka.broker import PEER, Broker
from walgate.gateway.kafka.frame_writer import FrameWriter
from walgate.gateway.kafka.handlers import HANDLERS
from walgate.wire.errors import WireError
from walgate.wire.framing import FrameReader
from walgate.wire.protocol import Chunk, api_versions_fallback, build_response, decode_request, encode_response, parse_request_header

__all__ = ["KafkaServer"]

log = logging.getLogger("walgate.kafka")

_API_VERSIONS = 18
_READ_CHUNK = 256 << 10


class _Close(Exception):
    """End this connection (after logging why)."""


class KafkaServer:
    def __init__(self, broker: Broker, max_request_bytes: int, connections_max_idle_ms: int = 600_000) -> None:
        self.broker = broker
        self.max_request_bytes = max_request_bytes
        self.max_idle = connections_max_idle_ms / 1000
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._active: dict[asyncio.StreamWriter, float] = {}  # open connection -> loop time of its last request/answer
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the bound (host, port)."""
        self._server = await asyncio.start_server(self._connection, host, port, limit=_READ_CHUNK)
        self._sweeper = asyncio.create_task(self._sweep_idle())
        return self._server.sockets[0].getsockname()[:2]

    async def _sweep_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(self.max_idle / 4, 30))
            cutoff = loop.time() - self.max_idle
            for writer, last in list(self._active.items()):
                if last < cutoff:
                    log.info("kafka %s: idle for %.0f s; closing the connection", writer.get_extra_info("peername"),
                             loop.time() - last)
                    writer.close()  # the connection's read ends, and its task cleans up

    async def stop(self) -> None:
        """Stop accepting, then cancel and drain every connection task, the idle sweeper and the group timer."""
        self.broker.groups.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        PEER.set(str(peer[0]) if peer else "")
        frames = FrameReader(self.max_request_bytes)
        out = FrameWriter(writer)
        loop = asyncio.get_running_loop()
        self._active[writer] = loop.time()
        try:
            while True:
                data = await reader.read(_READ_CHUNK)
                if not data:
                    return
                for frame in frames.feed(data):
                    self._active[writer] = loop.time()
                    response = await self._dispatch(frame, peer)
                    if writer.is_closing():
                        # the peer reset the connection while its request was handled (a long-poll Fetch), or it
                        # was closed as idle: the answer has nowhere to go (uvloop's writelines would raise)
                        return
                    await out.write(response)
                    self._active[writer] = loop.time()
        except _Close as why:
            log.warning("kafka %s: %s; closing the connection", peer, why)
        except WireError as exc:
            log.warning("kafka %s: bad frame (%s); closing the connection", peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # stop(): end normally, because asyncio's stream callback (3.11) logs a cancelled connection task as an error
            pass
        finally:
            self._connections.discard(task)
            self._active.pop(writer, None)
            out.close()
            writer.close()

    async def _dispatch(self, frame: bytes, peer: Any) -> list[Chunk]:
        header = parse_request_header(frame)
        handler = HANDLERS.get(header.api_key)
        supported = self.broker.versions.get(header.api_key)
        if handler is None or supported is None:
            raise _Close(f"unsupported api key {header.api_key} (client {header.client_id!r})")
        if not supported[0] <= header.api_version <= supported[1]:
            if header.api_key == _API_VERSIONS:
                return api_versions_fallback(header.correlation_id, self.broker.versions)
            raise _Close(
                f"unsupported version {header.api_version} of api key {header.api_key} "
                f"(supported {supported[0]}-{supported[1]}, client {header.client_id!r})"
            )
        request = decode_request(header, frame)
        try:
            fields = await handler.fn(self.broker, header, request)
            if fields is None:
                return []
            return encode_response(header, build_response(header.api_key, header.api_version, fields))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("kafka %s: api key %d v%d failed", peer, header.api_key, header.api_version)
            raise _Close(f"internal error {exc!r}") from exc
