"""Delayed links on one machine: an asyncio TCP proxy on 127.0.0.1 that a test puts between a client and a server.

The kernel has no netem, so a slow or stalled link is made here: :func:`delay_proxy` listens on a free port of
127.0.0.1 and forwards every connection it accepts to ``target``, on an event loop of its own in a thread of the
test process (stopped with the block). Each chunk read from one side is written to the other no earlier than its
arrival plus the direction's delay plus a random jitter (seeded), and never before the chunk read before it: the
byte stream stays in order, as TCP keeps it. ``up`` is client to target, ``down`` target to client. Changes act on
the bytes read from then on. A test can also:

- :meth:`DelayProxy.pause`: hold every byte of every connection (they stay open, nothing is lost) until
  :meth:`DelayProxy.resume`, as a link that stalls;
- :meth:`DelayProxy.cut`: reset every open connection (both sides see it closed, what was held is lost); new ones
  are still accepted.

Bounded: each direction holds at most :data:`HELD_CHUNKS` chunks of at most 64 KiB; when full, the proxy stops
reading that side, and TCP's flow control pushes back on the sender. The proxy's own errors end the connection
they happen on, never the test.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["DelayProxy", "Delay", "delay_proxy", "HELD_CHUNKS"]

HELD_CHUNKS = 256
_CHUNK = 65536
_CONTROL_S = 30.0  # a control call's answer from the proxy's loop
T = TypeVar("T")


@dataclass(frozen=True)
class Delay:
    """One direction's delay: ``ms`` plus a uniform random ``jitter_ms`` per chunk."""

    ms: float = 0.0
    jitter_ms: float = 0.0


class DelayProxy:
    """A proxy to ``target`` on ``127.0.0.1:port``. Invariant: every connection it accepted and has not closed is in
    ``_links``; the loop thread alone touches them (control calls are run on it)."""

    def __init__(self, target: tuple[str, int], seed: int = 0) -> None:
        self.target = target
        self.up = Delay()
        self.down = Delay()
        self.port = 0
        self.accepted = 0
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._running = asyncio.Event()
        self._links: set[asyncio.Task[None]] = set()
        self._writers: dict[asyncio.Task[None], list[asyncio.StreamWriter]] = {}
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._call(self._start())

    async def _start(self) -> None:
        self._running.set()
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def set_delay(self, up: Delay, down: Delay | None = None) -> None:
        """``up`` for client-to-target bytes, ``down`` (``up`` when not given) for the answers."""
        self.up, self.down = up, up if down is None else down

    def pause(self) -> None:
        """Hold every byte (connections stay open) until :meth:`resume`."""
        self._loop.call_soon_threadsafe(self._running.clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._running.set)

    def cut(self) -> int:
        """Reset every open connection; returns how many there were."""
        return self._call(self._cut())

    async def _cut(self) -> int:
        links = list(self._links)
        for task in links:
            for writer in self._writers.get(task, []):
                _reset(writer)
            task.cancel()
        await asyncio.gather(*links, return_exceptions=True)
        return len(links)

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CONTROL_S)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._running.set()
        await self._cut()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the proxy's loop; its result (bounded wait)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_CONTROL_S)

    async def _link(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.accepted += 1
        self._links.add(task)
        self._writers[task] = [client_w]
        try:
            try:
                server_r, server_w = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers[task].append(server_w)
            up = asyncio.create_task(self._pump(client_r, server_w, lambda: self.up))
            down = asyncio.create_task(self._pump(server_r, client_w, lambda: self.down))
            try:
                await asyncio.gather(up, down)  # a side that closed first half-closes the other: its answers still go
            finally:
                up.cancel()
                down.cancel()
                await asyncio.gather(up, down, return_exceptions=True)
        finally:
            for writer in self._writers.pop(task):
                writer.close()
            self._links.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    delay: Callable[[], Delay]) -> None:
        """Copy ``reader`` to ``writer``, each chunk held until its time (``delay()``, read per chunk) and while
        paused; at the reader's end, the writer's side is shut for writing once everything held is written."""
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(HELD_CHUNKS)
        loop = asyncio.get_running_loop()

        async def read() -> None:
            due = 0.0
            try:
                while chunk := await reader.read(_CHUNK):
                    d = delay()
                    due = max(due, loop.time() + (d.ms + self._rng.uniform(0, d.jitter_ms)) / 1000)
                    await held.put((due, chunk))
            except OSError:
                pass
            await held.put((due, b""))

        reading = asyncio.create_task(read())
        try:
            while True:
                due, chunk = await held.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                await self._running.wait()
                if not chunk:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(chunk)
                await writer.drain()
        except OSError:
            return
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close ``writer``'s socket with a reset (SO_LINGER 0), as a broken link does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


@contextmanager
def delay_proxy(target: tuple[str, int], seed: int = 0) -> Iterator[DelayProxy]:
    """A started :class:`DelayProxy` to ``target`` for the block, closed however it ends."""
    proxy = DelayProxy(target, seed)
    try:
        proxy.start()
        yield proxy
    finally:
        proxy.close()
