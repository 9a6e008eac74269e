"""Kafka protocol bytes, sans-IO: no sockets, no asyncio, no clocks (DESIGN.md, wire/).

=====================  =========================================================
module                 owns
=====================  =========================================================
:mod:`.framing`        size-prefixed frames: :class:`FrameReader`, :func:`frame`
:mod:`.protocol`       request headers, request decoding, response building and
                       encoding, the KIP-511 ApiVersions fallback, :data:`WIRE_VERSIONS`
:mod:`.serial`         the schema compiler behind :mod:`.protocol` (bounded decoders,
                       chunked encoders, version-agnostic builders for kio dataclasses)
:mod:`.legacy`         schemas of versions Kafka 4.0 removed, from Kafka's JSON descriptors
:mod:`.records`        RecordBatch v2 encode/decode, legacy message sets, header patching
:mod:`.compression`    gzip / snappy (xerial) / lz4 (frame) / zstd, bounded decompression
:mod:`.errors`         :class:`WireError` and subclasses, Kafka's :class:`ErrorCode`
=====================  =========================================================
"""

from __future__ import annotations

from walgate.wire.compression import compress, decompress
from walgate.wire.errors import (
    CorruptRecord,
    ErrorCode,
    FrameTooLarge,
    InvalidRecord,
    MalformedFrame,
    UnsupportedVersion,
    WireError,
)
from walgate.wire.framing import FrameReader, frame
from walgate.wire.protocol import (
    WIRE_VERSIONS,
    Chunk,
    RequestHeader,
    api_versions_fallback,
    build_response,
    decode_request,
    encode_request,
    encode_response,
    parse_request_header,
)
from walgate.wire.records import (
    BatchHeader,
    DecodedBatch,
    DecodedRecord,
    batch_header,
    decode_batches,
    encode_batch,
    patch_base_offset,
)

__all__ = [
    "WIRE_VERSIONS",
    "BatchHeader",
    "Chunk",
    "CorruptRecord",
    "DecodedBatch",
    "DecodedRecord",
    "ErrorCode",
    "FrameReader",
    "FrameTooLarge",
    "InvalidRecord",
    "MalformedFrame",
    "RequestHeader",
    "UnsupportedVersion",
    "WireError",
    "api_versions_fallback",
    "batch_header",
    "build_response",
    "compress",
    "decode_batches",
    "decode_request",
    "decompress",
    "encode_batch",
    "encode_request",
    "encode_response",
    "frame",
    "parse_request_header",
    "patch_base_offset",
]
