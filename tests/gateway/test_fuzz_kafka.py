"""Seeded, bounded fuzzing of every advertised (api key, version) against one real ``walgate serve``.

Each example is one request with a valid header and a body that is either a random valid request of that
version (hypothesis builds it from the schema and walgate's encoder writes it) or such a body mutated: random
bytes, a truncation, bit flips, a length or count field replaced by a huge or negative value, trailing garbage.
Half the Produce requests write a real record batch (any codec, itself possibly mutated) to the topic the
server was given, so the record decoders and the write path are fuzzed too.
It goes on a fresh connection, followed by a pipelined ApiVersions request. Every example must end in

* a well-formed response of that api key and version (its correlation id, then a body that decodes to the
  last byte), followed by the ApiVersions answer; or
* no response at all where Kafka gives none (Produce with acks=0), then the ApiVersions answer; or
* the connection closed by the server (a malformed request, as Kafka does); or
* for the APIs that may wait (Fetch, JoinGroup, SyncGroup), no answer yet after ``WAIT_S``: the peer goes away.

At the end the server still answers, its resident memory grew by less than ``RSS_GROWTH_MIB``, and its log has
no traceback and no ERROR line. The CI slice sends ``EXAMPLES`` requests per (api key, version), a few thousand
in all; ``WALGATE_FUZZ_LONG=1`` sends ``LONG_EXAMPLES`` per version (tens of thousands) with fresh randomness.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import struct
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from livewalgate import running_walgate
from tests.gateway.test_kafka_bad_input import TIMEOUT, _header_v1, _parse_api_versions_v0
from tests.wire.wire_helpers import instances
from walgate.gateway.kafka.handlers import advertised
from walgate.wire import encode_batch
from walgate.wire.compression import CODECS
from walgate.wire.protocol import (
    encode_request,
    parse_request_header,
    request_class,
    response_class,
    response_header_version,
)
from walgate.wire.serial import decoder, fields_of, read_uvarint

LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"
EXAMPLES = 30
TOPIC = "0"
LONG_EXAMPLES = 200
WAIT_S = 2.0
RSS_GROWTH_MIB = 256
MAY_WAIT = {1, 11, 14}  # Fetch (max_wait_ms), JoinGroup and SyncGroup (parked until the group moves)
NO_ANSWER_OK = {0}  # Produce with acks=0
FUZZ_CID = 0x3F00_0001
PROBE_CID = 0x3F00_0002
VERSIONS = [(key, v) for key, (low, high) in sorted(advertised().items()) for v in range(low, high + 1)]

OUTCOMES: Counter[str] = Counter()

_HUGE_INT32 = [0x7FFF_FFFF, 0xFFFF_FFFF, 0x8000_0000, 0x00FF_FFFF, 0xFFFF_FFFE]
_HUGE_INT16 = [0x7FFF, 0xFFFF, 0x8000, 0xFFFE]
_HUGE_UVARINT = [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x10", b"\xfe\xff\xff\xff\x0f"]


@st.composite
def _mutated(draw: Any, body: bytes) -> bytes:
    kind = draw(st.sampled_from(["valid", "random", "truncate", "flip", "huge", "trailing"]))
    if kind == "valid" or (not body and kind in ("truncate", "flip", "huge")):
        return body
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "truncate":
        return body[: draw(st.integers(0, len(body) - 1))]
    if kind == "trailing":
        return body + draw(st.binary(min_size=1, max_size=64))
    data = bytearray(body)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            bit = draw(st.integers(0, len(data) * 8 - 1))
            data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data)
    pos = draw(st.integers(0, len(data)))
    width = draw(st.sampled_from(["int32", "int16", "uvarint"]))
    if width == "int32":
        value = draw(st.sampled_from(_HUGE_INT32)).to_bytes(4, "big")
    elif width == "int16":
        value = draw(st.sampled_from(_HUGE_INT16)).to_bytes(2, "big")
    else:
        value = draw(st.sampled_from(_HUGE_UVARINT))
    if draw(st.booleans()):
        data[pos: pos + len(value)] = value  # overwrite (a length, a count)
    else:
        data[pos:pos] = value  # insert
    return bytes(data)


def _entity(cls: type, name: str) -> type:
    entity = next(info.entity for info in fields_of(cls) if info.name == name)
    assert entity is not None
    return entity


@st.composite
def _produce(draw: Any, version: int) -> Any:
    """A Produce request of a real record batch (possibly mutated) to a partition (or none) of TOPIC."""
    cls = request_class(0, version)
    topic_cls = _entity(cls, "topic_data")
    partition_cls = _entity(topic_cls, "partition_data")
    n = draw(st.integers(1, 4))
    batch = encode_batch(
        0, [draw(st.integers(0, 2**42)) for _ in range(n)], [draw(st.none() | st.binary(max_size=8)) for _ in range(n)],
        [draw(st.none() | st.binary(max_size=64)) for _ in range(n)],
        compression=draw(st.sampled_from([None, *CODECS])),
    )
    partition = partition_cls(index=draw(st.integers(-1, 2)), records=draw(_mutated(batch)))
    return cls(transactional_id=None, acks=draw(st.sampled_from([-1, 1, 0])), timeout=datetime.timedelta(seconds=1),
               topic_data=(topic_cls(name=TOPIC, partition_data=(partition,)),))


@st.composite
def _request(draw: Any, api_key: int, version: int) -> bytes:
    """A request frame (size prefix included): a valid header and a (mutated) body."""
    if api_key == 0 and draw(st.booleans()):
        message = draw(_produce(version))
    else:
        message = draw(instances(request_class(api_key, version)))
    valid = encode_request(api_key, version, FUZZ_CID, "fuzz", message)
    header_size = parse_request_header(valid[4:]).size
    body = draw(_mutated(valid[4 + header_size:]))
    OUTCOMES["mutated" if body != valid[4 + header_size:] else "valid"] += 1
    payload = valid[4: 4 + header_size] + body
    return struct.pack(">i", len(payload)) + payload


def _probe() -> bytes:
    head = _header_v1(18, 0, PROBE_CID)
    return struct.pack(">i", len(head)) + head


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """*n* bytes, or None when the server closed the connection first."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    size = _recv_exact(sock, 4)
    return None if size is None else _recv_exact(sock, struct.unpack(">i", size)[0])


