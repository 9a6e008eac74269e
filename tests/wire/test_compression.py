"""Codecs: Kafka-compatible formats, cross-decoding with other clients' codecs, bounded output."""

from __future__ import annotations

import os
import struct

import aiokafka.codec
import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.wire.compression import CODECS, compress, decompress
from walgate.wire.errors import InvalidRecord

OTHER_DECODERS = {
    "gzip": aiokafka.codec.gzip_decode,
    "snappy": aiokafka.codec.snappy_decode,
    "lz4": aiokafka.codec.lz4_decode,
    "zstd": aiokafka.codec.zstd_decode,
}
OTHER_ENCODERS = {
    "gzip": aiokafka.codec.gzip_encode,
    "snappy": aiokafka.codec.snappy_encode,
    "lz4": aiokafka.codec.lz4_encode,
    "zstd": aiokafka.codec.zstd_encode,
}


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=70000) | st.integers(0, 200000).map(lambda n: b"abc" * n))
def test_round_trip_and_cross_decoding(codec, data):
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    if data or codec != "snappy":  # aiokafka cannot read a header-only xerial stream (batches are never empty)
        assert OTHER_DECODERS[codec](packed) == data
    assert decompress(codec, OTHER_ENCODERS[codec](data)) == data


def test_snappy_uses_xerial_framing_and_accepts_raw_snappy():
    data = os.urandom(100) * 1000  # 100 KB: 4 blocks of at most 32 KiB input
    packed = compress("snappy", data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    blocks, pos = 0, 16
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        assert cramjam.snappy.decompress_raw_len(packed[pos + 4 : pos + 4 + size]) <= 32 * 1024
        pos += 4 + size
        blocks += 1
    assert blocks == 4
    assert decompress("snappy", bytes(cramjam.snappy.compress_raw(data))) == data  # librdkafka's format


def test_lz4_writes_kafkas_frame_flags():
    packed = compress("lz4", b"x" * 1000)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flags, block = packed[4], packed[5]
    assert flags & 0x20  # block independence
    assert not flags & 0x1C  # no block checksum, no content size, no content checksum
    assert block >> 4 == 4  # 64 KiB blocks


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_is_bounded(codec):
    bomb = compress(codec, bytes(50 * 1024 * 1024))
    assert len(bomb) < 3 * 1024 * 1024
    with pytest.raises(InvalidRecord, match="more than"):
        decompress(codec, bomb, max_size=1024 * 1024)
    data = os.urandom(5000)
    assert decompress(codec, compress(codec, data), max_size=5000) == data
    with pytest.raises(InvalidRecord):
        decompress(codec, compress(codec, data), max_size=4999)


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_corrupt_or_truncated_input_raises_invalid_record(codec, data):
    packed = bytearray(compress(codec, b"some payload " * 50))
    packed = packed[: data.draw(st.integers(0, len(packed)))]
    for where, byte in data.draw(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3)):
        if packed:
            packed[where % len(packed)] = byte
    try:
        decompress(codec, bytes(packed))
    except InvalidRecord:
        pass


def test_gzip_concatenated_members():
    assert decompress("gzip", compress("gzip", b"one ") + compress("gzip", b"two")) == b"one two"


def test_unknown_codec():
    with pytest.raises(ValueError):
        compress("brotli", b"")
    with pytest.raises(InvalidRecord):
        decompress("brotli", b"")
