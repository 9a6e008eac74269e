"""Writes :mod:`walgate.wire.messages`: typed request views and response fields of every API walgate decodes.

Run ``python -m walgate.wire.messages_gen`` (``./run gen``) after kio, :mod:`walgate.wire.legacy` or
:data:`~walgate.wire.protocol.WIRE_VERSIONS` changes; ``tests/wire/test_messages.py`` fails while the module on disk
differs from what this writes.

Input: the schema dataclass of every request and response version in :data:`~walgate.wire.protocol.WIRE_VERSIONS`
(kio's, :mod:`walgate.wire.legacy`'s for versions Kafka 4.0 removed, and :mod:`walgate.wire.internal`'s for
walgate's internal APIs between nodes), read with
:func:`~walgate.wire.serial.fields_of`. A struct is identified by its path from the message (``""``, ``"topics"``,
``"topics.partitions"``) and named after its newest version's class, prefixed with the message's name unless the
class name already starts with the API's (Fetch's ``FetchTopic`` stays, ShareFetch's is
``ShareFetchRequestFetchTopic``); paths whose names agree (a common struct used twice) share one class; a name two
messages would give is refused.

Output, per API:

* a request view: a frozen dataclass per struct holding every field of every version, each defaulting to Kafka's
  default for it (the schema's, else the type's zero value) so that a version without the field reads as Kafka reads
  it; :func:`walgate.wire.protocol.decode_view` decodes straight into these classes;
* response fields: a ``TypedDict`` per struct with every field of every version, typed as
  :func:`walgate.wire.protocol.build_response` accepts them (ints for error codes and durations). It is total over the
  newest version: a field the newest version has, untagged and without a schema default, is ``Required``; the others
  may be left out, and :func:`~walgate.wire.protocol.build_response` fills them with their default (and drops what
  the answered version lacks).
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, Final

from walgate.wire.protocol import API_NAMES, WIRE_VERSIONS, request_class, response_class
from walgate.wire.serial import FieldInfo, fields_of, zero_value
from walgate.wire.serial.fields import MISSING

__all__ = ["TARGET", "generate", "main"]

TARGET: Final = Path(__file__).with_name("messages.py")

_INTS: Final = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
_VIEW_TYPES: Final = {
    "float64": "float", "bool": "bool", "error_code": "int", "timedelta_i32": "datetime.timedelta",
    "timedelta_i64": "datetime.timedelta", "datetime_i64": "datetime.datetime", "uuid": "uuid.UUID | None",
    "string": "str", "bytes": "bytes", "records": "bytes",
} | {kind: "int" for kind in _INTS}
"""Kafka type -> the type :mod:`walgate.wire.serial`'s decoders give its values."""
_FIELD_TYPES: Final = _VIEW_TYPES | {
    "timedelta_i32": "int | datetime.timedelta", "timedelta_i64": "int | datetime.timedelta",
    "datetime_i64": "int | datetime.datetime", "bytes": "bytes | bytearray | memoryview", "records": "Records",
}
"""Kafka type -> what :func:`~walgate.wire.protocol.build_response` takes for it."""


@dataclasses.dataclass
class _Field:
    """One field of a struct, over every version that has it."""

    name: str
    versions: set[int] = dataclasses.field(default_factory=set)
    kinds: set[str] = dataclasses.field(default_factory=set)
    array: bool = False
    nullable: bool = False
    entity: str | None = None
    newest: FieldInfo | None = None


@dataclasses.dataclass
class _Struct:
    name: str
    fields: dict[str, _Field] = dataclasses.field(default_factory=dict)
    children: list[str] = dataclasses.field(default_factory=list)


