"""Produce requests whose records end with a record batch header of negative (or too small) length or record
count, with acks=1 and acks=0, in hand-made bytes against a live ``walgate serve``, then a real client
(confluent-kafka) producing with acks=0.

With acks=1 each gets CORRUPT_MESSAGE or INVALID_RECORD for its partition, and the same connection answers the
ApiVersions request sent after it; with acks=0 no answer, and the connection is closed (Kafka's ``handleProduceRequest``:
the only way a client that waits for no answer learns of the error), with the refusal in its "closed" line. The request metrics count only the records a Produce appended, whatever the acks
(the bad partitions add nothing to ``messagesin``/``bytesin``), so they equal what the client produced. The server's
log has no traceback and no ERROR line, and every connection's "closed" line is there.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from livewalgate import WalgateServer, running_walgate
from tests.gateway.test_kafka_bad_input import TIMEOUT, _header_v1, _parse_api_versions_v0, _recv_frame, _send

TOPIC = "bad-headers"
PRODUCED = 5  # records the real client produces with acks=0
REFUSED = {2, 87}  # CORRUPT_MESSAGE, INVALID_RECORD
HEADER = struct.Struct(">qiiBIhiqqqhii")  # RecordBatch v2: base offset ... record count (61 bytes)
LENGTHS = [-1, -12, -13, -61, -100, -(2**31), 0, 8]  # what follows the length field: never fewer than 49 bytes
COUNTS = [-1, -(2**31)]


def header(length: int = 49, count: int = 0) -> bytes:
    """A batch header (magic 2) whose length and record count are given; nothing follows it but what length says."""
    return HEADER.pack(0, length, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, count)


BAD = {f"length {n}": header(length=n) for n in LENGTHS} | {f"count {n}": header(count=n) for n in COUNTS}
BAD |= {f"an empty batch, then length {n}": header() + header(length=n) for n in (-12, -100)}


def produce_v3(acks: int, records: bytes, correlation_id: int) -> bytes:
    """Produce v3 (hand-made): transactional id null, acks, timeout, one topic with partition 0's records."""
    topic = struct.pack(">h", len(TOPIC)) + TOPIC.encode()
    partition = struct.pack(">ii", 0, len(records)) + records
    return (_header_v1(0, 3, correlation_id) + struct.pack(">hhi", -1, acks, 5000) + struct.pack(">i", 1) + topic
            + struct.pack(">i", 1) + partition)


def partition_error(frame: bytes, correlation_id: int) -> int:
    """The error code of the one partition of a Produce v3 response."""
    (cid,) = struct.unpack_from(">i", frame)
    assert cid == correlation_id
    (name_len,) = struct.unpack_from(">h", frame, 8)
    index, error = struct.unpack_from(">ih", frame, 10 + name_len + 4)
    assert index == 0
    return error


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WalgateServer]:
    with running_walgate(tmp_path_factory.mktemp("bad-headers")) as server:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        yield server


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_batch_header_is_answered_and_the_connection_goes_on(server: WalgateServer, case: str) -> None:
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=TIMEOUT) as sock:
        _send(sock, produce_v3(1, BAD[case], 11))
        assert partition_error(_recv_frame(sock), 11) in REFUSED
        _send(sock, _header_v1(18, 0, 12))
        assert _parse_api_versions_v0(_recv_frame(sock), 12)[0] == 0


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_batch_header_with_acks_0_closes_the_connection(server: WalgateServer, case: str) -> None:
    with socket.create_connection(("127.0.0.1", server.kafka_port), timeout=TIMEOUT) as sock:
        _send(sock, produce_v3(0, BAD[case], 11))
        _send(sock, _header_v1(18, 0, 12))  # pipelined behind it: never answered
        try:
            assert sock.recv(1) == b""  # closed, with nothing sent first
        except ConnectionResetError:  # closed with the pipelined request unread: the kernel resets, sending nothing
            pass
    deadline = time.monotonic() + 30
    while "correlation id 11) was refused, closed so that the client notices: bad-headers-0: " not in server.log():
        assert time.monotonic() < deadline, "no closed line naming the refused partition"
        time.sleep(0.1)


def _metric(text: str, name: str) -> float:
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == name and s.labels.get("topic") == TOPIC]
    assert len(found) == 1, (name, found)
    return found[0]


def test_only_appended_records_count_and_the_log_is_clean(server: WalgateServer) -> None:
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 0, "linger.ms": 0})
    values = [b"value-%d" % i for i in range(PRODUCED)]
    for value in values:
        producer.produce(TOPIC, value, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bad-headers-check"})
    try:
        deadline = time.monotonic() + 30  # acks=0: the records land after flush() returns
        while consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=TIMEOUT)[1] < PRODUCED:
            assert time.monotonic() < deadline, "the acks=0 records did not land"
            time.sleep(0.1)
    finally:
        consumer.close()
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    assert _metric(text, "kafka_server_brokertopicmetrics_messagesin_total") == PRODUCED
    assert _metric(text, "kafka_server_brokertopicmetrics_bytesin_total") > sum(map(len, values))
    assert server.proc.poll() is None
    log = server.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000: log.index("Traceback") + 3000]
    errors = [line for line in log.splitlines() if re.search(r"\d ERROR ", line)]
    assert not errors, "\n".join(errors[:20])
    deadline = time.monotonic() + 30  # every hand-made connection (client id bad-input-test) logged its closing
    while (counts := _opened_closed(server.log()))[0] != counts[1] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts[0] == counts[1] == 2 * len(BAD), counts


def _opened_closed(log: str) -> tuple[int, int]:
    """(connections opened, connections closed) the log names with client id 'bad-input-test'."""
    return (len(re.findall(r"kafka connection from \S+ opened: client id 'bad-input-test'", log)),
            len(re.findall(r"kafka connection from \S+ closed \(.*\): client id 'bad-input-test'", log)))
