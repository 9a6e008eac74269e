"""Idle Kafka connections are closed after ``--connections-max-idle-ms`` (Kafka's connections.max.idle.ms).

A live server with a 1 s limit: a connection that stalls mid-frame or never sends is closed; one that keeps
sending requests is not; a real client idle past the limit reconnects and works; the setting is reported
by DescribeConfigs like Kafka's.
"""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from livewalgate import running_walgate
from tests.gateway.test_kafka_bad_input import _closed, _header_v1, _parse_api_versions_v0, _recv_frame, _send

IDLE_MS = 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_walgate(tmp_path_factory.mktemp("idle"), "--connections-max-idle-ms", str(IDLE_MS)) as server:
        yield server


def _connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.kafka_port), timeout=IDLE_MS / 1000 * 6)


def test_a_connection_stalled_mid_frame_is_closed(server):
    with _connect(server) as sock:
        sock.sendall(b"\x00\x00\x00\x40\x00\x12")  # 64 bytes announced, 2 sent
        start = time.monotonic()
        assert _closed(sock)
        assert time.monotonic() - start >= IDLE_MS / 1000 * 0.9


def test_a_connection_that_never_sends_is_closed(server):
    with _connect(server) as sock:
        assert _closed(sock)


def test_a_busy_connection_stays_open(server):
    with _connect(server) as sock:
        deadline = time.monotonic() + 3 * IDLE_MS / 1000
        correlation = 0
        while time.monotonic() < deadline:
            correlation += 1
            _send(sock, _header_v1(18, 0, correlation))
            error, _ = _parse_api_versions_v0(_recv_frame(sock), correlation)
            assert error == 0
            time.sleep(IDLE_MS / 1000 / 4)


def test_a_client_idle_past_the_limit_reconnects(server):
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("idle", 1, 1)])["idle"].result(30)
    config = admin.describe_configs([ConfigResource("BROKER", "0")])
    (entries,) = [f.result(30) for f in config.values()]
    assert entries["connections.max.idle.ms"].value == str(IDLE_MS)
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in (b"before", b"after"):
        producer.produce("idle", value, partition=0)
        assert producer.flush(30) == 0
        time.sleep(3 * IDLE_MS / 1000)  # the server closes the producer's connections meanwhile
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("idle", 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"before", b"after"]
    finally:
        consumer.close()
    assert "idle for" in server.log()
