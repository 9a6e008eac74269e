"""Kafka's TCP framing: every request and response is ``size:int32`` then ``size`` bytes.

:class:`FrameReader` is a sans-IO splitter in the style of h11's ``receive_data``:
the connection feeds it whatever bytes arrived and gets back every frame body
completed by them. Cost is linear in the bytes fed, whatever the chunking:

* small frames accumulate in one ``bytearray``; complete ones are sliced out
  through a ``memoryview`` (one copy each) and the consumed prefix is dropped
  (CPython removes a bytearray prefix without moving the rest);
* once the header of a frame of at least :data:`BIG_FRAME` bytes is known and
  its body is incomplete, the pieces are kept in a list and joined once when
  the last one arrives: one copy per byte, however many pieces (a 100 MiB
  Produce request in 64 KiB reads costs no more than in one read).

A size above ``max_frame_bytes`` raises :class:`FrameTooLarge` as soon as the
four size bytes are in, before any body is buffered; a negative size raises
:class:`MalformedFrame`. After either, the reader is unusable: the connection
has lost frame alignment and must be closed.

Between feeds the reader holds only the bytes received of the one incomplete
frame, never more (every complete frame has been returned). :attr:`FrameReader.next_size` tells the caller the size of that
incomplete frame as soon as its size bytes are in, so a caller with a memory
budget can reserve the whole frame before feeding any more of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from walgate.wire.errors import FrameTooLarge, MalformedFrame
from walgate.wire.serial import chunk_len

__all__ = ["BIG_FRAME", "FrameReader", "frame"]

BIG_FRAME: Final = 64 * 1024
"""Incomplete frames at least this large are collected as a list of pieces."""


class FrameReader:
    """Splits a byte stream into Kafka frame bodies (see module doc)."""

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._parts: list[bytes | memoryview] = []
        self._missing = 0  # bytes still needed by the big frame in _parts
        self._size = 0  # body size of the big frame in _parts

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buf) + sum(len(part) for part in self._parts)

    @property
    def next_size(self) -> int | None:
        """Body size of the incomplete frame, once its four size bytes are in; None otherwise."""
        if self._parts:
            return self._size
        if len(self._buf) >= 4:
            return int.from_bytes(self._buf[:4], "big", signed=True)
        return None

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Consume *data*; return every frame body (without size prefix) it completes."""
        frames: list[bytes] = []
        if self._parts:
            view = memoryview(data)
            if len(view) < self._missing:
                # bytes are immutable and kept as they are; anything else may be reused by the caller
                self._parts.append(data if isinstance(data, bytes) else bytes(view))
                self._missing -= len(view)
                return frames
            self._parts.append(view[: self._missing])
            frames.append(b"".join(self._parts))
            data = view[self._missing :]
            self._parts = []
            self._missing = 0
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:
            while end - pos >= 4:
                size = int.from_bytes(view[pos : pos + 4], "big", signed=True)
                if size < 0:
                    raise MalformedFrame(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameTooLarge(size, self.max_frame_bytes)
                start = pos + 4
                if end - start < size:
                    if size >= BIG_FRAME:
                        self._parts = [bytes(view[start:end])]
                        self._missing = size - (end - start)
                        self._size = size
                        pos = end
                    break
                frames.append(bytes(view[start : start + size]))
                pos = start + size
        if pos:
            del buf[:pos]
        return frames


def frame(chunks: Iterable[bytes | bytearray | memoryview]) -> list[bytes | bytearray | memoryview]:
    """*chunks* preceded by the 4-byte big-endian size of their total (ready for ``writelines``)."""
    parts = list(chunks)
    total = sum(map(chunk_len, parts))
    return [total.to_bytes(4, "big"), *parts]
