"""A peer that resets its connection while its request is being handled (hand-made bytes, live server).

Found by compat-tests/test_hostile.py: a consumer closing abruptly during a long-poll Fetch made the
connection task write the late response into the transport uvloop had already closed on ECONNRESET;
``writelines`` raised ``RuntimeError`` past the connection's error handling and asyncio logged
"Unhandled exception in client_connected_cb" with a traceback at ERROR. The answer to a peer that is
gone is dropped quietly, as for a peer that closed normally.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import running_walgate
from tests.gateway.test_kafka_bad_input import TIMEOUT, _api_versions_v0, _recv_frame, _send

TOPIC = b"hostile_frames"
MAX_WAIT_MS = 1500


def _long_poll_fetch_v12(correlation_id: int) -> bytes:
    """Fetch v12 of TOPIC partition 0 from offset 0 (empty), min_bytes 1: waits MAX_WAIT_MS for data."""
    header = struct.pack(">hhih", 1, 12, correlation_id, 4) + b"test" + b"\x00"
    # partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes, tags
    partition = struct.pack(">iiqiqi", 0, -1, 0, -1, -1, 1 << 20) + b"\x00"
    topics = b"\x02" + bytes([len(TOPIC) + 1]) + TOPIC + b"\x02" + partition + b"\x00"
    # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
    fixed = struct.pack(">iiiibii", -1, MAX_WAIT_MS, 1, 1 << 20, 0, 0, -1)
    return header + fixed + topics + b"\x01" + b"\x01" + b"\x00"  # forgotten topics, rack id, tags


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_walgate(tmp_path_factory.mktemp("hostile-frames")) as server:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
        futures = admin.create_topics([NewTopic(TOPIC.decode(), 1, 1)], operation_timeout=10, request_timeout=15)
        futures[TOPIC.decode()].result(timeout=20)
        del admin
        yield server


def test_the_long_poll_fetch_waits(server):
    """The premise: this Fetch is answered only after max_wait_ms."""
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=TIMEOUT) as sock:
        start = time.monotonic()
        _send(sock, _long_poll_fetch_v12(3))
        assert struct.unpack_from(">i", _recv_frame(sock))[0] == 3
        assert time.monotonic() - start >= MAX_WAIT_MS / 1000 * 0.8


def test_reset_during_a_long_poll_is_not_an_unhandled_error(server):
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", server.kafka_port), timeout=TIMEOUT)
        _send(sock, _long_poll_fetch_v12(7))
        time.sleep(0.3)  # the Fetch is waiting on the server
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # RST
    time.sleep(MAX_WAIT_MS / 1000 + 1.0)  # the Fetches end and their answers have nowhere to go
    assert _api_versions_v0(server.kafka_port)[0] == 0
    log = server.log()
    assert "Unhandled exception" not in log and "Traceback" not in log, log[-4000:]