class _Message:
    """The structs of one side (request or response) of one API, over its versions, newest first."""

    def __init__(self, classes: list[tuple[int, type]]) -> None:
        self.top = classes[0][1].__name__
        self.structs: dict[str, _Struct] = {}
        self._names: dict[str, str] = {}
        for version, cls in classes:
            self._walk(cls, "", version)

    def _walk(self, cls: type, path: str, version: int) -> str:
        api = self.top.removesuffix("Request").removesuffix("Response")
        name = self._names.setdefault(path, cls.__name__ if cls.__name__.startswith(api) else self.top + cls.__name__)
        struct = self.structs.setdefault(name, _Struct(name))
        for info in fields_of(cls):
            field = struct.fields.setdefault(info.name, _Field(info.name))
            field.versions.add(version)
            field.kinds.add(info.kind)
            field.array |= info.array
            field.nullable |= info.nullable
            field.newest = field.newest or info
            if info.entity is not None:
                child = self._walk(info.entity, f"{path}.{info.name}" if path else info.name, version)
                if field.entity not in (None, child):
                    raise TypeError(f"{name}.{info.name}: struct {field.entity} in one version, {child} in another")
                field.entity = child
                if child not in struct.children:
                    struct.children.append(child)
        return name

    def paths(self) -> dict[str, set[str]]:
        """Dotted path of each struct ('' the message) -> the field names any version has there."""
        return {path: set(self.structs[name].fields) for path, name in self._names.items()}

    def ordered(self) -> list[_Struct]:
        """Every struct after the structs it holds."""
        out: list[_Struct] = []

        def visit(name: str) -> None:
            struct = self.structs[name]
            if struct in out:
                return
            for child in struct.children:
                visit(child)
            out.append(struct)

        visit(self.top)
        return out


def _versions(field: _Field, low: int, high: int) -> str:
    """``v4+``, ``v0-3``, ``v5``; empty when every version has the field."""
    first, last = min(field.versions), max(field.versions)
    if field.versions != set(range(first, last + 1)):
        return "v" + ",".join(map(str, sorted(field.versions)))
    if (first, last) == (low, high):
        return ""
    if last == high:
        return f"v{first}+"
    return f"v{first}" if first == last else f"v{first}-{last}"


def _type(field: _Field, types: dict[str, str], array: str) -> str:
    if field.entity is not None:
        inner = field.entity
    else:
        parts: list[str] = []
        for kind in sorted(field.kinds):
            parts.extend(p for p in types[kind].split(" | ") if p not in parts)
        inner = " | ".join(parts)
        if field.array and len(parts) > 1:
            inner = f"({inner})" if array == "tuple" else inner
    if field.array:
        inner = f"tuple[{inner}, ...]" if array == "tuple" else f"Sequence[{inner}]"
    if field.nullable and "None" not in inner.split(" | "):
        inner += " | None"
    return inner


def _literal(value: Any, entity: str | None) -> str:
    """Python source for a field default (:func:`~walgate.wire.serial.zero_value`'s)."""
    if dataclasses.is_dataclass(value):
        return f"{entity}()"
    if value is None or isinstance(value, bool | str | bytes | float):
        return repr(value)
    if isinstance(value, int):  # ErrorCode too
        return repr(int(value))
    if isinstance(value, tuple):
        items = [_literal(v, None) for v in value]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    if isinstance(value, datetime.timedelta):
        return f"datetime.timedelta(milliseconds={value // datetime.timedelta(milliseconds=1)})"
    if isinstance(value, datetime.datetime):
        return f"datetime.datetime.fromtimestamp({value.timestamp()!r}, tz=datetime.UTC)"
    if isinstance(value, uuid.UUID):
        return f"uuid.UUID({str(value)!r})"
    raise TypeError(f"no literal for default {value!r}")


def _view(struct: _Struct, low: int, high: int, what: str) -> list[str]:
    lines = ["", "", "@dataclass(frozen=True, slots=True, kw_only=True)", f"class {struct.name}:",
             f'    """{what}, v{low}-v{high}: a request view (see the module doc)."""', ""]
    for field in struct.fields.values():
        assert field.newest is not None
        default = _literal(zero_value(field.newest), field.entity)
        note = _versions(field, low, high)
        lines.append(f"    {field.name}: {_type(field, _VIEW_TYPES, 'tuple')} = {default}" +
                     (f"  # {note}" if note else ""))
    return lines


def _fields(struct: _Struct, low: int, high: int, what: str) -> list[str]:
    lines = ["", "", f"class {struct.name}(TypedDict, total=False):",
             f'    """{what}, v{low}-v{high}: response fields (see the module doc)."""', ""]
    for field in struct.fields.values():
        note = _versions(field, low, high)
        tp = _type(field, _FIELD_TYPES, "sequence")
        assert field.newest is not None
        if high in field.versions and field.newest.tag is None and field.newest.default is MISSING:
            tp = f"Required[{tp}]"  # total over the newest version (module doc)
        lines.append(f"    {field.name}: {tp}" + (f"  # {note}" if note else ""))
    return lines


