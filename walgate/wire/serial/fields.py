"""What the serialisers need to know of a kio schema dataclass: its fields, their Kafka types, their defaults.

kio generates one frozen dataclass per (message, version) from Apache Kafka's JSON
message descriptors (:mod:`walgate.wire.legacy` does the same for versions kio
lacks). Each field carries its Kafka type in ``metadata["kafka_type"]`` (or is a
nested dataclass), its tag in ``metadata["tag"]`` when tagged, and is ``X | None``
when nullable, ``tuple[X, ...]`` when an array. :func:`fields_of` reads that once
per class into :class:`FieldInfo` records, which the code generator
(:mod:`.codegen`) and the builders (:mod:`.builders`) work from.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.wire.serial.runtime import datetime_from_ms

__all__ = ["FIXED", "MISSING", "VARIABLE", "FieldInfo", "fields_of", "zero_value"]

MISSING: Final = dataclasses.MISSING
"""The ``default`` of a :class:`FieldInfo` without one."""

FIXED: Final[dict[str, str]] = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float64": "d", "bool": "?", "error_code": "h",
    "timedelta_i32": "i", "timedelta_i64": "q", "datetime_i64": "q", "uuid": "16s",
}
VARIABLE: Final = frozenset({"string", "bytes", "records"})


@dataclasses.dataclass(frozen=True, slots=True)
class FieldInfo:
    """One field of a schema dataclass, as the serialisers need it."""

    name: str
    kind: str
    """Kafka primitive type (``int32``, ``string``, ``records``, ...) or ``entity``."""
    array: bool
    nullable: bool
    """The field itself (the array, for arrays) may be null on the wire."""
    entity: type | None
    tag: int | None
    default: Any
    """The dataclass default, or ``dataclasses.MISSING``."""


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        rest = [a for a in args if a is not types.NoneType]
        if len(rest) != 1:
            raise TypeError(f"unsupported union type {tp!r}")
        return rest[0], len(rest) != len(args)
    return tp, False


_FIELDS_CACHE: dict[type, tuple[FieldInfo, ...]] = {}


def fields_of(cls: type) -> tuple[FieldInfo, ...]:
    """The wire fields of a kio-style schema dataclass, in declaration order."""
    cached = _FIELDS_CACHE.get(cls)
    if cached is not None:
        return cached
    infos = []
    for f in dataclasses.fields(cls):
        tp, optional = _strip_optional(f.type)
        array = typing.get_origin(tp) is tuple
        inner = _strip_optional(typing.get_args(tp)[0])[0] if array else tp
        entity = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        kind = "entity" if entity is not None else f.metadata["kafka_type"]
        if kind not in FIXED and kind not in VARIABLE and kind != "entity":
            raise TypeError(f"{cls.__name__}.{f.name}: unknown kafka_type {kind!r}")
        tag = f.metadata.get("tag")
        if kind == "uuid" and not array:
            optional = False  # None <-> the all-zero UUID, not a null marker
        if tag is not None and kind == "entity" and optional:
            raise TypeError(f"{cls.__name__}.{f.name}: nullable tagged structs are not supported")
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        infos.append(FieldInfo(f.name, kind, array, optional, entity, tag, default))
    result = tuple(infos)
    _FIELDS_CACHE[cls] = result
    return result


def zero_value(info: FieldInfo) -> Any:
    """The value of a field that was not given: its default, else the type's zero value."""
    if info.default is not MISSING:
        return info.default
    if info.array:
        return ()
    if info.nullable:
        return None
    kind = info.kind
    if kind == "entity":
        assert info.entity is not None
        return info.entity(**{f.name: zero_value(f) for f in fields_of(info.entity)})
    if kind == "string":
        return ""
    if kind in ("bytes", "records"):
        return b""
    if kind == "bool":
        return False
    if kind == "float64":
        return 0.0
    if kind == "uuid":
        return None
    if kind == "error_code":
        return ErrorCode.none
    if kind in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kind == "datetime_i64":
        return datetime_from_ms(0)
    return 0
