"""Schemas for old protocol versions that Kafka 4.0 (and so kio 0.6.5) removed.

Clients still in use send them: kafka-python 2.x and older librdkafka use
ListOffsets v0, OffsetCommit v0/v1, OffsetFetch v0, CreateTopics v0/v1,
DeleteTopics v0, DescribeConfigs v0 and OffsetForLeaderEpoch v0/v1 when a broker
advertises them. The classes are generated at import time from Apache Kafka's own
JSON descriptors (:mod:`walgate.wire._kafka_json`), following kio's code generator
conventions so that a legacy class and kio's class of the next version agree on
field names, ``kafka_type`` metadata, types and defaults:

* field names are the JSON names in snake_case; ``ThrottleTimeMs``, ``TimeoutMs``,
  ``timeoutMs`` and ``RetentionTimeMs`` lose the ``Ms`` and become ``timedelta``
  fields (``timedelta_i32`` / ``timedelta_i64``); ``ErrorCode`` fields are
  ``error_code`` (kio's ``ErrorCode`` enum);
* ``entityType`` picks kio's nominal types (``TopicName``, ``GroupId``, ``BrokerId``, ...);
* a JSON ``default`` becomes the dataclass default, primitive arrays default to ``()``,
  ``nullableVersions`` makes strings/bytes/arrays ``X | None``;
* where Kafka later renamed a field without changing its bytes, the later name
  is used (:data:`RENAMED`), so one version-agnostic mapping fits every version.
  Remaining differences to kio's classes of later versions carry no bytes: some
  nested struct class names (``CreateableTopicConfig``), ``str`` where later
  descriptors added ``entityType`` (kio's ``TopicName`` is a ``str`` too), and
  defaults later descriptors added (OffsetForLeaderEpoch ``end_offset``).

Only non-flexible versions are generated here (every removed version is); :func:`message_class` also
generates flexible ones without tagged fields, for walgate's internal APIs (:mod:`walgate.wire.internal`).
``tests/wire/test_legacy.py`` checks the generator against kio for every version both cover, and the v0/v1 bytes
against kafka-python's independent hand-written 2.x-style protocol classes.

Where each version comes from (request and response):

=====================  ========  =====================================================
API                    versions  descriptor
=====================  ========  =====================================================
ListOffsets            0         ListOffsets*.json (validVersions 0-8 / 0-10)
OffsetCommit           0-1       OffsetCommit*.json (0-9)
OffsetFetch            0         OffsetFetch*.json (0-9 / 0-8)
CreateTopics           0-1       CreateTopics*.json (0-5 / 0-3)
DeleteTopics           0         DeleteTopicsRequest.json (4.x: 1-6, "Versions 0, 1, 2,
                                 and 3 are the same"), DeleteTopicsResponse.json (0-4)
DescribeConfigs        0         DescribeConfigs*.json (0-3)
OffsetForLeaderEpoch   0-1       OffsetForLeaderEpochRequest.json (4.x: 2-4, "Version 1 is
                                 the same as version 0"), ...Response.json (0-4)
=====================  ========  =====================================================
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any, Final

import kio.schema.request_header.v1.header as request_header_v1
import kio.schema.request_header.v2.header as request_header_v2
import kio.schema.response_header.v0.header as response_header_v0
import kio.schema.response_header.v1.header as response_header_v1
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import (
    Records,
    f64,
    i8,
    i16,
    i32,
    i32Timedelta,
    i64,
    i64Timedelta,
    u16,
)

from walgate.wire._kafka_json import DESCRIPTORS

__all__ = ["API_NAMES", "KEYS", "LEGACY_VERSIONS", "RENAMED", "descriptor", "generate", "message_class", "parse",
           "schemas"]

LEGACY_VERSIONS: Final[dict[str, tuple[int, ...]]] = {
    "ListOffsets": (0,),
    "OffsetCommit": (0, 1),
    "OffsetFetch": (0,),
    "CreateTopics": (0, 1),
    "DeleteTopics": (0,),
    "DescribeConfigs": (0,),
    "OffsetForLeaderEpoch": (0, 1),
}
"""API name -> versions generated here (kio 0.6.5 starts right above them)."""

RENAMED: Final[dict[tuple[str, str], str]] = {
    # Kafka 4.0 (KIP-848) renamed the field; the bytes of versions 1-8 did not change.
    ("OffsetCommitRequest", "GenerationId"): "GenerationIdOrMemberEpoch",
    # The misspelling was fixed in a later Kafka release; same bytes.
    ("DescribeConfigsRequest", "IncludeSynoyms"): "IncludeSynonyms",
}
"""(message, JSON field name) -> the later name kio uses for the same field."""

_TIMEDELTA_NAMES: Final = frozenset({"ThrottleTimeMs", "TimeoutMs", "timeoutMs", "RetentionTimeMs", "MaxWaitMs"})
_ERROR_CODE_NAMES: Final = frozenset({"ErrorCode", "PartitionErrorCode"})
_ENTITY_TYPES: Final[dict[str, type]] = {
    "brokerId": BrokerId, "groupId": GroupId, "producerId": ProducerId,
    "topicName": TopicName, "transactionalId": TransactionalId,
}
_PRIMITIVES: Final[dict[str, Any]] = {
    "bool": bool, "int8": i8, "int16": i16, "int32": i32, "int64": i64, "uint16": u16,
    "float64": f64, "string": str, "bytes": bytes, "records": Records,
    "uuid": uuid.UUID | None, "error_code": ErrorCode,
    "timedelta_i32": i32Timedelta, "timedelta_i64": i64Timedelta,
}
_INTEGERS: Final = frozenset({"int8", "int16", "int32", "int64", "uint16", "error_code"})
_COMMENT: Final = re.compile(r"^\s*//.*$", re.MULTILINE)
_SNAKE: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def parse(text: str) -> dict[str, Any]:
    """A Kafka message-JSON descriptor's text, parsed (its ``//`` comments stripped)."""
    return json.loads(_COMMENT.sub("", text))  # type: ignore[no-any-return]


