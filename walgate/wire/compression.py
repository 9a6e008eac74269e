"""The four Kafka record-batch codecs, with bounded decompression.

Formats, as Kafka's Java client writes them (``org.apache.kafka.common.compress``):

gzip (attributes codec 1)
    RFC 1952 gzip, level 6 by default (``GZIPOutputStream``, Deflater default).
    Decoding accepts several concatenated members, like ``GZIPInputStream``.
    stdlib ``zlib`` measured as fast as cramjam's gzip here (~120 MB/s level 6,
    ~1.1 GB/s decode on JSON rows), so no extra dependency.
snappy (2)
    xerial framing (``SnappyOutputStream``): 16-byte header ``82 'SNAPPY' 00``,
    int32 version 1, int32 minimum compatible version 1, then blocks of
    ``int32 compressed length + raw snappy`` of at most 32 KiB of input each.
    librdkafka writes raw (unframed) snappy; decoding accepts both, as xerial's
    ``SnappyInputStream`` does.
lz4 (3)
    LZ4 frame format (``KafkaLZ4BlockOutputStream``): 64 KiB independent blocks,
    no block or content checksum, no content size. Magic 0 messages used a
    broken header checksum (KAFKA-3160) that is not supported.
zstd (4)
    Standard zstd frames, level 3 by default (Kafka's default).

Every decompression is bounded by ``max_size``: output beyond it raises
:class:`InvalidRecord` without being materialised (gzip and lz4 decode
incrementally up to the limit; snappy's block headers carry their uncompressed
length and are checked first; zstd decodes into a buffer grown by doubling up
to the limit). Corrupt or truncated input also raises :class:`InvalidRecord`.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import cramjam
import lz4.frame  # type: ignore[import-untyped]

from walgate.wire.errors import InvalidRecord

__all__ = [
    "CODECS",
    "CODEC_IDS",
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED",
    "compress",
    "decompress",
]

CODEC_IDS: Final[dict[str, int]] = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
"""Codec name -> the value of bits 0-2 of the batch attributes."""
CODEC_NAMES: Final[dict[int, str]] = {value: name for name, value in CODEC_IDS.items()}
CODECS: Final = tuple(CODEC_IDS)
DEFAULT_MAX_DECOMPRESSED: Final = 64 * 1024 * 1024
"""Default bound on one decompressed payload (64 MiB)."""

_GZIP_LEVEL: Final = 6
_ZSTD_LEVEL: Final = 3
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK: Final = 32 * 1024
_INT32: Final = struct.Struct(">i")
_ZSTD_FIRST_GUESS: Final = 64 * 1024


def compress(codec: str, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """*data* compressed with *codec* in the format Kafka's Java client writes (see module doc)."""
    if codec == "gzip":
        packer = zlib.compressobj(_GZIP_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return packer.compress(data) + packer.flush()
    if codec == "snappy":
        view = memoryview(data)
        parts = [_XERIAL_HEADER]
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == "lz4":
        return lz4.frame.compress(  # type: ignore[no-any-return]
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == "zstd":
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL if level is None else level))
    raise ValueError(f"unknown codec {codec!r}")


def decompress(codec: str, data: bytes | bytearray | memoryview, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """*data* decompressed; raises :class:`InvalidRecord` if corrupt or larger than *max_size*."""
    try:
        if codec == "gzip":
            return _gunzip(data, max_size)
        if codec == "snappy":
            return _unsnappy(memoryview(data), max_size)
        if codec == "lz4":
            return _unlz4(data, max_size)
        if codec == "zstd":
            return _unzstd(data, max_size)
    except (zlib.error, RuntimeError, cramjam.DecompressionError, struct.error, ValueError) as exc:
        raise InvalidRecord(f"corrupt {codec} data: {exc}") from exc
    raise InvalidRecord(f"unknown codec {codec!r}")


def _too_large(codec: str, max_size: int) -> InvalidRecord:
    return InvalidRecord(f"{codec} data decompresses to more than {max_size} bytes")


def _gunzip(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    pending: bytes | bytearray | memoryview = data
    unpacker = zlib.decompressobj(31)
    while True:
        chunk = unpacker.decompress(pending, max_size + 1 - total)
        total += len(chunk)
        if total > max_size:
            raise _too_large("gzip", max_size)
        out.append(chunk)
        if unpacker.eof:
            pending = unpacker.unused_data
            if not pending.startswith(b"\x1f\x8b"):
                break  # like GZIPInputStream: trailing bytes that are no gzip member are ignored
            unpacker = zlib.decompressobj(31)
        elif unpacker.unconsumed_tail:
            pending = unpacker.unconsumed_tail
        else:
            raise InvalidRecord("truncated gzip data")
    return out[0] if len(out) == 1 else b"".join(out)


def _unsnappy(view: memoryview, max_size: int) -> bytes:
    if view[: len(_XERIAL_MAGIC)].tobytes() != _XERIAL_MAGIC:
        if cramjam.snappy.decompress_raw_len(view) > max_size:
            raise _too_large("snappy", max_size)
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < len(_XERIAL_HEADER):
        raise InvalidRecord("truncated xerial snappy header")
    blocks = []
    total = 0
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise InvalidRecord(f"xerial snappy block of {size} bytes overruns the data")
        block = view[pos : pos + size]
        pos += size
        length = cramjam.snappy.decompress_raw_len(block)
        total += length
        if total > max_size:
            raise _too_large("snappy", max_size)
        blocks.append((block, length))
    out = bytearray(total)
    offset = 0
    with memoryview(out) as target:
        for block, length in blocks:
            written = cramjam.snappy.decompress_raw_into(block, target[offset : offset + length])
            if written != length:
                raise InvalidRecord("xerial snappy block shorter than its header says")
            offset += length
    return bytes(out)


def _unlz4(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    unpacker = lz4.frame.LZ4FrameDecompressor()
    out = unpacker.decompress(data, max_length=max_size + 1)
    if len(out) > max_size:
        raise _too_large("lz4", max_size)
    if not unpacker.eof:
        raise InvalidRecord("truncated lz4 frame")
    return out  # type: ignore[no-any-return]


def _unzstd(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    size = min(max_size + 1, max(_ZSTD_FIRST_GUESS, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = cramjam.zstd.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            if size > max_size:
                raise _too_large("zstd", max_size) from None
            size = min(max_size + 1, size * 2)
            continue
        if written > max_size:
            raise _too_large("zstd", max_size)
        return bytes(memoryview(out)[:written])
