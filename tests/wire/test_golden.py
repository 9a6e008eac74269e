"""Request frames captured from real clients (tests/wire/capture_golden.py) decode, and re-encode byte for byte."""

from __future__ import annotations

import uuid

import pytest
from wire_helpers import golden_frames

from walgate.wire import decode_batches
from walgate.wire.protocol import decode_request, encode_request, parse_request_header

FRAMES = golden_frames()
TOPIC = "golden"
TOPIC_ID = uuid.UUID("6f1c2a3e-0000-4000-8000-00000000c0de")


def _id(frame):
    return f"{frame['file'].removesuffix('.json')}-key{frame['api_key']}v{frame['api_version']}"


@pytest.mark.parametrize("frame", FRAMES, ids=[_id(f) for f in FRAMES])
def test_golden_frame_decodes_and_reencodes_identically(frame):
    raw = bytes.fromhex(frame["hex"])
    header = parse_request_header(raw)
    assert (header.api_key, header.api_version, header.client_id) == (
        frame["api_key"], frame["api_version"], frame["client_id"])
    request = decode_request(header, raw)
    again = encode_request(header.api_key, header.api_version, header.correlation_id, header.client_id, request)
    assert again[4:] == raw
    CHECKS[header.api_key](request, header.api_version)


def _api_versions(request, version):
    if version >= 3:
        assert request.client_software_name and request.client_software_version


def _metadata(request, version):
    # null (v1+) or empty (v0) asks for all topics; clients do that before they know a topic
    assert not request.topics or [t.name for t in request.topics] == [TOPIC]


def _list_offsets(request, version):
    [topic] = request.topics
    [partition] = topic.partitions
    assert (topic.name, partition.partition_index) == (TOPIC, 0)
    assert partition.timestamp in (-1, -2)
    assert request.replica_id == -1
    if version == 0:
        assert partition.max_num_offsets >= 1


def _fetch(request, version):
    [topic] = request.topics
    [partition] = topic.partitions
    assert (topic.topic_id == TOPIC_ID) if version >= 13 else (topic.topic == TOPIC)
    assert partition.partition == 0 and partition.fetch_offset in (0, 3)
    assert request.max_wait.total_seconds() >= 0
    assert (request.replica_state.replica_id if version >= 15 else request.replica_id) == -1


PRODUCED: list[tuple[str | None, bytes | None]] = []


def _produce(request, version):
    [topic] = request.topic_data
    [partition] = topic.partition_data
    assert topic.name == TOPIC and partition.index == 0
    for batch in decode_batches(partition.records):
        # kafka-python, told the broker is old (legacy scenario), sends magic 1 message sets even in
        # Produce v3, which Kafka answers with INVALID_RECORD; they must still decode here.
        assert batch.magic == 2 or (version == 3 and batch.magic == 1)
        for record in batch.records:
            assert record.value.startswith(b"golden-") and record.key == b"key"
            PRODUCED.append((batch.compression, record.value))


def _find_coordinator(request, version):
    assert (request.key if version < 4 else request.coordinator_keys[0]) == "golden"


CHECKS = {18: _api_versions, 3: _metadata, 2: _list_offsets, 1: _fetch, 0: _produce, 10: _find_coordinator}


def test_golden_set_covers_clients_versions_and_codecs():
    seen = {(f["api_key"], f["api_version"]) for f in FRAMES}
    assert {(18, 0), (18, 2), (18, 3), (18, 4)} <= seen  # incl. librdkafka's v3/v4 and the KIP-511 retries
    assert {(2, 0), (3, 1), (3, 12), (1, 4), (1, 12), (0, 3)} <= seen
    assert {f["client_id"].split("-")[1] for f in FRAMES} >= {"kafka", "aiokafka", "confluent"}
    for frame in FRAMES:
        if frame["api_key"] == 0:
            _produce(decode_request(parse_request_header(raw := bytes.fromhex(frame["hex"])), raw), frame["api_version"])
    codecs = {codec for codec, _ in PRODUCED}
    assert codecs == {None, "gzip", "snappy", "lz4", "zstd"}
    assert any(frame["client_id"] == "golden-kafka-python-legacy" and frame["api_key"] == 0 for frame in FRAMES)
    # a compressed batch holds the record produced with that codec (librdkafka may skip compressing
    # a record that would not shrink, so uncompressed batches can hold any of them)
    assert all(value == f"golden-{codec}".encode() for codec, value in PRODUCED if codec)
