"""Kafka request/response messages: header parsing, body decoding, response encoding.

Sans-IO: every function takes and returns bytes (or kio dataclasses); nothing here
reads a socket, a clock or an event loop.

Byte layout (all integers big-endian)::

    frame            = size:int32  body
    request body     = request header  request message
    request header   v0 = api_key:int16 api_version:int16 correlation_id:int32
                     v1 = v0 + client_id:nullable string (int16 length, -1 = null)
                     v2 = v1 + tagged fields (uvarint count, then tag/size/data)
    response body    = response header  response message
    response header  v0 = correlation_id:int32
                     v1 = v0 + tagged fields

Which header version (Kafka's ``ApiMessageTypeGenerator`` rules): request header
v2 for flexible request versions, else v1 (v0 only for ControlledShutdown v0);
response header v1 for flexible versions, else v0 -- except ApiVersions, whose
response header is always v0 so that a client can read a response to a version
the broker does not know (KIP-511). The ``client_id`` of v2 keeps the legacy
int16 length. A request for an API key or version without a schema here is parsed
with Kafka's rule for it (a version above the newest known one is flexible iff
the newest is), or with v1 rules for an unknown API key, so the server can still
answer ApiVersions (:func:`api_versions_fallback`) or close the connection.

Schemas (see :data:`WIRE_VERSIONS`): kio 0.6.5's dataclasses, generated from Apache
Kafka 4.x JSON descriptors, plus :mod:`walgate.wire.legacy` for the old versions
Kafka 4.0 removed. Decoding and encoding use :mod:`walgate.wire.serial`, not kio's
own serialisers (bounded parsing, skipped unknown tags, chunked records).

Trailing bytes after a complete request message are ignored, as Kafka's broker
(``RequestContext.parseRequest``) does.
"""

from __future__ import annotations

import importlib
import struct
import typing
import uuid
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from kio.schema.index import api_key_map, schema_name_map
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.static.constants import EntityType

from walgate.wire import internal, legacy, messages
from walgate.wire.errors import ErrorCode, MalformedFrame, UnsupportedVersion
from walgate.wire.serial import (
    Builder,
    Decoder,
    builder,
    chunk_len,
    decoder,
    encoder,
    read_uvarint,
    write_uvarint,
)

__all__ = [
    "API_NAMES",
    "WIRE_VERSIONS",
    "ZERO_UUID",
    "Chunk",
    "RequestHeader",
    "api_versions_fallback",
    "build_response",
    "decode_request",
    "decode_view",
    "encode_request",
    "encode_response",
    "parse_request_header",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
]

