"""Kafka protocol bytes, sans-IO: no sockets, no asyncio, no clocks (docs/architecture.md).

=====================  =========================================================
module                 owns
=====================  =========================================================
:mod:`.framing`        size-prefixed frames: :class:`FrameReader`, :func:`frame`
:mod:`.protocol`       request headers, request decoding, response building and
                       encoding, the KIP-511 ApiVersions fallback, :data:`WIRE_VERSIONS`
:mod:`.serial`         the schema compiler behind :mod:`.protocol` (bounded decoders,
                       chunked encoders, version-agnostic builders for kio dataclasses)
:mod:`.legacy`         schemas of versions Kafka 4.0 removed, from Kafka's JSON descriptors
:mod:`.record_batch`   the RecordBatch v2 format: header, CRC, records, timestamps, building
:mod:`.records`        partition data of any magic (v2 batches, legacy message sets),
                       produce validation
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
    RecordTooLarge,
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
from walgate.wire.record_batch import (
    BATCH_PREFIX_SIZE,
    BatchHeader,
    DecodedBatch,
    DecodedRecord,
    batch_header,
    batch_prefix,
    encode_batch,
    rebase,
    record_timestamps,
    with_log_append_time,
)
from walgate.wire.records import decode_batches, validate_produced

__all__ = [
    "BATCH_PREFIX_SIZE",
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
    "RecordTooLarge",
    "RequestHeader",
    "UnsupportedVersion",
    "WireError",
    "api_versions_fallback",
    "batch_header",
    "batch_prefix",
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
    "rebase",
    "record_timestamps",
    "validate_produced",
    "with_log_append_time",
]
