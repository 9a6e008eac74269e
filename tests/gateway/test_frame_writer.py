"""FrameWriter on uvloop and a real loopback socket: buffers and sendfile regions arrive in frame order, and a
peer that goes away or a file shorter than its region ends the write with an error instead of a hang."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from pathlib import Path

import uvloop

from walgate.gateway.kafka.frame_writer import FrameWriter
from walgate.storage.wal import FileRegion, SegmentFile

MB = 1 << 20


def _serve(chunks: list, client, close_after: float | None = None) -> tuple[object, object]:  # noqa: ANN001
    """Write ``chunks`` with a FrameWriter to one connection while ``client(port)`` runs in a thread (and close the
    connection after ``close_after`` seconds, as the idle sweeper would); returns (the client's result, the
    writer's exception or None)."""
    outcome: dict[str, object] = {}

    async def main() -> None:
        done = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            out = FrameWriter(writer)
            if close_after is not None:
                asyncio.get_running_loop().call_later(close_after, writer.close)
            try:
                await asyncio.wait_for(out.write(chunks), 30)
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc
            finally:
                out.close()
                writer.close()
                done.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        outcome["client"] = await asyncio.to_thread(client, port)
        await asyncio.wait_for(done.wait(), 30)
        server.close()
        await server.wait_closed()

    uvloop.run(main())
    return outcome["client"], outcome.get("error")


def _blob(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    return path, data


def _read_all(port: int, delay: float = 0.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        time.sleep(delay)  # the writer meets a full socket buffer and must wait for writability
        parts = []
        while chunk := s.recv(MB):
            parts.append(chunk)
        return b"".join(parts)


def test_buffers_and_regions_arrive_in_frame_order(tmp_path):
    path, data = _blob(tmp_path, 12 * MB)
    file = SegmentFile(path)
    chunks = [struct.pack(">i", 7), b"head", FileRegion(file, 3, 5 * MB), b"middle" * 1000,
              FileRegion(file, 5 * MB + 3, 7 * MB - 3), b"tail"]
    got, error = _serve(chunks, lambda port: _read_all(port, delay=0.3))
    assert error is None
    assert got == struct.pack(">i", 7) + b"head" + data[3 : 5 * MB + 3] + b"middle" * 1000 + data[5 * MB + 3 :] + b"tail"


def test_peer_that_resets_mid_region_ends_the_write(tmp_path):
    path, _ = _blob(tmp_path, 64 * MB)
    chunks = [b"head", FileRegion(SegmentFile(path), 0, 64 * MB)]

    def reset_after_a_little(port: int) -> int:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        got = len(s.recv(MB))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST
        return got

    got, error = _serve(chunks, reset_after_a_little)
    assert got > 0
    assert isinstance(error, ConnectionError), error


def test_file_shorter_than_its_region_aborts_the_connection(tmp_path, caplog):
    path, _ = _blob(tmp_path, MB)
    chunks = [b"head", FileRegion(SegmentFile(path), 0, 2 * MB)]
    got, error = _serve(chunks, _read_all)
    assert isinstance(error, ConnectionAbortedError), error
    assert len(got) == 4 + MB  # what there was, then the connection closed: the client sees a torn frame
    assert "ended" in caplog.text


def test_connection_closed_mid_region_ends_the_write(tmp_path):
    path, _ = _blob(tmp_path, 64 * MB)
    got, error = _serve([b"head", FileRegion(SegmentFile(path), 0, 64 * MB)],
                        lambda port: _read_all(port, delay=1.0), close_after=0.3)
    assert isinstance(error, ConnectionAbortedError), error
    assert 0 < len(got) < 4 + 64 * MB  # the client saw the connection end, not a whole frame
