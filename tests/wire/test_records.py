"""RecordBatch v2 and legacy message sets, checked against kafka-python's and aiokafka's implementations."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest
from aiokafka.record._crecords import DefaultRecordBatch as AioBatch
from aiokafka.record._crecords import LegacyRecordBatchBuilder as AioLegacyBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder

from walgate.wire.errors import CorruptRecord, InvalidRecord, WireError
from walgate.wire.record_batch import (
    BATCH_HEADER_SIZE,
    batch_header,
    encode_batch,
    rebase,
)
from walgate.wire.records import decode_batches

KAFKA_PYTHON_CODECS = (None, "gzip", "lz4")  # kafka-python here has no snappy/zstd libraries
CODEC_IDS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

values_st = st.none() | st.binary(max_size=60)
headers_st = st.lists(
    st.tuples(st.text(st.characters(exclude_categories=("Cs",)), max_size=8), st.none() | st.binary(max_size=10)),
    max_size=3,
)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 40))
    base_ts = draw(st.integers(0, 2**42))
    return {
        "base_offset": draw(st.integers(0, 2**40)),
        "timestamps": [max(0, base_ts + draw(st.integers(-(2**20), 2**20))) for _ in range(n)],
        "keys": [draw(values_st) for _ in range(n)],
        "values": [draw(values_st) for _ in range(n)],
        "headers": [draw(headers_st) for _ in range(n)] if draw(st.booleans()) else None,
        "compression": draw(st.sampled_from(list(CODEC_IDS))),
        "offset_deltas": sorted(draw(st.lists(st.integers(0, 2**20), min_size=n, max_size=n, unique=True)))
        if draw(st.booleans()) else None,
        "timestamp_type": draw(st.sampled_from([0, 1])),
        "producer_id": draw(st.integers(-1, 2**40)),
        "producer_epoch": draw(st.integers(-1, 2**15 - 1)),
        "base_sequence": draw(st.integers(-1, 2**31 - 1)),
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
        "is_transactional": draw(st.booleans()),
        "is_control": draw(st.booleans()),
    }


def _expected(spec):
    n = len(spec["values"])
    deltas = spec["offset_deltas"] or list(range(n))
    timestamps = [max(spec["timestamps"])] * n if spec["timestamp_type"] else spec["timestamps"]
    headers = spec["headers"] or [[] for _ in range(n)]
    return [(spec["base_offset"] + d, t, k, v, list(h)) for d, t, k, v, h in
            zip(deltas, timestamps, spec["keys"], spec["values"], headers)]


@settings(max_examples=200, deadline=None)
@given(spec=batches())
def test_round_trip_and_other_readers_agree(spec):
    args = {k: v for k, v in spec.items() if k not in ("base_offset", "timestamps", "keys", "values", "headers")}
    raw = encode_batch(spec["base_offset"], spec["timestamps"], spec["keys"], spec["values"], spec["headers"], **args)
    [batch] = decode_batches(raw)
    expected = _expected(spec)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == expected
    assert batch.raw == raw and batch.magic == 2
    assert (batch.base_offset, batch.partition_leader_epoch) == (spec["base_offset"], spec["partition_leader_epoch"])
    assert batch.compression == spec["compression"] and batch.attributes & 7 == CODEC_IDS[spec["compression"]]
    assert (batch.is_transactional, batch.is_control) == (spec["is_transactional"], spec["is_control"])
    assert batch.timestamp_type == spec["timestamp_type"]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        spec["producer_id"], spec["producer_epoch"], spec["base_sequence"])
    assert batch.base_timestamp == spec["timestamps"][0] and batch.max_timestamp == max(spec["timestamps"])
    assert batch.last_offset_delta == (spec["offset_deltas"] or [len(spec["values"]) - 1])[-1]
    header = batch_header(raw)
    assert header.length == len(raw) - 12 and header.record_count == len(spec["values"])
    aio = AioBatch(raw)
    assert aio.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in aio] == expected
    if spec["compression"] in KAFKA_PYTHON_CODECS and not spec["is_control"]:  # it parses control keys
        kp = KpBatch(raw)
        assert kp.validate_crc()
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kp] == expected


@settings(max_examples=100, deadline=None)
@given(spec=batches())
def test_uncompressed_bytes_equal_kafka_pythons_builder(spec):
    n = len(spec["values"])
    deltas = spec["offset_deltas"] or list(range(n))
    headers = spec["headers"] or [[] for _ in range(n)]
    builder = KpBuilder(2, 0, int(spec["is_transactional"]), spec["producer_id"], spec["producer_epoch"],
                        spec["base_sequence"], 2**31 - 1)
    for i in range(n):
        builder.append(deltas[i], spec["timestamps"][i], spec["keys"][i], spec["values"][i], headers[i])
    theirs = bytearray(builder.build())
    struct.pack_into(">q", theirs, 0, spec["base_offset"])  # base offset and leader epoch: not CRC-covered
    struct.pack_into(">i", theirs, 12, spec["partition_leader_epoch"])
    mine = encode_batch(spec["base_offset"], spec["timestamps"], spec["keys"], spec["values"], headers,
                        offset_deltas=deltas, producer_id=spec["producer_id"], producer_epoch=spec["producer_epoch"],
                        base_sequence=spec["base_sequence"], partition_leader_epoch=spec["partition_leader_epoch"],
                        is_transactional=spec["is_transactional"])
    assert mine == bytes(theirs)


@pytest.mark.parametrize("codec", list(CODEC_IDS))
def test_big_batch(codec):
    n = 20000
    values = [os.urandom(20) + b"v" * (i % 300) for i in range(n)]
    raw = encode_batch(5, list(range(n)), [None] * n, values, compression=codec)
    [batch] = decode_batches(raw)
    assert [r.value for r in batch.records] == values and batch.records[-1].offset == n + 4


def test_rebase_keeps_the_crc_valid():
    raw = encode_batch(0, [1, 2], [b"a", None], [b"x", b"y"], compression="gzip", partition_leader_epoch=3)
    moved = rebase(raw, 1234, 7)
    assert batch_header(moved).base_offset == 1234 and batch_header(moved).partition_leader_epoch == 7
    assert moved[8:12] == raw[8:12] and moved[16:] == raw[16:]
    [batch] = decode_batches(moved)
    assert [r.offset for r in batch.records] == [1234, 1235]
    assert KpBatch(moved).validate_crc()


def test_concatenated_batches():
    first = encode_batch(0, [1, 2], [None, None], [b"a", b"b"])
    second = encode_batch(2, [3], [b"k"], [b"c"], compression="zstd")
    batches = decode_batches(first + second)
    assert [r.value for b in batches for r in b.records] == [b"a", b"b", b"c"]
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2]


def test_crc_mismatch_is_corrupt_record():
    raw = bytearray(encode_batch(0, [1], [b"k"], [b"value"]))
    raw[-2] ^= 1  # the last byte of the value; the record's header count follows
    with pytest.raises(CorruptRecord):
        decode_batches(bytes(raw))
    assert decode_batches(bytes(raw), verify_crc=False)[0].records[0].value == b"valud"


def _with_valid_crc(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


def test_structural_errors_are_invalid_record():
    raw = bytearray(encode_batch(0, [1, 2], [b"k", b"l"], [b"v", b"w"]))
    wrong_count = bytearray(raw)
    struct.pack_into(">i", wrong_count, 57, 3)
    unknown_codec = bytearray(raw)
    struct.pack_into(">h", unknown_codec, 21, 5)
    for bad in (_with_valid_crc(wrong_count), _with_valid_crc(unknown_codec), bytes(raw[:-1]), bytes(raw) + b"\0" * 5,
                bytes(raw[:16]) + b"\x07" + bytes(raw[17:])):
        with pytest.raises(InvalidRecord):
            decode_batches(bad)


def test_decompression_limit_applies_to_batches():
    raw = encode_batch(0, [1], [None], [bytes(2 * 1024 * 1024)], compression="lz4")
    with pytest.raises(InvalidRecord, match="more than"):
        decode_batches(raw, max_decompressed=1024 * 1024)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_batches_raise_only_wire_errors(data):
    codec = data.draw(st.sampled_from(list(CODEC_IDS)))
    raw = bytearray(encode_batch(0, [1, 2, 3], [b"k", None, b"m"], [b"v" * 30, None, b"w"],
                                 [[("h", b"1")], [], [("n", None)]], compression=codec))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    for where, byte in data.draw(st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 255)), max_size=4)):
        if raw:
            raw[where % len(raw)] = byte
    fix_crc = data.draw(st.booleans())
    if fix_crc and len(raw) > BATCH_HEADER_SIZE:
        raw = bytearray(_with_valid_crc(raw))
    try:
        decode_batches(bytes(raw))
    except WireError:
        pass


def test_encode_batch_rejects_bad_arguments():
    with pytest.raises(ValueError):
        encode_batch(0, [], [], [])
    with pytest.raises(ValueError):
        encode_batch(0, [1, 2], [None], [b"a", b"b"])
    with pytest.raises(ValueError):
        encode_batch(0, [1], [None], [b"a"], compression="brotli")
    with pytest.raises(ValueError):
        encode_batch(0, [1], [None], [b"a"], offset_deltas=[0, 1])
    with pytest.raises(ValueError, match=">= 0"):
        encode_batch(0, [-1], [None], [b"a"])
    with pytest.raises(TypeError):
        encode_batch(0, [1], ["text"], [b"a"])


# --------------------------------------------------------------------------- legacy message sets


def _legacy(builder_cls, magic, codec, n=5, offset=0):
    builder = builder_cls(magic, codec, 2**31 - 1)
    for i in range(n):
        builder.append(i, 1600000000000 + i if magic else None, b"k%d" % i if i % 2 else None, b"v%d" % i)
    return bytes(builder.build())


@pytest.mark.parametrize(("magic", "codec"), [(0, 0), (0, 1), (1, 0), (1, 1), (1, 3)])
def test_legacy_message_sets_from_kafka_python(magic, codec):
    batches = decode_batches(_legacy(KpLegacyBuilder, magic, codec))
    records = [r for b in batches for r in b.records]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.value for r in records] == [b"v%d" % i for i in range(5)]
    assert [r.key for r in records] == [None, b"k1", None, b"k3", None]
    assert [r.timestamp for r in records] == ([1600000000000 + i for i in range(5)] if magic else [-1] * 5)
    assert all(b.magic == magic for b in batches)
    assert len(batches) == (1 if codec else 5)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_snappy_from_aiokafka(magic):
    records = [r for b in decode_batches(_legacy(AioLegacyBuilder, magic, 2)) for r in b.records]
    assert [r.value for r in records] == [b"v%d" % i for i in range(5)]


def test_legacy_crc_and_truncation():
    raw = bytearray(_legacy(KpLegacyBuilder, 1, 0, n=1))
    raw[-1] ^= 1
    with pytest.raises(CorruptRecord):
        decode_batches(bytes(raw))
    with pytest.raises(InvalidRecord):
        decode_batches(_legacy(KpLegacyBuilder, 1, 1)[:-3])


def test_legacy_and_v2_in_one_buffer():
    data = _legacy(KpLegacyBuilder, 1, 0, n=2) + encode_batch(2, [9], [None], [b"new"])
    batches = decode_batches(data)
    assert [b.magic for b in batches] == [1, 1, 2]
    assert [r.value for b in batches for r in b.records] == [b"v0", b"v1", b"new"]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_legacy_sets_raise_only_wire_errors(data):
    raw = bytearray(_legacy(KpLegacyBuilder, data.draw(st.sampled_from([0, 1])), data.draw(st.sampled_from([0, 1]))))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    for where, byte in data.draw(st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 255)), max_size=4)):
        if raw:
            raw[where % len(raw)] = byte
    try:
        decode_batches(bytes(raw), verify_crc=data.draw(st.booleans()))
    except WireError:
        pass


def test_legacy_wrapper_offsets_make_inner_offsets_absolute():
    raw = bytearray(_legacy(KpLegacyBuilder, 1, 1))
    struct.pack_into(">q", raw, 0, 104)  # as a broker stores it: the last inner offset (not CRC-covered)
    assert [r.offset for r in decode_batches(bytes(raw))[0].records] == [100, 101, 102, 103, 104]