def descriptor(name: str) -> dict[str, Any]:
    """The parsed JSON descriptor ``<name>.json`` (comments stripped)."""
    return parse(DESCRIPTORS[name])


def _in_range(spec: str | None, version: int) -> bool:
    """Kafka version-range syntax: ``"3+"``, ``"1-4"``, ``"0"``, ``"none"``."""
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def _snake(name: str) -> str:
    return _SNAKE.sub("_", name).lower()


def _default(kafka_type: str, raw: str | int | bool) -> Any:
    text = str(raw)
    if text == "null":
        return None
    if kafka_type == "bool":
        return text.lower() == "true"
    if kafka_type in _INTEGERS:
        value = int(text, 0)
        return ErrorCode(value) if kafka_type == "error_code" else value
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _PRIMITIVES[kafka_type].parse(datetime.timedelta(milliseconds=int(text, 0)))
    if kafka_type == "float64":
        return float(text)
    return text


class _Generator:
    """Builds the dataclass tree of one message at one version."""

    def __init__(self, message: dict[str, Any], version: int) -> None:
        self.message = message
        self.version = version
        flexible = _in_range(message.get("flexibleVersions"), version)
        if message["type"] == "request":
            self.header: type = (request_header_v2 if flexible else request_header_v1).RequestHeader
        else:
            self.header = (response_header_v1 if flexible else response_header_v0).ResponseHeader
        self.classvars: dict[str, Any] = {
            "__version__": i16(version),
            "__flexible__": flexible,
            "__api_key__": i16(message["apiKey"]),
            "__header_schema__": self.header,
        }

    def struct(self, name: str, fields: Sequence[dict[str, Any]], entity_type: EntityType) -> type:
        specs = [self.field(spec) for spec in fields if _in_range(spec["versions"], self.version)]
        return dataclasses.make_dataclass(
            name,
            specs,
            frozen=True,
            slots=True,
            kw_only=True,
            namespace={"__module__": __name__, "__type__": entity_type, **self.classvars},
        )

    def field(self, spec: dict[str, Any]) -> tuple[str, Any, Any]:
        json_name = RENAMED.get((self.message["name"], spec["name"]), spec["name"])
        if "tag" in spec:
            raise NotImplementedError(f"{json_name}: tagged fields are not generated here")
        json_type: str = spec["type"]
        array = json_type.startswith("[]")
        base = json_type.removeprefix("[]")
        nullable = _in_range(spec.get("nullableVersions"), self.version)
        if "fields" in spec:
            nested = self.struct(base, spec["fields"], EntityType.nested)
            tp: Any = tuple[nested, ...] if array else nested  # type: ignore[valid-type]
            if nullable:
                tp = tp | None
            return _snake(json_name), tp, dataclasses.field(metadata={})
        kafka_type = base
        name = json_name
        if json_name in _TIMEDELTA_NAMES:
            kafka_type = {"int32": "timedelta_i32", "int64": "timedelta_i64"}[base]
            name = json_name.removesuffix("Ms")
        elif json_name in _ERROR_CODE_NAMES:
            kafka_type = "error_code"
        elif json_name.endswith("Ms"):
            raise NotImplementedError(f"{json_name}: time field without a kio convention")
        if kafka_type not in _PRIMITIVES:
            raise NotImplementedError(f"{json_name}: unsupported type {json_type!r}")
        tp = _ENTITY_TYPES.get(spec.get("entityType", ""), _PRIMITIVES[kafka_type])
        metadata = {"kafka_type": kafka_type}
        if array:
            return _snake(name), (tuple[tp, ...] | None if nullable else tuple[tp, ...]), dataclasses.field(
                metadata=metadata, default=()
            )
        if nullable and kafka_type in ("string", "bytes", "records"):
            tp = tp | None
        if "default" in spec:
            value = _default(kafka_type, spec["default"])
            if value is not None and tp in _ENTITY_TYPES.values():
                value = tp(value)
            return _snake(name), tp, dataclasses.field(metadata=metadata, default=value)
        return _snake(name), tp, dataclasses.field(metadata=metadata)


