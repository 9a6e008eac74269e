"""Build kio response dataclasses from version-agnostic nested mappings.

Handlers answer with one mapping for every version of an API (kio's snake_case
field names; nested mappings for structs, sequences of mappings for arrays of
structs); ``builder(cls, known)(mapping)`` turns it into the dataclass of one
version. Keys the class does not have are dropped, missing keys take the field
default or the type's zero value (:func:`~walgate.wire.serial.fields.zero_value`),
nested mappings / lists of mappings become nested dataclasses, ints become
``ErrorCode`` / ``timedelta`` / ``datetime`` (a millisecond int beyond what a
``timedelta`` holds, ±999999999 days, stays an int, which the encoder writes as
is: every int64 value of the field can be answered). *known* maps a dotted path (``""``,
``"topics"``, ``"topics.partitions"``) to every field name any version has
there; a key outside it is a typo and raises ``KeyError``. Like the codecs, a
builder is generated Python source (:class:`~walgate.wire.serial.codegen.Source`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.wire.serial.codegen import Source
from walgate.wire.serial.fields import fields_of, zero_value
from walgate.wire.serial.runtime import ERROR_CODES, datetime_from_ms

__all__ = ["Builder", "builder"]

Builder = Callable[[Any], Any]
"""``(mapping) -> instance`` (an instance passes through unchanged)."""


def _error_code(value: int | ErrorCode) -> ErrorCode:
    if isinstance(value, ErrorCode):
        return value
    code = ERROR_CODES.get(value)
    if code is None:
        raise ValueError(f"unknown Kafka error code {value!r}")
    return code


_TIMEDELTA_MAX_MS: Final = datetime.timedelta.max // datetime.timedelta(milliseconds=1)


def _timedelta(value: int | datetime.timedelta) -> int | datetime.timedelta:
    if isinstance(value, datetime.timedelta) or abs(value) > _TIMEDELTA_MAX_MS:
        return value
    return datetime.timedelta(milliseconds=value)


def _datetime(value: int | datetime.datetime | None) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return None if value == -1 else datetime_from_ms(value)


def _unknown_keys(cls: type, path: str, mapping: Mapping[str, Any], known: frozenset[str]) -> KeyError:
    extra = sorted(set(mapping) - known)
    where = f" at {path!r}" if path else ""
    return KeyError(f"{cls.__name__}{where}: no version of this API has field(s) {extra}")


_CONVERTERS: Final[dict[str, Callable[[Any], Any]]] = {
    "error_code": _error_code,
    "timedelta_i32": _timedelta,
    "timedelta_i64": _timedelta,
    "datetime_i64": _datetime,
}


def builder(cls: type, known: Mapping[str, frozenset[str]], path: str = "") -> Builder:
    """A function building *cls* from a version-agnostic mapping (see module doc).

    Not cached here: the caller caches per (api_key, version), since *known*
    depends on the API, not on the class.
    """
    infos = fields_of(cls)
    src = Source()
    cls_ref = src.ref(cls, "_cls")
    known_names = known.get(path, frozenset(i.name for i in infos))
    known_ref = src.ref(known_names, "_known")
    src.ns["_unknown"] = _unknown_keys
    src.emit(0, "def build(m):")
    src.emit(1, f"if m.__class__ is {cls_ref}:")
    src.emit(2, "return m")
    src.emit(1, f"if not {known_ref}.issuperset(m):")
    src.emit(2, f"raise _unknown({cls_ref}, {path!r}, m, {known_ref})")
    src.emit(1, "g = m.get")
    args = []
    for info in infos:
        default = src.ref(zero_value(info), "_default")
        value = f"g({info.name!r}, {default})"
        child_path = f"{path}.{info.name}" if path else info.name
        if info.kind == "entity":
            build_child = src.ref(builder(info.entity, known, child_path), "_build")  # type: ignore[arg-type]
            if info.array:
                value = f"_array({build_child}, {value})"
            elif info.nullable:
                value = f"_nullable({build_child}, {value})"
            else:
                value = f"{build_child}({value})"
        elif info.kind in _CONVERTERS:
            convert = src.ref(_CONVERTERS[info.kind], "_conv")
            value = f"_array({convert}, {value})" if info.array else f"{convert}({value})"
        elif info.array:
            value = f"_tuple({value})"
        args.append(f"{info.name}={value}")
    src.ns["_array"] = _build_array
    src.ns["_nullable"] = _build_nullable
    src.ns["_tuple"] = _as_tuple
    src.emit(1, f"return {cls_ref}({', '.join(args)})")
    return src.compile("build")


def _build_array(build: Builder, items: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if items is None else tuple(map(build, items))


def _build_nullable(build: Builder, value: Any) -> Any:
    return None if value is None else build(value)


def _as_tuple(items: Iterable[Any] | None) -> tuple[Any, ...] | None:
    if items is None or items.__class__ is tuple:
        return items
    return tuple(items)
