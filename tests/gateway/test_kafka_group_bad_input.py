"""Bad group requests on the Kafka port: hand-made bytes against a live server (issue 4's bad-input list).

Each gets its Kafka error code, and the group of a well-behaved KIP-848 member (a real confluent-kafka
consumer) next to them keeps its assignment throughout.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from livewalgate import running_walgate
from tests.gateway.test_kafka_bad_input import TIMEOUT, _closed, _header_v1, _recv_frame, _send

INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT = 23, 25, 26
UNKNOWN_TOPIC_OR_PARTITION, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST = 3, 112, 42


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _compact_str(s: str | None) -> bytes:
    return b"\x00" if s is None else bytes([len(s) + 1]) + s.encode()


def _roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        _send(sock, payload)
        return _recv_frame(sock)


def join_group_v0(port: int, group: str, protocols: list[tuple[str, bytes]], session_ms: int = 10_000,
                  protocol_type: str = "consumer") -> int:
    body = _str(group) + struct.pack(">i", session_ms) + _str("") + _str(protocol_type) + struct.pack(">i", len(protocols))
    for name, metadata in protocols:
        body += _str(name) + struct.pack(">i", len(metadata)) + metadata
    frame = _roundtrip(port, _header_v1(11, 0, 1) + body)
    return struct.unpack_from(">h", frame, 4)[0]


def heartbeat_v0(port: int, group: str, generation: int, member: str) -> int:
    frame = _roundtrip(port, _header_v1(12, 0, 2) + _str(group) + struct.pack(">i", generation) + _str(member))
    return struct.unpack_from(">h", frame, 4)[0]


def offset_commit_v2(port: int, group: str, topic: str, partition: int) -> int:
    body = (_str(group) + struct.pack(">i", -1) + _str("") + struct.pack(">q", -1) + struct.pack(">i", 1) + _str(topic)
            + struct.pack(">i", 1) + struct.pack(">iq", partition, 5) + _str(""))
    frame = _roundtrip(port, _header_v1(8, 2, 3) + body)
    # correlation id, topics[1], name, partitions[1], partition index, error code
    pos = 4 + 4
    (name_len,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + name_len + 4 + 4
    return struct.unpack_from(">h", frame, pos)[0]


def consumer_group_heartbeat_v0(port: int, group: str, member: str, epoch: int, *, assignor: str | None = None,
                                topics: list[str] | None = None) -> tuple[int, str | None]:
    """(error code, error message) of a hand-encoded ConsumerGroupHeartbeat v0 (flexible)."""
    header = struct.pack(">hhih", 68, 0, 4, 4) + b"test" + b"\x00"
    names = topics or []
    body = (_compact_str(group) + _compact_str(member) + struct.pack(">i", epoch) + _compact_str(None)
            + _compact_str(None) + struct.pack(">i", 60_000 if epoch == 0 else -1)
            + (bytes([len(names) + 1]) + b"".join(_compact_str(t) for t in names) if epoch == 0 else b"\x00")
            + _compact_str(assignor) + (b"\x01" if epoch == 0 else b"\x00") + b"\x00")
    frame = _roundtrip(port, header + body)
    # correlation id, header tagged fields, throttle, error code, error message (compact nullable)
    error = struct.unpack_from(">h", frame, 4 + 1 + 4)[0]
    length = frame[4 + 1 + 4 + 2] - 1
    message = None if length < 0 else frame[12:12 + length].decode()
    return error, message


@pytest.fixture(scope="module")
def kafka_port(tmp_path_factory) -> Iterator[int]:
    with running_walgate(tmp_path_factory.mktemp("group-bad-input"), "--group-initial-rebalance-delay-ms", "0") as server:
        import urllib.request

        for sql in ("CREATE DATABASE gb VGROUPS 2", "CREATE STABLE gb.m (ts TIMESTAMP, v INT) TAGS (s INT)",
                    "CREATE TOPIC gbt AS STABLE gb.m", "INSERT INTO gb.a USING gb.m TAGS (1) VALUES (1000, 1)"):
            urllib.request.urlopen(urllib.request.Request(server.http_url + "/rest/sql", data=sql.encode()), timeout=10)
        yield server.kafka_port


@pytest.fixture(scope="module")
def healthy_member(kafka_port) -> Iterator[Consumer]:
    """A KIP-848 member owning both partitions of gbt in group `healthy`."""
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "group.id": "healthy", "group.protocol": "consumer"})
    c.subscribe(["gbt"])
    deadline = time.monotonic() + 20
    while len(c.assignment()) < 2 and time.monotonic() < deadline:
        c.poll(0.2)
    assert len(c.assignment()) == 2
    yield c
    c.close()


def still_healthy(c: Consumer) -> None:
    for _ in range(5):
        c.poll(0.1)
    assert sorted(tp.partition for tp in c.assignment()) == [0, 1]


def test_join_without_protocols_is_inconsistent(kafka_port, healthy_member):
    assert join_group_v0(kafka_port, "bad1", []) == INCONSISTENT_GROUP_PROTOCOL
    still_healthy(healthy_member)


def test_join_of_another_protocol_type_into_a_consumer_group_is_inconsistent(kafka_port, healthy_member):
    assert join_group_v0(kafka_port, "healthy", [("default", b"x")], protocol_type="connect") \
        == INCONSISTENT_GROUP_PROTOCOL
    still_healthy(healthy_member)


def test_join_with_unparsable_subscription_into_a_consumer_group_is_inconsistent(kafka_port, healthy_member):
    assert join_group_v0(kafka_port, "healthy", [("range", b"\x00\x01\xff\xff\xff")]) == INCONSISTENT_GROUP_PROTOCOL
    still_healthy(healthy_member)


def test_join_with_a_session_timeout_out_of_bounds(kafka_port, healthy_member):
    assert join_group_v0(kafka_port, "bad2", [("range", b"")], session_ms=100) == INVALID_SESSION_TIMEOUT
    assert join_group_v0(kafka_port, "healthy", [("range", b"")], session_ms=100) == INVALID_SESSION_TIMEOUT
    still_healthy(healthy_member)


def test_heartbeats_of_unknown_members(kafka_port, healthy_member):
    assert heartbeat_v0(kafka_port, "healthy", 1, "nobody") == UNKNOWN_MEMBER_ID
    assert heartbeat_v0(kafka_port, "nothing-here", 1, "nobody") == UNKNOWN_MEMBER_ID
    assert consumer_group_heartbeat_v0(kafka_port, "healthy", "nobody", 3)[0] == UNKNOWN_MEMBER_ID
    still_healthy(healthy_member)


def test_consumer_group_heartbeat_refusals(kafka_port, healthy_member):
    error, message = consumer_group_heartbeat_v0(kafka_port, "bad3", "m", 0, assignor="range", topics=["gbt"])
    assert error == UNSUPPORTED_ASSIGNOR and "uniform" in (message or "")
    assert consumer_group_heartbeat_v0(kafka_port, "bad3", "", 5)[0] == INVALID_REQUEST  # epoch > 0 needs a member id
    assert consumer_group_heartbeat_v0(kafka_port, "", "m", 0, topics=["gbt"])[0] == INVALID_REQUEST
    still_healthy(healthy_member)


def test_commit_for_a_partition_that_does_not_exist(kafka_port, healthy_member):
    assert offset_commit_v2(kafka_port, "bad4", "gbt", 7) == UNKNOWN_TOPIC_OR_PARTITION
    assert offset_commit_v2(kafka_port, "bad4", "no-such-topic", 0) == UNKNOWN_TOPIC_OR_PARTITION
    still_healthy(healthy_member)


def test_truncated_consumer_group_heartbeat_closes_only_its_connection(kafka_port, healthy_member):
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=TIMEOUT) as sock:
        _send(sock, struct.pack(">hhih", 68, 0, 9, 4) + b"test" + b"\x00" + b"\x05gr")
        assert _closed(sock)
    still_healthy(healthy_member)