ZERO_UUID: Final = uuid.UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: a topic id not given in a request, or none in an answer (an unknown topic's)."""

Chunk: TypeAlias = bytes | bytearray | memoryview | Sized
"""One piece of an outgoing frame: a buffer, or a sized chunk from a ``records`` value that the gateway sends
itself (a file region of stored batches, sent with sendfile)."""

_WIRE_API_KEYS: Final = (
    0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23,
    24, 25, 26, 27, 28,  # 27: WriteTxnMarkers, between cluster nodes
    29, 30, 31, 32, 33, 36, 37, 42, 43, 44, 47, 48, 49, 50, 51, 60, 65, 66, 68, 69, 75,
    45, 46,  # AlterPartitionReassignments, ListPartitionReassignments (KIP-455)
    61,  # DescribeProducers
    76, 77, 78, 79,  # ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge
    83, 84, 85, 86, 87,  # Initialize-, Read-, Write-, DeleteShareGroupState, ReadShareGroupStateSummary: between nodes
    90, 91, 92,  # DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets
)
API_NAMES: Final[dict[int, str]] = {key: api_key_map[key] for key in _WIRE_API_KEYS} | internal.API_NAMES
"""Api key -> kio's snake_case API name, for the APIs this module has schemas for (and walgate's internal APIs',
:mod:`walgate.wire.internal`)."""

_API_VERSIONS_KEY: Final = 18
_CONTROLLED_SHUTDOWN_KEY: Final = 7
_HEAD: Final = struct.Struct(">hhih")
_HEAD_V0: Final = struct.Struct(">hhi")
_PACK_HEADER: Final = struct.Struct(">ii").pack_into
_PACK_SIZE: Final = struct.Struct(">i").pack_into


def _wire_versions() -> dict[int, tuple[int, int]]:
    versions: dict[int, tuple[int, int]] = {}
    legacy_versions: dict[int, set[int]] = {}
    for api_key, version in legacy.KEYS:
        legacy_versions.setdefault(api_key, set()).add(version)
    for api_key, name in API_NAMES.items():
        if api_key in internal.VERSIONS:
            versions[api_key] = internal.VERSIONS[api_key]
            continue
        known = set(schema_name_map[name]) | legacy_versions.get(api_key, set())
        low, high = min(known), max(known)
        if known != set(range(low, high + 1)):
            raise RuntimeError(f"{name}: schema versions {sorted(known)} are not contiguous")
        versions[api_key] = (low, high)
    return versions


WIRE_VERSIONS: Final[dict[int, tuple[int, int]]] = _wire_versions()
"""Api key -> (min, max) version this module decodes requests and encodes responses for.

kio supplies each API's versions from its lowest one up to Kafka 4.x's newest
(higher than some handlers need: advertise what the handler implements);
:mod:`walgate.wire.legacy` adds ListOffsets 0, OffsetCommit 0-1, OffsetFetch 0,
CreateTopics 0-1, DeleteTopics 0, DescribeConfigs 0, OffsetForLeaderEpoch 0-1; :mod:`walgate.wire.internal` the
internal APIs between cluster nodes (WalFetch 0).
"""

_CLASSES: dict[tuple[int, int], tuple[type, type]] = {}


def _classes(api_key: int, api_version: int) -> tuple[type, type]:
    cached = _CLASSES.get((api_key, api_version))
    if cached is not None:
        return cached
    low, high = WIRE_VERSIONS.get(api_key, (0, -1))
    if not low <= api_version <= high:
        raise UnsupportedVersion(api_key, api_version)
    if (api_key, api_version) in legacy.KEYS:
        pair = legacy.schemas(api_key, api_version)
    elif (api_key, api_version) in internal.KEYS:
        pair = internal.schemas(api_key, api_version)
    else:
        entities = schema_name_map[API_NAMES[api_key]][api_version]
        pair = (_load(entities[EntityType.request]), _load(entities[EntityType.response]))
    _CLASSES[(api_key, api_version)] = pair
    return pair


def _load(path: str) -> type:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def request_class(api_key: int, api_version: int) -> type:
    """The kio request dataclass of (api_key, api_version); raises :class:`UnsupportedVersion`."""
    return _classes(api_key, api_version)[0]


def response_class(api_key: int, api_version: int) -> type:
    """The kio response dataclass of (api_key, api_version); raises :class:`UnsupportedVersion`."""
    return _classes(api_key, api_version)[1]


def _kio_request_flexible(api_key: int, api_version: int) -> bool | None:
    """Flexibility of an API version kio knows but this module does not serve, else None."""
    name = api_key_map.get(api_key)
    if name is None or name not in schema_name_map:
        return None
    versions = schema_name_map[name]
    if api_version < min(versions):
        return False
    path = versions[min(api_version, max(versions))].get(EntityType.request)
    return None if path is None else bool(_load(path).__flexible__)  # type: ignore[attr-defined]


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version Kafka uses for (api_key, api_version) (see module doc)."""
    if api_key == _CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    low, high = WIRE_VERSIONS.get(api_key, (0, -1))
    if low <= api_version <= high:
        return 2 if request_class(api_key, api_version).__flexible__ else 1  # type: ignore[attr-defined]
    if api_key in WIRE_VERSIONS and api_version > high:
        return 2 if request_class(api_key, high).__flexible__ else 1  # type: ignore[attr-defined]
    return 2 if _kio_request_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version for (api_key, api_version); ApiVersions always uses v0."""
    cls = response_class(api_key, api_version)
    return 0 if cls.__header_schema__ is ResponseHeaderV0 else 1  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A parsed request header; ``size`` is the number of frame bytes it occupies."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int


def parse_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Parse the request header at the start of *frame* (a frame body, without its size).

    Works for unknown API keys and versions too (see module doc). Raises
    :class:`MalformedFrame` if the frame is too short or the header is garbage.
    """
    if len(frame) < _HEAD_V0.size:
        raise MalformedFrame(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEAD_V0.unpack_from(frame, 0)
    version = request_header_version(api_key, api_version)
    if version == 0:
        return RequestHeader(api_key, api_version, correlation_id, None, _HEAD_V0.size)
    if len(frame) < _HEAD.size:
        raise MalformedFrame(f"request of {len(frame)} bytes is shorter than a v{version} request header")
    length = _HEAD.unpack_from(frame, 0)[3]
    pos = _HEAD.size
    client_id: str | None = None
    if length >= 0:
        end = pos + length
        if end > len(frame):
            raise MalformedFrame(f"client_id of {length} bytes overruns the {len(frame)}-byte request")
        client_id = bytes(frame[pos:end]).decode("utf-8", "replace")
        pos = end
    elif length != -1:
        raise MalformedFrame(f"client_id length {length}")
    if version == 2:
        pos = _skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def _skip_tagged_fields(frame: bytes | bytearray | memoryview, pos: int) -> int:
    try:
        count, pos = read_uvarint(frame, pos)  # type: ignore[arg-type]
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)  # type: ignore[arg-type]
            size, pos = read_uvarint(frame, pos)  # type: ignore[arg-type]
            pos += size
            if pos > len(frame):
                raise MalformedFrame("request header tagged field overruns the request")
    except IndexError as exc:
        raise MalformedFrame("truncated request header tagged fields") from exc
    return pos


_DECODE_ERRORS: Final = (struct.error, IndexError, KeyError, ValueError, OverflowError)


def decode_request(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """The kio request dataclass encoded in *frame* after *header*.

    Raises :class:`UnsupportedVersion` if (api_key, api_version) is not in
    :data:`WIRE_VERSIONS`, :class:`MalformedFrame` for a truncated or garbage body.
    """
    cls = request_class(header.api_key, header.api_version)
    return _decoded(cls, decoder(cls), header, frame)


def decode_view(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """The request in *frame* after *header* as its API's view (:mod:`walgate.wire.messages`'s ``<Api>Request``).

    The same bytes are read, bounded and refused as by :func:`decode_request`, into one class per API instead of
    kio's class per version: a field the version lacks holds Kafka's default for it.
    """
    cls = request_class(header.api_key, header.api_version)
    decode = _VIEW_DECODERS.get(cls)
    if decode is None:
        decode = _VIEW_DECODERS[cls] = decoder(cls, messages.REQUESTS[header.api_key], messages.ENTITIES)
    return _decoded(cls, decode, header, frame)


def _decoded(cls: type, decode: Decoder, header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """What *decode* reads from *frame* after *header*; a decoding failure as :class:`MalformedFrame`."""
    data = frame if isinstance(frame, bytes) else bytes(frame)
    try:
        message, _ = decode(data, header.size)
    except MalformedFrame as exc:
        raise MalformedFrame(f"{cls.__name__} v{header.api_version}: {exc}") from exc
    except _DECODE_ERRORS as exc:
        raise MalformedFrame(f"{cls.__name__} v{header.api_version}: truncated or invalid ({exc!r})") from exc
    return message


_VIEW_DECODERS: dict[type, Decoder] = {}
_BUILDERS: dict[tuple[int, int], Builder] = {}


def build_response(api_key: int, api_version: int, fields: Mapping[str, Any]) -> Any:
    """The kio response dataclass of (api_key, api_version) built from *fields*.

    *fields* is version-agnostic: kio's snake_case field names, nested mappings
    for structs and sequences of mappings for arrays of structs. Fields this
    version lacks are dropped, missing ones take the schema default (or 0, "",
    (), None for nullable fields). Plain ints are accepted for error codes
    and for millisecond ``timedelta``/``datetime`` fields (``throttle_time=0``);
    ``records`` may be bytes, a memoryview or a sequence of buffers. A key that
    no version of the API has raises ``KeyError`` (a typo); an unknown error
    code ``ValueError``. Raises :class:`UnsupportedVersion` outside
    :data:`WIRE_VERSIONS`.
    """
    build = _BUILDERS.get((api_key, api_version))
    if build is None:
        build = builder(response_class(api_key, api_version), messages.RESPONSE_FIELDS[api_key])
        _BUILDERS[(api_key, api_version)] = build
    return build(fields)




def _encode(message: Any, head: bytearray) -> list[Chunk]:
    out: list[Any] = []
    try:
        tail = encoder(type(message))(head, out, message)
    except struct.error as exc:
        raise ValueError(f"cannot encode {type(message).__name__}: {exc}") from exc
    out.append(tail)
    _PACK_SIZE(out[0], 0, sum(map(chunk_len, out)) - 4)
    return out


def encode_response(header: RequestHeader, response: Any) -> list[Chunk]:
    """The complete response frame (size prefix, response header, body) as chunks.

    Large ``records``/``bytes`` values (>= :data:`walgate.wire.serial.runtime.BIG_VALUE`
    bytes) are separate chunks, never copied; everything else is packed into few
    ``bytearray`` chunks. Raises ``ValueError`` if *response* is not the response
    class of the request's (api_key, api_version) or a value does not fit its type.
    """
    cls = type(response)
    if (cls.__api_key__, cls.__version__) != (header.api_key, header.api_version):
        raise ValueError(
            f"{cls.__name__} v{cls.__version__} does not answer api_key={header.api_key} v{header.api_version}"
        )
    head = bytearray(8)
    _PACK_HEADER(head, 0, 0, header.correlation_id)
    if cls.__header_schema__ is not ResponseHeaderV0:
        head.append(0)  # response header v1: no tagged fields
    return _encode(response, head)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, request: Any) -> bytes:
    """A complete request frame (size prefix included), e.g. for tests and tools."""
    cls = type(request)
    if cls is not request_class(api_key, api_version):
        raise ValueError(f"{cls.__name__} is not the request class of api_key={api_key} v{api_version}")
    head = bytearray(4)
    head += _HEAD_V0.pack(api_key, api_version, correlation_id)
    version = request_header_version(api_key, api_version)
    if version >= 1:
        raw = None if client_id is None else client_id.encode()
        head += struct.pack(">h", -1 if raw is None else len(raw))
        head += raw or b""
    if version == 2:
        write_uvarint(head, 0)
    return b"".join(typing.cast(list[bytes], _encode(request, head)))  # a request holds no file regions


def api_versions_fallback(correlation_id: int, supported: Mapping[int, tuple[int, int]]) -> list[Chunk]:
    """KIP-511 answer to an ApiVersions request of a version this broker does not know.

    An ApiVersionsResponse v0 body (response header v0) with error
    UNSUPPORTED_VERSION (35) listing *supported* (api_key -> (min, max)). Kafka's
    broker lists only ApiVersions' own range there; clients use that entry to
    retry with the highest version both sides know.
    """
    response = build_response(
        _API_VERSIONS_KEY,
        0,
        {
            "error_code": ErrorCode.unsupported_version,
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(supported.items())
            ],
        },
    )
    return encode_response(RequestHeader(_API_VERSIONS_KEY, 0, correlation_id, None, 0), response)
