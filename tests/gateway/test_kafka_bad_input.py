"""Bad input on the Kafka port: hand-made bytes (independent of walgate's wire code) against a live server.

Every case must end in the right Kafka answer or a closed connection, and the
server must keep serving other connections.
"""

from __future__ import annotations

import socket
import struct

import pytest

from livewalgate import running_walgate

TIMEOUT = 10


def _header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes = b"bad-input-test") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def _recv_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return _recv_exact(sock, size)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _closed(sock: socket.socket) -> bool:
    """True when the server closed the connection (EOF or reset) within the timeout."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _api_versions_v0(port: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error code, {api key: (min, max)}) from a hand-made ApiVersions v0 round trip."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        _send(sock, _header_v1(18, 0, 7))
        return _parse_api_versions_v0(_recv_frame(sock), 7)


def _parse_api_versions_v0(frame: bytes, correlation_id: int) -> tuple[int, dict[int, tuple[int, int]]]:
    cid, error, n = struct.unpack_from(">ihi", frame, 0)
    assert cid == correlation_id
    keys = {}
    for i in range(n):
        key, lo, hi = struct.unpack_from(">hhh", frame, 10 + 6 * i)
        keys[key] = (lo, hi)
    return error, keys


@pytest.fixture(scope="module")
def kafka_port(tmp_path_factory):
    with running_walgate(tmp_path_factory.mktemp("bad-input"), "--max-request-bytes", "65536") as server:
        yield server.kafka_port


def test_api_versions_v0_lists_what_is_handled(kafka_port):
    error, keys = _api_versions_v0(kafka_port)
    assert error == 0
    assert keys[18] == (0, 4)
    assert keys[3][1] >= 12 and keys[1] == (4, 17) and keys[2][1] >= 9


def test_unknown_api_versions_version_gets_kip_511_answer(kafka_port):
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as sock:
        _send(sock, _header_v1(18, 99, 42) + b"\x00")
        error, keys = _parse_api_versions_v0(_recv_frame(sock), 42)
    assert error == 35  # UNSUPPORTED_VERSION
    assert keys[18] == (0, 4)


@pytest.mark.parametrize(
    "payload",
    [
        _header_v1(999, 0, 1),  # unknown api key
        _header_v1(3, 99, 1),  # unsupported Metadata version
        _header_v1(3, 1, 1) + b"\x00\x00\x00\x05\x00",  # Metadata v1 whose topic array lies about its length
        b"\x00\x12",  # a header cut short
    ],
    ids=["unknown-api-key", "unsupported-version", "lying-array-length", "truncated-header"],
)
def test_bad_frames_close_only_their_connection(kafka_port, payload):
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as bad:
        _send(bad, payload)
        assert _closed(bad)
    assert _api_versions_v0(kafka_port)[0] == 0  # the server still answers others


def test_oversized_and_negative_frames_close_the_connection(kafka_port):
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as bad:
        bad.sendall(struct.pack(">i", 1 << 30))  # claims 1 GiB > max_request_bytes
        assert _closed(bad)
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as bad:
        bad.sendall(struct.pack(">i", -5))
        assert _closed(bad)
    assert _api_versions_v0(kafka_port)[0] == 0


def test_truncated_frame_then_disconnect_leaves_server_healthy(kafka_port):
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as bad:
        bad.sendall(struct.pack(">i", 100) + b"\x00" * 10)  # the rest never comes
    assert _api_versions_v0(kafka_port)[0] == 0


def test_a_slow_partial_frame_does_not_block_other_connections(kafka_port):
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as slow:
        slow.sendall(struct.pack(">i", 100) + b"\x00" * 3)
        assert _api_versions_v0(kafka_port)[0] == 0
