"""Writing response frames to a Kafka connection: buffers through the transport, file regions with ``sendfile``.

A Kafka-native topic's stored batches reach the socket straight from the page cache (zero-copy, as a Kafka broker
serves its log): they are never read into walgate's memory. Invariant: bytes reach the socket in frame order,
because a region is sent only once the transport's buffer is empty (its water marks are 0, so ``drain`` returns
only then) and nothing goes through the transport until the region is sent whole.

Under TLS the socket carries ciphertext, so ``sendfile`` (which would put the file's plaintext on the wire) is never
used: a region is read with ``pread`` in pieces of ``_TLS_PIECE`` bytes and each written through the (TLS)
transport, which keeps its default water marks (``drain`` returns below the high mark), so at most a piece and
the transport's high-water mark of a response are in memory at a time (``bench/`` measures what this costs).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable

from walgate.storage.wal import FileRegion
from walgate.wire.protocol import Chunk

log = logging.getLogger("walgate.kafka")

_TLS_PIECE = 256 << 10


class FrameWriter:
    """Sends response frames on one connection; :meth:`close` when the connection ends."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._tls = writer.get_extra_info("ssl_object") is not None  # no sendfile: see the module docstring
        if not self._tls:
            # (uvloop's TLS transport does not wake a drain() at a zero low-water mark until the peer sends
            # something: TLS connections keep the default marks, which need no sendfile ordering)
            writer.transport.set_write_buffer_limits(high=0, low=0)
        self._writer = writer
        # a duplicate of the socket's descriptor, made at the first region: sendfile writes to it and the loop
        # watches it for writability (it refuses the transport's own), and it cannot be closed and reused
        # under us when the transport closes its descriptor
        self._fd: int | None = None

    async def write(self, chunks: Iterable[Chunk]) -> None:
        """Send one frame; returns once the kernel has all of it (back-pressure: one frame in flight)."""
        buffers: list[bytes | bytearray | memoryview] = []
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                buffers.append(chunk)
                continue
            if not isinstance(chunk, FileRegion):
                raise TypeError(f"cannot send a {type(chunk).__name__} chunk")
            if buffers:
                self._writer.writelines(buffers)
                buffers = []
            await self._writer.drain()
            await (self._copy(chunk) if self._tls else self._sendfile(chunk))
        if buffers:
            self._writer.writelines(buffers)
        await self._writer.drain()

    async def _sendfile(self, region: FileRegion) -> None:
        if self._fd is None:
            self._fd = os.dup(self._writer.get_extra_info("socket").fileno())
        offset, left = region.offset, region.length
        while left:
            if self._writer.transport.is_closing():  # closed as idle meanwhile, or reset by the peer
                raise ConnectionAbortedError("connection closed while a response was being sent")
            try:
                sent = os.sendfile(self._fd, region.file.fd, offset, left)
            except BlockingIOError:
                await self._writable(self._fd)
                continue
            if sent == 0:
                # the segment is shorter than its index says: the frame cannot be completed, so the connection ends
                log.error("kafka: WAL segment ended %d bytes early at byte %d; closing the connection", left, offset)
                raise ConnectionAbortedError("WAL segment shorter than its index")
            offset += sent
            left -= sent

    async def _copy(self, region: FileRegion) -> None:
        """Send ``region`` through the transport (TLS): read and write one piece at a time."""
        offset, left = region.offset, region.length
        while left:
            piece = os.pread(region.file.fd, min(left, _TLS_PIECE), offset)
            if not piece:
                log.error("kafka: WAL segment ended %d bytes early at byte %d; closing the connection", left, offset)
                raise ConnectionAbortedError("WAL segment shorter than its index")
            self._writer.write(piece)
            await self._writer.drain()
            offset += len(piece)
            left -= len(piece)

    @staticmethod
    async def _writable(fd: int) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_writer(fd, lambda: None if ready.done() else ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_writer(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