_HEAD: Final = '''"""Typed request views and response fields of every API walgate decodes, from kio's schemas.

GENERATED by :mod:`walgate.wire.messages_gen` (``./run gen``); do not edit. Per API: the request view
(``<Api>Request`` and its structs: frozen dataclasses with every field of every version, a field a version lacks
holding Kafka's default, what :func:`walgate.wire.protocol.decode_view` returns and handlers take) and the response
fields (``<Api>Response`` and its structs: typed dicts of every field of every version, ``Required`` where the
newest version has the field untagged and without a default, what handlers return and
:func:`walgate.wire.protocol.build_response` builds the response of the request's version from, filling what is
left out with its default). A version comment (``v4+``) marks a field not every version has.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from typing import Final, Required, TypeAlias, TypedDict

__all__ = ["ENTITIES", "REQUESTS", "RESPONSE_FIELDS", "VERSIONS", "Records"]

Records: TypeAlias = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview | Sized]
"""A ``records`` value: bytes, or buffers and file regions written back to back (:mod:`walgate.wire.serial`)."""'''


def generate() -> str:
    """The source of :mod:`walgate.wire.messages` for the schemas installed now."""
    out = [_HEAD]
    requests: list[str] = []
    entities: list[str] = []
    response_fields: list[str] = []
    names: set[str] = set()
    for api_key in sorted(WIRE_VERSIONS):
        low, high = WIRE_VERSIONS[api_key]
        versions = range(high, low - 1, -1)
        api = f"{API_NAMES[api_key]} (key {api_key})"
        out += ["", "", f"# {'-' * 75} {api}"]
        for side, make, render in (("request", request_class, _view), ("response", response_class, _fields)):
            message = _Message([(v, make(api_key, v)) for v in versions])
            if twice := names & message.structs.keys():
                raise TypeError(f"{message.top}: struct names {sorted(twice)} already given by another message")
            names |= message.structs.keys()
            for struct in message.ordered():
                out += render(struct, low, high, f"{message.top} (key {api_key})" if struct.name == message.top
                              else f"In {message.top}")
                if side == "request":
                    nested = [f'        "{f.name}": {f.entity},' for f in struct.fields.values() if f.entity]
                    if nested:
                        entities += [f"    {struct.name}: {{", *nested, "    },"]
            if side == "request":
                requests.append(f"    {api_key}: {message.top},")
            else:
                response_fields.append(f"    {api_key}: {{")
                for path, found in sorted(message.paths().items()):
                    response_fields.append(f'        "{path}": frozenset({{')
                    listed = ", ".join(f'"{name}"' for name in sorted(found)) + ","
                    response_fields += [f"            {line}" for line in textwrap.wrap(
                        listed, 120 - 12, break_long_words=False, break_on_hyphens=False)]
                    response_fields.append("        }),")
                response_fields.append("    },")
    ranges = [f"    {key}: {WIRE_VERSIONS[key]!r}," for key in sorted(WIRE_VERSIONS)]
    out += ["", "", "VERSIONS: Final[dict[int, tuple[int, int]]] = {", *ranges, "}",
            '"""Api key -> (min, max) version this module was generated for (``protocol.WIRE_VERSIONS`` then)."""',
            "REQUESTS: Final[dict[int, type]] = {", *requests, "}",
            '"""Api key -> its request view."""',
            "ENTITIES: Final[dict[type, dict[str, type]]] = {", *entities, "}",
            '"""Request view -> its struct fields\' views, by field name."""',
            "RESPONSE_FIELDS: Final[dict[int, dict[str, frozenset[str]]]] = {", *response_fields, "}",
            '"""Api key -> dotted path of a response struct (\'\' the response) -> the field names any version has there:',
            "what :func:`walgate.wire.protocol.build_response` tells a field a version lacks from a typo by, without",
            'importing every version\'s response class (~0.15 s for Fetch\'s, ~1.1 s for every API\'s, at each API\'s first',
            'answer in a node)."""', ""]
    return "\n".join(_wrap(line) for line in out)


def _wrap(line: str, limit: int = 120) -> str:
    """A field line too long for the linter, with its comment on a line of its own above it."""
    if len(line) <= limit or "  # " not in line:
        return line
    code, _, note = line.partition("  # ")
    return f"    # {note}\n{code}"


def main(argv: list[str] | None = None) -> int:
    """Write :data:`TARGET` (``--check``: exit 1 if it differs instead)."""
    source = generate()
    if "--check" in (argv if argv is not None else sys.argv[1:]):
        stale = not TARGET.exists() or TARGET.read_text() != source
        if stale:
            print(f"{TARGET} is stale: run python -m walgate.wire.messages_gen", file=sys.stderr)
        return 1 if stale else 0
    TARGET.write_text(source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
