"""Request headers, request decoding, response building/encoding, across every wire version."""

from __future__ import annotations

import datetime
import io
import os
import random
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from wire_helpers import instances

from walgate.wire import legacy, protocol
from walgate.wire.errors import ErrorCode, MalformedFrame, UnsupportedVersion, WireError
from walgate.wire.protocol import (
    WIRE_VERSIONS,
    RequestHeader,
    api_versions_fallback,
    build_response,
    decode_request,
    encode_request,
    encode_response,
    parse_request_header,
    request_class,
    request_header_version,
    response_class,
    response_header_version,
)
from walgate.wire.serial import BIG_VALUE, decoder, encoder

REQUIRED = {
    18: (0, 4), 3: (0, 12), 2: (0, 9), 1: (4, 17), 60: (0, 1), 75: (0, 0), 10: (0, 6), 11: (0, 9),
    14: (0, 5), 12: (0, 4), 13: (0, 5), 8: (0, 9), 9: (0, 9), 15: (0, 5), 16: (0, 5), 42: (0, 2),
    47: (0, 0), 68: (0, 1), 69: (0, 1), 0: (3, 12), 22: (0, 5), 19: (0, 7), 20: (0, 6), 37: (0, 3),
    32: (0, 4), 33: (0, 2), 44: (0, 1), 21: (0, 2), 23: (0, 4),
}
ALL_VERSIONS = [(key, v) for key, (low, high) in sorted(WIRE_VERSIONS.items()) for v in range(low, high + 1)]


def _mine(cls: type, value: object) -> bytes:
    out: list[object] = []
    tail = encoder(cls)(bytearray(), out, value)
    return b"".join([*out, tail])  # type: ignore[list-item]


def _kio(cls: type, value: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, value)
    return buf.getvalue()


def test_wire_versions_cover_every_required_range():
    for api_key, (low, high) in REQUIRED.items():
        have = WIRE_VERSIONS[api_key]
        assert have[0] <= low and high <= have[1], (api_key, have)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip_and_byte_equality_with_kio(api_key, version, data):
    for cls in (request_class(api_key, version), response_class(api_key, version)):
        value = data.draw(instances(cls), label=cls.__name__)
        encoded = _mine(cls, value)
        assert encoded == _kio(cls, value)
        assert decoder(cls)(encoded, 0) == (value, len(encoded))
        assert entity_reader(cls)(encoded, 0) == (value, len(encoded))


def test_header_versions_follow_kafka_rules():
    assert request_header_version(18, 0) == 1 and request_header_version(18, 3) == 2
    assert response_header_version(18, 3) == 0 and response_header_version(18, 4) == 0
    assert request_header_version(1, 11) == 1 and request_header_version(1, 12) == 2
    assert response_header_version(1, 11) == 0 and response_header_version(1, 12) == 1
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0, the one header-v0 request
    assert request_header_version(18, 99) == 2  # beyond the newest flexible version
    assert request_header_version(1, 2) == 1  # removed old version
    assert request_header_version(17, 1) == 1  # SaslHandshake, known to kio, not served here
    assert request_header_version(32000, 5) == 1  # unknown api key


def _header(api_key, version, correlation_id, client_id, tags=b"\x00", flexible=None):
    raw = struct.pack(">hhi", api_key, version, correlation_id)
    raw += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    if flexible if flexible is not None else request_header_version(api_key, version) == 2:
        raw += tags
    return raw


def test_parse_request_header_v1_v2_and_unknown():
    frame = _header(3, 1, 42, b"cli") + b"body"
    assert parse_request_header(frame) == RequestHeader(3, 1, 42, "cli", 13)
    tagged = b"\x02\x00\x01\xaa\x07\x02\xbb\xcc"  # two unknown tags: both skipped
    frame = _header(3, 12, 43, None, tags=tagged) + b"body"
    assert parse_request_header(frame) == RequestHeader(3, 12, 43, None, 10 + len(tagged))
    assert parse_request_header(_header(18, 7, 44, b"x")) == RequestHeader(18, 7, 44, "x", 12)
    assert parse_request_header(_header(999, 3, 45, b"")) == RequestHeader(999, 3, 45, "", 10)
    assert parse_request_header(struct.pack(">hhi", 7, 0, 46)) == RequestHeader(7, 0, 46, None, 8)
    assert parse_request_header(memoryview(_header(3, 1, 47, b"\xff"))).client_id == "\ufffd"


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x03\x00\x01\x00\x00",
        struct.pack(">hhih", 3, 1, 1, 10) + b"short",
        struct.pack(">hhih", 3, 1, 1, -2),
        struct.pack(">hhih", 3, 12, 1, -1),  # flexible: tag count missing
        struct.pack(">hhih", 3, 12, 1, -1) + b"\x01\x00\x05ab",  # tag overruns
        struct.pack(">hhih", 3, 12, 1, -1) + b"\xff\xff\xff\xff\xff\xff",  # varint too long
    ],
)
def test_parse_request_header_rejects_garbage(frame):
    with pytest.raises(MalformedFrame):
        parse_request_header(frame)


