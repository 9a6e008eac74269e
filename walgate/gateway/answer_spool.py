"""A SELECT's JSON answer spooled to a file by its query worker and relayed to the HTTP client in chunks.

The worker (:mod:`walgate.gateway.query_workers`) writes the TDengine-REST body of the result
(:func:`write_answer`) to a new file in the node's spool directory, :data:`CHUNK_ROWS` rows at a time: one orjson
call per chunk, the query's cancellation checked between chunks, refused (LimitExceeded) once it passes
``sql.max.bytes``; a disk that refuses a write (ENOSPC, EIO, a short write: :func:`walgate.storage.fileio.write_all`)
fails the query with StorageUnavailable (503) and leaves no file. The bytes are exactly ``orjson.dumps(result.rest_body())``: orjson writes compact JSON, so a
list's encoding is its chunks' encodings joined by commas. A scan's Arrow IPC rows (a node's part of a query merged
across nodes, :mod:`walgate.storage.select_merge`) are written as they are.

The node takes the file (:meth:`Spool.take`: opened, then unlinked at once, so it is gone from the directory while
the answer is sent and its space is freed when the descriptor is closed) and relays it :data:`CHUNK_BYTES` at a
time (:meth:`Spool.send`): a chunk is read on a thread and the next is read only once the response's transport has
taken the last (aiohttp's drain), so the node holds at most about one chunk of an answer, never decodes it, and its
event loop and GIL are never held for a whole answer (a pipe's unpickling of a 150 MiB answer held them ~0.7 s).
A client that goes away mid-answer ends the relay; the descriptor is closed either way.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from typing import BinaryIO

import orjson
from aiohttp import web

from walgate.storage import fileio
from walgate.storage.cancel import Cancel
from walgate.storage.errors import LimitExceeded, StorageUnavailable
from walgate.storage.result import Result

__all__ = ["CHUNK_BYTES", "CHUNK_ROWS", "Spool", "write_answer"]

log = logging.getLogger(__name__)

CHUNK_ROWS = 4096  # rows encoded by one orjson call in the worker
CHUNK_BYTES = 1 << 20  # bytes read and sent at a time by the node


def write_answer(path: str, result: Result | bytes, max_bytes: int, cancel: Cancel) -> int:
    """Write ``result``'s REST body (or the bytes ``result``: a scan's Arrow IPC rows) to the new file ``path``
    (module docstring); its size. On any error (the query
    cancelled, the answer past ``max_bytes``, the disk: StorageUnavailable) the file is removed and the error
    raised."""
    written = 0
    pending = bytearray()  # the small pieces between chunks, written with the next chunk

    def put(fd: int, data: bytes, flush: bool = False) -> None:
        nonlocal written
        written += len(data)
        if written > max_bytes:
            raise LimitExceeded(f"the query's answer is larger than {max_bytes} bytes (sql.max.bytes): narrow it, "
                                "or ask for fewer columns or rows (LIMIT)")
        pending.extend(data)
        if flush or len(pending) >= CHUNK_BYTES:
            fileio.write_all(fd, bytes(pending))
            pending.clear()

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # a new file: never another query's
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        try:
            for piece in _pieces(result, cancel):
                put(fd, piece)
            put(fd, b"", flush=True)
        finally:
            os.close(fd)
    except BaseException as exc:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise _unwritable(path, exc) from None
        raise
    return written


def _pieces(result: Result | bytes, cancel: Cancel) -> Iterator[bytes]:
    """The answer's bytes in pieces: ``result``'s REST body, :data:`CHUNK_ROWS` rows a piece (``cancel`` checked
    before each), or the bytes ``result`` :data:`CHUNK_BYTES` at a time."""
    if isinstance(result, bytes):
        for start in range(0, len(result), CHUNK_BYTES):
            yield result[start:start + CHUNK_BYTES]
        return
    for k, (key, value) in enumerate(result.rest_body().items()):
        yield (b"{" if k == 0 else b",") + orjson.dumps(key) + b":"
        if key != "data":
            yield orjson.dumps(value)
            continue
        yield b"["
        for start in range(0, len(value), CHUNK_ROWS):
            cancel.check()
            yield (b"," if start else b"") + orjson.dumps(value[start:start + CHUNK_ROWS])[1:-1]
        yield b"]"
    yield b"}"


def _unwritable(path: str, exc: OSError) -> StorageUnavailable:
    return StorageUnavailable(f"the query's answer could not be written to {os.path.dirname(path)} "
                              f"({exc.strerror or exc}): nothing was answered; free space there (TMPDIR) or narrow "
                              "the query")


class Spool:
    """A taken answer file (unlinked, open for reading) of ``size`` bytes; closed by :meth:`send`, :meth:`read` or
    :meth:`close`."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self._file = file
        self.size = size

    @classmethod
    def take(cls, path: str, size: int) -> Spool:
        """The worker's answer file at ``path``, opened and unlinked (module docstring)."""
        file = open(path, "rb")  # noqa: SIM115 - closed by send/read/close
        try:
            os.unlink(path)
        except BaseException:
            file.close()
            raise
        return cls(file, size)

    async def send(self, request: web.Request, content_type: str = "application/json") -> web.StreamResponse:
        """The answer relayed to ``request``'s client as ``content_type``, :data:`CHUNK_BYTES` at a time (module
        docstring); a client that goes away ends it (logged, not raised: the answer is the client's to lose)."""
        response = web.StreamResponse()
        response.content_type = content_type
        response.content_length = self.size
        try:
            await response.prepare(request)
            while chunk := await asyncio.to_thread(self._file.read, CHUNK_BYTES):
                await response.write(chunk)
        except ConnectionError as exc:
            log.info("a SELECT's client %s went away while its answer was sent: %s", request.remote, exc)
        finally:
            self.close()
        return response

    async def read(self) -> bytes:
        """The whole answer (read on a thread), for a caller that merges it with other nodes' answers."""
        try:
            return await asyncio.to_thread(self._file.read)
        finally:
            self.close()

    def close(self) -> None:
        """Free the file (its space with it)."""
        self._file.close()
