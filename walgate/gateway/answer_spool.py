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
A client that goes away mid-answer ends the relay, and so does one that stops reading: a chunk the transport has not
taken within :data:`SEND_TIMEOUT_S` aborts the connection. Once the answer's headers are sent, nothing else can be:
any failure after them (the client gone, too slow, a read of the file failing: EIO) is logged (a traceback only for
what is not an OSError: a bug) and the connection aborted, so the client sees a body shorter than its Content-Length,
never a second response inside it. The descriptor is closed either way.

The answer files the node holds (taken, being sent or read) are bounded together by an :class:`AnswersBudget`
(``sql.answers.max.bytes``): an answer that would pass it is refused with a retriable StorageUnavailable (503) and its
file removed, and its bytes are given back when its spool is closed.
"""

from __future__ import annotations

import asyncio
import errno
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

__all__ = ["CHUNK_BYTES", "CHUNK_ROWS", "SEND_TIMEOUT_S", "AnswersBudget", "Spool", "write_answer"]

log = logging.getLogger(__name__)

CHUNK_ROWS = 4096  # rows encoded by one orjson call in the worker
CHUNK_BYTES = 1 << 20  # bytes read and sent at a time by the node
SEND_TIMEOUT_S = 60.0  # a chunk the client's connection has not taken by then: the connection is aborted


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
    if exc.errno == errno.ENOENT:
        return StorageUnavailable(f"the query's answer could not be written: its directory {os.path.dirname(path)} "
                                  "was removed (the node makes another at its next query): retry")
    return StorageUnavailable(f"the query's answer could not be written to {os.path.dirname(path)} "
                              f"({exc.strerror or exc}): nothing was answered; free space there (TMPDIR) or narrow "
                              "the query")


class AnswersBudget:
    """The bytes of the answer files the node holds (taken spools), at most ``limit`` (``sql.answers.max.bytes``):
    :meth:`take` refuses what would pass it, :meth:`give` returns what a closed spool held."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def check(self) -> None:
        """StorageUnavailable when no answer fits now (a query is then refused before it runs)."""
        if self.used >= self.limit:
            raise self._refused("no more")

    def take(self, size: int) -> None:
        """Count ``size`` more bytes held; StorageUnavailable (retriable: the bytes held are given back as their
        answers are sent) when they would pass the limit."""
        if self.used + size > self.limit:
            raise self._refused(f"not this one's {size}")
        self.used += size

    def _refused(self, what: str) -> StorageUnavailable:
        return StorageUnavailable(
            f"the node holds {self.used} bytes of answers being sent and sql.answers.max.bytes ({self.limit}) allows "
            f"{what}: retry once they are sent, or narrow the query")

    def give(self, size: int) -> None:
        """``size`` bytes no longer held."""
        self.used -= size


class Spool:
    """A taken answer file (unlinked, open for reading) of ``size`` bytes, counted in ``budget`` until it is closed
    (by :meth:`send`, :meth:`read` or :meth:`close`)."""

    def __init__(self, file: BinaryIO, size: int, budget: AnswersBudget | None = None) -> None:
        self._file = file
        self.size = size
        self._budget = budget

    @classmethod
    def take(cls, path: str, size: int, budget: AnswersBudget | None = None) -> Spool:
        """The worker's answer file at ``path``, opened and unlinked (module docstring), its ``size`` bytes taken from
        ``budget`` (refused past it: the file is left to its caller)."""
        if budget is not None:
            budget.take(size)
        try:
            file = open(path, "rb")  # noqa: SIM115 - closed by send/read/close
        except BaseException:
            if budget is not None:
                budget.give(size)
            raise
        spool = cls(file, size, budget)
        try:
            os.unlink(path)
        except BaseException:
            spool.close()
            raise
        return spool

    async def send(self, request: web.Request, content_type: str = "application/json") -> web.StreamResponse:
        """The answer relayed to ``request``'s client as ``content_type``, :data:`CHUNK_BYTES` at a time (module
        docstring). Raises only what fails before the response is prepared (the error middleware answers it); a
        client gone is logged, and any other failure after that logged and the connection aborted: the client sees
        a body shorter than its Content-Length, never a second response."""
        response = web.StreamResponse()
        response.content_type = content_type
        response.content_length = self.size
        try:
            await response.prepare(request)
            while chunk := await asyncio.to_thread(self._file.read, CHUNK_BYTES):
                async with asyncio.timeout(SEND_TIMEOUT_S):
                    await response.write(chunk)
        except ConnectionError as exc:
            log.info("a SELECT's client %s went away while its answer was sent: %s", request.remote, exc)
        except Exception as exc:
            if not response.prepared:
                raise  # nothing sent: the error middleware answers it
            _cut_short(request, exc)
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
        """Free the file (its space with it) and give its bytes back to the budget (once)."""
        self._file.close()
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.give(self.size)


def _cut_short(request: web.Request, exc: Exception) -> None:
    """``request``'s answer, begun, ended by ``exc``: logged (a traceback only for what is not an OSError: a bug)
    and its connection closed at once, so that its client sees a body shorter than its Content-Length."""
    if isinstance(exc, TimeoutError):
        log.warning("a SELECT's client %s took no part of its answer for %.0f s: its connection is closed",
                    request.remote, SEND_TIMEOUT_S)
    elif isinstance(exc, OSError):
        log.warning("a SELECT's answer could not be read from its file (%s): its client %s gets it cut short",
                    exc, request.remote)
    else:
        log.error("a SELECT's answer could not be sent to %s: its client gets it cut short", request.remote,
                  exc_info=exc)
    if request.transport is not None:
        request.transport.abort()