def test_decode_request_unsupported_versions():
    for api_key, version in ((1, 3), (18, 99), (57, 0), (4242, 0), (0, 2)):
        header = parse_request_header(_header(api_key, version, 1, b"c"))
        with pytest.raises(UnsupportedVersion) as info:
            decode_request(header, _header(api_key, version, 1, b"c"))
        assert (info.value.api_key, info.value.api_version) == (api_key, version)


def _metadata_v12(topic: str = "t"):
    cls = request_class(3, 12)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0].__args__[0]
    return cls(topics=(topic_cls(name=topic, topic_id=None),), allow_auto_topic_creation=True,
               include_topic_authorized_operations=False)


def test_unknown_tagged_fields_are_skipped_in_body_and_nested_structs():
    request = _metadata_v12()
    body = _mine(type(request), request)
    # body = topics(compact array: 0x02, topic: uuid 16, name compact "t", tags 0), flags, tags 0
    assert body[-1] == 0 and body[1 + 16 + 2] == 0
    nested = body[: 1 + 16 + 2] + b"\x01\x05\x03abc" + body[1 + 16 + 3 :]
    top = nested[:-1] + b"\x02\x01\x00\x63\x01\xff"
    frame = _header(3, 12, 9, b"c") + top
    assert decode_request(parse_request_header(frame), frame) == request
    with pytest.raises(KeyError):  # kio's own reader cannot do this (the reason serial.py exists)
        entity_reader(type(request))(top, 0)


def test_encode_request_round_trip():
    request = _metadata_v12("orders")
    frame = encode_request(3, 12, 77, None, request)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header = parse_request_header(frame[4:])
    assert header == RequestHeader(3, 12, 77, None, 11)
    assert decode_request(header, frame[4:]) == request
    with pytest.raises(ValueError):
        encode_request(3, 11, 77, None, request)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_truncated_and_mutated_requests_raise_only_wire_errors(api_key, version, data):
    value = data.draw(instances(request_class(api_key, version)))
    frame = bytearray(encode_request(api_key, version, 1, "fuzz", value)[4:])
    frame = frame[: data.draw(st.integers(0, len(frame)), label="cut")]
    for where, byte in data.draw(st.lists(st.tuples(st.integers(0, 2**16), st.integers(0, 255)), max_size=4)):
        if frame:
            frame[where % len(frame)] = byte
    try:
        decode_request(parse_request_header(bytes(frame)), bytes(frame))
    except WireError:
        pass


def test_random_garbage_never_escapes_as_anything_but_wire_errors():
    # 60 random bytes decoded as Fetch v12 made kio 0.6.5's native reader request ~240 GB and abort.
    rng = random.Random(99)
    header = RequestHeader(1, 12, 1, None, 0)
    for _ in range(3000):
        garbage = bytes(rng.randrange(256) for _ in range(60))
        with pytest.raises(WireError):
            decode_request(header, garbage + os.urandom(0))


def test_huge_array_counts_are_rejected_before_allocation():
    body = struct.pack(">iiiibi", -1, 500, 1, 1000, 0, 2**31 - 1)  # Fetch v4: topics count 2**31-1
    header = RequestHeader(1, 4, 1, None, 0)
    with pytest.raises(MalformedFrame, match="array"):
        decode_request(header, body)


# --------------------------------------------------------------------------- responses

FETCH_FIELDS = {
    "throttle_time": 5,
    "error_code": 0,
    "session_id": 0,
    "responses": [
        {
            "topic": "t",
            "topic_id": uuid.UUID(int=7),
            "partitions": [
                {
                    "partition_index": 0,
                    "error_code": ErrorCode.none,
                    "high_watermark": 10,
                    "last_stable_offset": 10,
                    "log_start_offset": 0,
                    "records": b"x" * 100,
                }
            ],
        }
    ],
}