def message_class(message: dict[str, Any], version: int) -> type:
    """The kio-style dataclass of the parsed descriptor ``message`` at ``version``, flexible or not (a flexible
    version's header classes are request header v2 and response header v1; tagged fields are refused)."""
    generator = _Generator(message, version)
    entity_type = EntityType.request if message["type"] == "request" else EntityType.response
    return generator.struct(message["name"], message["fields"], entity_type)


def generate(name: str, version: int) -> type:
    """The kio-style dataclass of message *name* (e.g. ``"ListOffsetsRequest"``) at *version*."""
    message = descriptor(name)
    if _in_range(message.get("flexibleVersions"), version):
        raise ValueError(f"{name} v{version} is flexible; only non-flexible versions are generated")
    return message_class(message, version)


API_NAMES: Final[dict[int, str]] = {descriptor(f"{api}Request")["apiKey"]: api for api in LEGACY_VERSIONS}
"""Api key -> API name, for the APIs in :data:`LEGACY_VERSIONS`."""

KEYS: Final[frozenset[tuple[int, int]]] = frozenset(
    (api_key, version) for api_key, api in API_NAMES.items() for version in LEGACY_VERSIONS[api]
)
"""Every (api_key, version) this module has schemas for."""


@functools.cache
def schemas(api_key: int, version: int) -> tuple[type, type]:
    """(request class, response class) of (api_key, version) in :data:`KEYS`, generated on first use."""
    if (api_key, version) not in KEYS:
        raise KeyError((api_key, version))
    api = API_NAMES[api_key]
    return generate(f"{api}Request", version), generate(f"{api}Response", version)