def _check_response(frame: bytes, api_key: int, version: int) -> None:
    """A well-formed response of (api_key, version): header, then a body that decodes to the last byte."""
    cls = response_class(api_key, version)
    pos = 4
    if response_header_version(api_key, version) == 1:  # tagged fields after the correlation id
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    _, end = decoder(cls)(frame, pos)
    assert end == len(frame), f"{cls.__name__}: {len(frame) - end} bytes after the response"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_walgate(tmp_path_factory.mktemp("fuzz"), "--group-initial-rebalance-delay-ms", "0") as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        # a topic named as hypothesis names things first ("0"), with records, so fuzzed requests reach partitions
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(20):
            producer.produce(TOPIC, f"value {i}".encode(), key=b"k", partition=i % 2)
        assert producer.flush(30) == 0
        yield server, server.rss_mib()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@settings(
    max_examples=LONG_EXAMPLES if LONG else EXAMPLES,
    derandomize=not LONG,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_fuzzed_request_is_answered_or_closed(server, api_key, version, data) -> None:
    live, _ = server
    request = data.draw(_request(api_key, version), label="request")
    with socket.create_connection(("127.0.0.1", live.kafka_port), timeout=WAIT_S) as sock:
        try:
            sock.sendall(request + _probe())
        except (BrokenPipeError, ConnectionResetError):
            OUTCOMES["closed"] += 1
            return
        try:
            frame = _recv_frame(sock)
        except TimeoutError:
            assert api_key in MAY_WAIT, f"no answer to api key {api_key} v{version} within {WAIT_S} s"
            OUTCOMES["waiting"] += 1
            return
        if frame is None:
            OUTCOMES["closed"] += 1
            return
        (cid,) = struct.unpack_from(">i", frame)
        if cid == FUZZ_CID:
            _check_response(frame, api_key, version)
            OUTCOMES["answered"] += 1
            frame = _recv_frame(sock)
            assert frame is not None, "the connection closed after a well-formed answer"
        else:
            assert api_key in NO_ANSWER_OK, f"api key {api_key} v{version} answered nothing"
            OUTCOMES["no answer"] += 1
        assert _parse_api_versions_v0(frame, PROBE_CID)[0] == 0


def test_the_server_survived_with_bounded_memory_and_a_clean_log(server) -> None:
    live, rss_before = server
    assert live.proc.poll() is None
    with socket.create_connection(("127.0.0.1", live.kafka_port), timeout=TIMEOUT) as sock:
        sock.sendall(_probe())
        assert _parse_api_versions_v0(_recv_frame(sock) or b"", PROBE_CID)[0] == 0
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{live.kafka_port}", "group.id": "fuzz-check"})
    try:
        records = sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=TIMEOUT)[1] for p in (0, 1))
    finally:
        consumer.close()
    grown = live.rss_mib() - rss_before
    log = live.log()
    print(f"fuzz outcomes: {dict(sorted(OUTCOMES.items()))}; {records} records in {TOPIC!r}; "
          f"RSS grew by {grown:.0f} MiB")
    assert records > 20  # fuzzed Produce requests did reach the write path
    assert grown < RSS_GROWTH_MIB
    assert "Traceback" not in log, log[log.index("Traceback") - 2000: log.index("Traceback") + 3000]
    errors = [line for line in log.splitlines() if re.search(r"\d ERROR ", line)]
    assert not errors, "\n".join(errors[:50])