@pytest.mark.parametrize("version", range(4, 19))
def test_one_mapping_builds_every_fetch_version(version):
    response = build_response(1, version, FETCH_FIELDS)
    assert type(response) is response_class(1, version)
    chunks = encode_response(RequestHeader(1, version, 3, None, 0), response)
    frame = b"".join(chunks)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    head = 8 if version < 12 else 9
    assert frame[4:8] == struct.pack(">i", 3)
    decoded, _ = decoder(type(response))(frame, head)
    assert decoded == response
    partition = decoded.responses[0].partitions[0]
    assert partition.records == b"x" * 100 and partition.high_watermark == 10
    assert partition.error_code is ErrorCode.none and decoded.throttle_time == datetime.timedelta(milliseconds=5)
    topic = decoded.responses[0]
    assert (topic.topic_id == uuid.UUID(int=7)) if version >= 13 else (topic.topic == "t")
    if version >= 12:
        assert partition.preferred_read_replica == -1  # schema default for a field not given


def test_build_response_defaults_conversions_and_typos():
    response = build_response(3, 12, {"brokers": [{"node_id": 1, "host": "h", "port": 9092}]})
    assert response.topics == () and response.cluster_id is None and response.controller_id == -1
    assert response.brokers[0].rack is None and response.throttle_time == datetime.timedelta(0)
    assert build_response(3, 12, response) is response  # an instance passes through
    with pytest.raises(KeyError, match="no version"):
        build_response(3, 12, {"brokers": [], "topicz": []})
    with pytest.raises(KeyError, match="brokers"):
        build_response(3, 12, {"brokers": [{"node_id": 1, "hots": "h"}]})
    with pytest.raises(ValueError, match="error code"):
        build_response(2, 9, {"topics": [{"name": "t", "partitions": [{"error_code": 31999}]}]})
    old = build_response(3, 0, {"brokers": [{"node_id": 1, "host": "h", "port": 1, "rack": "r"}], "cluster_id": "c"})
    assert not hasattr(old, "cluster_id") and not hasattr(old.brokers[0], "rack")
    for nodes in ((1, 2), [1, 2], iter((1, 2))):  # a tuple, like any iterable, is the array
        topic = {"name": "t", "partitions": [{"partition_index": 0, "leader_id": 1, "replica_nodes": nodes}]}
        built = build_response(3, 12, {"topics": [topic]})
        assert tuple(built.topics[0].partitions[0].replica_nodes) == (1, 2)


def test_records_are_not_copied_and_may_be_a_list_of_buffers():
    big = os.urandom(BIG_VALUE * 4)
    parts = [os.urandom(BIG_VALUE), memoryview(os.urandom(BIG_VALUE * 2))]
    for records, expected in ((big, big), (parts, b"".join(parts))):
        fields = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": records}]}]}
        response = build_response(1, 12, fields)
        chunks = encode_response(RequestHeader(1, 12, 1, None, 0), response)
        if records is big:
            assert any(chunk is big for chunk in chunks)
        else:
            assert any(chunk is parts[0] for chunk in chunks) and any(chunk is parts[1] for chunk in chunks)
        frame = b"".join(chunks)
        decoded, _ = decoder(type(response))(frame, 9)
        assert decoded.responses[0].partitions[0].records == expected
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4


def test_small_records_are_packed_into_one_chunk():
    fields = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": b"r" * 10}]}]}
    chunks = encode_response(RequestHeader(1, 12, 1, None, 0), build_response(1, 12, fields))
    assert len(chunks) == 1


def test_encode_response_checks_the_pairing_and_values():
    response = build_response(18, 3, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]})
    with pytest.raises(ValueError, match="does not answer"):
        encode_response(RequestHeader(18, 2, 1, None, 0), response)
    bad = build_response(18, 3, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 70000}]})
    with pytest.raises(ValueError, match="cannot encode"):
        encode_response(RequestHeader(18, 3, 1, None, 0), bad)


def test_api_versions_response_header_is_v0_even_when_flexible():
    response = build_response(18, 3, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]})
    frame = b"".join(encode_response(RequestHeader(18, 3, 0x01020304, None, 0), response))
    # size, correlation id, then directly the body: error_code int16 = 0, compact array of 1 = 0x02
    assert frame[4:8] == b"\x01\x02\x03\x04" and frame[8:11] == b"\x00\x00\x02"


def test_api_versions_fallback_is_a_v0_unsupported_version_answer():
    chunks = api_versions_fallback(55, {18: (0, 4), 3: (0, 12)})
    assert b"".join(chunks) == struct.pack(">iihi", 4 + 2 + 4 + 12, 55, 35, 2) + struct.pack(">hhhhhh", 3, 0, 12, 18, 0, 4)


def test_legacy_versions_are_served_from_the_descriptors():
    for api_key, version in legacy.KEYS:
        assert request_class(api_key, version) is legacy.schemas(api_key, version)[0]
        assert response_header_version(api_key, version) == 0
        assert request_header_version(api_key, version) == 1
    assert protocol.WIRE_VERSIONS[2][0] == 0 and protocol.WIRE_VERSIONS[8][0] == 0
