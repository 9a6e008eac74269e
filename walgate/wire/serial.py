"""Compile kio schema dataclasses into bounded decoders, chunked encoders and builders.

Why not kio's own reader and writer
-----------------------------------
kio's dataclasses (generated from Apache Kafka's JSON message descriptors) are the
schemas; this module only replaces kio's *serialisers*, for three measured reasons:

* kio 0.6.5's native reader pre-allocates arrays from the untrusted length prefix:
  a 60-byte garbage frame made it request ~240 GB and **abort the process**
  (Rust ``handle_alloc_error``). A gateway must survive any bytes a peer sends.
* kio's reader raises ``KeyError`` on unknown tagged fields; the protocol says skip them.
* kio's writer issues one ``struct.pack`` + ``write`` per field and copies ``records``
  into a ``BytesIO``; Fetch responses want few chunks and no copy of big record sets.

How it works
------------
For every dataclass (request, response or nested struct) the field list is analysed
once (:func:`fields_of`) and Python source for three functions is generated and
compiled (the technique ``dataclasses`` and ``attrs`` use), then cached per class:

``decoder(cls)(data, pos) -> (instance, new_pos)``
    Runs of fixed-width fields are read with one precompiled ``struct`` call.
    Every length (strings, bytes, arrays) is checked against the bytes remaining
    before anything is allocated; unknown tagged fields are skipped; truncation,
    garbage, bad enum values all become :class:`~walgate.wire.errors.MalformedFrame`.
    Strings are decoded as UTF-8 with replacement characters, as Kafka's Java
    broker does (``new String(bytes, UTF_8)``). Values have kio's types
    (``ErrorCode``, ``timedelta``, tz-aware ``datetime``, ``UUID | None``).

``encoder(cls)(buf, out, instance) -> buf``
    Appends the encoding to the ``bytearray`` *buf*. A ``bytes``/``records``
    value of at least :data:`BIG_VALUE` bytes is not copied: *buf* is appended
    to the chunk list *out*, then the value itself, and a fresh ``bytearray``
    is returned to continue with. A ``records`` field may also hold a *sequence*
    of buffers (for example several stored batches), written back to back
    without joining them (a walgate extension; kio's own writer wants bytes).
    Such a sequence may also hold sized non-buffer chunks of at least
    :data:`BIG_VALUE` bytes (the gateway's file regions, sent with sendfile):
    only their ``len()`` is used here.
    The encoder is lenient about value types where it is free: ``int`` or
    ``ErrorCode``, ``int`` milliseconds or ``timedelta``, ``bytes``/``bytearray``/
    ``memoryview``. Tagged fields equal to their default are omitted, as kio and
    Kafka do.

``builder(cls, known)(mapping) -> instance``
    Builds the dataclass from a version-agnostic nested mapping: keys the class
    does not have are dropped, missing keys take the field default or the
    type's zero value, nested mappings / lists of mappings become nested
    dataclasses, ints become ``ErrorCode`` / ``timedelta`` / ``datetime``.
    *known* maps a dotted path (``""``, ``"topics"``, ``"topics.partitions"``)
    to every field name any version has there; a key outside it is a typo and
    raises ``KeyError``.

Wire rules implemented (Kafka protocol guide, KIP-482 flexible versions, KIP-893):
non-flexible strings have an int16 length (-1 = null), bytes/records an int32
length, arrays an int32 count (-1 = null); flexible versions use an unsigned
varint of length+1 (0 = null) for all three and end every struct with a tagged
field section ``uvarint count, (uvarint tag, uvarint size, data)*`` in
ascending tag order. A nullable (non-tagged) struct field is prefixed with an
int8 marker, -1 for null and 1 otherwise. A UUID is 16 bytes, all-zero = null.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.serial.readers import tz_aware_from_i64

from walgate.wire.errors import MalformedFrame

__all__ = [
    "BIG_VALUE",
    "chunk_len",
    "FieldInfo",
    "fields_of",
    "decoder",
    "encoder",
    "builder",
    "zero_value",
    "write_uvarint",
    "read_uvarint",
    "ms",
]

BIG_VALUE: Final = 2048
"""``bytes``/``records`` values this long or longer become their own output chunk."""

_FIXED: Final[dict[str, str]] = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q",
    "uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q",
    "float64": "d", "bool": "?", "error_code": "h",
    "timedelta_i32": "i", "timedelta_i64": "q", "datetime_i64": "q", "uuid": "16s",
}
_VARIABLE: Final = frozenset({"string", "bytes", "records"})
_MISSING: Final = dataclasses.MISSING
_ZERO_UUID: Final = bytes(16)
_NULL16: Final = b"\xff\xff"
_NULL32: Final = b"\xff\xff\xff\xff"
_ERROR_CODES: Final[dict[int, ErrorCode]] = {int(code): code for code in ErrorCode}


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
        entity = inner if dataclasses.is_dataclass(inner) else None
        kind = "entity" if entity is not None else f.metadata["kafka_type"]
        if kind not in _FIXED and kind not in _VARIABLE and kind != "entity":
            raise TypeError(f"{cls.__name__}.{f.name}: unknown kafka_type {kind!r}")
        tag = f.metadata.get("tag")
        if kind == "uuid" and not array:
            optional = False  # None <-> the all-zero UUID, not a null marker
        if tag is not None and kind == "entity" and optional:
            raise TypeError(f"{cls.__name__}.{f.name}: nullable tagged structs are not supported")
        if f.default is not _MISSING:
            default = f.default
        elif f.default_factory is not _MISSING:
            default = f.default_factory()
        else:
            default = _MISSING
        infos.append(FieldInfo(f.name, kind, array, optional, entity, tag, default))
    result = tuple(infos)
    _FIELDS_CACHE[cls] = result
    return result


def zero_value(info: FieldInfo) -> Any:
    """The value of a field that was not given: its default, else the type's zero value."""
    if info.default is not _MISSING:
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
        return tz_aware_from_i64(0)
    return 0


# --------------------------------------------------------------------------- varints


def write_uvarint(buf: bytearray, value: int) -> None:
    """Append *value* as an unsigned LEB128 varint."""
    while value > 0x7F:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (Kafka's 32-bit ``UNSIGNED_VARINT``)."""
    value = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedFrame("unsigned varint longer than 5 bytes")


# --------------------------------------------------------------------------- runtime helpers

_UNPACK_I16 = struct.Struct(">h").unpack_from
_UNPACK_I32 = struct.Struct(">i").unpack_from
_PACK_I16 = struct.Struct(">h").pack
_PACK_I32 = struct.Struct(">i").pack


def _short(what: str, need: int, pos: int, data: bytes) -> MalformedFrame:
    return MalformedFrame(f"{what} of {need} bytes at offset {pos} overruns the {len(data)}-byte buffer")


def _str16(data: bytes, pos: int, nullable: bool) -> tuple[str | None, int]:
    (n,) = _UNPACK_I16(data, pos)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise MalformedFrame(f"string length {n} at offset {pos - 2}")
    end = pos + n
    if end > len(data):
        raise _short("string", n, pos, data)
    return data[pos:end].decode("utf-8", "replace"), end


def _cstr(data: bytes, pos: int, nullable: bool) -> tuple[str | None, int]:
    n = data[pos]
    pos += 1
    if n > 0x7F:
        n, pos = read_uvarint(data, pos - 1)
    if n == 0:
        if nullable:
            return None, pos
        raise MalformedFrame(f"null in a non-nullable compact string at offset {pos - 1}")
    end = pos + n - 1
    if end > len(data):
        raise _short("compact string", n - 1, pos, data)
    return data[pos:end].decode("utf-8", "replace"), end


def _bytes32(data: bytes, pos: int, nullable: bool) -> tuple[bytes | None, int]:
    (n,) = _UNPACK_I32(data, pos)
    pos += 4
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise MalformedFrame(f"bytes length {n} at offset {pos - 4}")
    end = pos + n
    if end > len(data):
        raise _short("bytes", n, pos, data)
    return data[pos:end], end


def _cbytes(data: bytes, pos: int, nullable: bool) -> tuple[bytes | None, int]:
    n = data[pos]
    pos += 1
    if n > 0x7F:
        n, pos = read_uvarint(data, pos - 1)
    if n == 0:
        if nullable:
            return None, pos
        raise MalformedFrame(f"null in non-nullable compact bytes at offset {pos - 1}")
    end = pos + n - 1
    if end > len(data):
        raise _short("compact bytes", n - 1, pos, data)
    return data[pos:end], end


def _len32(data: bytes, pos: int, nullable: bool) -> tuple[int, int]:
    """Array count (-1 = null), checked against the bytes left: every element takes >= 1 byte."""
    (n,) = _UNPACK_I32(data, pos)
    pos += 4
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise MalformedFrame(f"array length {n} at offset {pos - 4}")
    if n > len(data) - pos:
        raise _short("array", n, pos, data)
    return n, pos


def _clen(data: bytes, pos: int, nullable: bool) -> tuple[int, int]:
    n = data[pos]
    pos += 1
    if n > 0x7F:
        n, pos = read_uvarint(data, pos - 1)
    if n == 0:
        if nullable:
            return -1, pos
        raise MalformedFrame(f"null in a non-nullable compact array at offset {pos - 1}")
    n -= 1
    if n > len(data) - pos:
        raise _short("compact array", n, pos, data)
    return n, pos


def _uuid(raw: bytes) -> uuid.UUID | None:
    return None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)


def _dt(ms_value: int) -> datetime.datetime:
    return tz_aware_from_i64(ms_value)


def _ndt(ms_value: int) -> datetime.datetime | None:
    return None if ms_value == -1 else tz_aware_from_i64(ms_value)


def _td(ms_value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms_value)


def _tag_overrun(tag: int, pos: int, end: int) -> MalformedFrame:
    return MalformedFrame(f"tagged field {tag} ends at {pos}, its size says {end}")


def ms(value: int | datetime.timedelta) -> int:
    """Milliseconds of an ``int`` or ``timedelta`` (rounded like kio's writer)."""
    if value.__class__ is int:
        return value  # type: ignore[return-value]
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _dtms(value: datetime.datetime | int | None) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _uuid_bytes(value: uuid.UUID | None) -> bytes:
    return _ZERO_UUID if value is None else value.bytes


def _ws16(buf: bytearray, value: str) -> None:
    raw = value.encode()
    buf += _PACK_I16(len(raw))
    buf += raw


def _wns16(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf += _NULL16
    else:
        _ws16(buf, value)


def _wncs(buf: bytearray, value: str | None) -> None:
    if value is None:
        buf.append(0)
    else:
        _wcs(buf, value)


def _wcs(buf: bytearray, value: str) -> None:
    raw = value.encode()
    n = len(raw) + 1
    if n < 0x80:
        buf.append(n)
    else:
        write_uvarint(buf, n)
    buf += raw


def chunk_len(chunk: Any) -> int:
    """Bytes in a chunk: a buffer, or any sized object the writer knows how to send (a file region)."""
    return chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)


def _buffers_len(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return chunk_len(value)
    return sum(map(chunk_len, value))


def _wbytes(buf: bytearray, out: list[Any], value: Any, flexible: bool) -> bytearray:
    """Write a non-null bytes/records value (length prefix + data), chunking big ones."""
    n = _buffers_len(value)
    if flexible:
        write_uvarint(buf, n + 1)
    else:
        buf += _PACK_I32(n)
    if n < BIG_VALUE:
        if isinstance(value, (bytes, bytearray, memoryview)):
            buf += value
        else:
            for part in value:
                buf += part
        return buf
    out.append(buf)
    if isinstance(value, (bytes, bytearray, memoryview)):
        out.append(value)
    else:
        out.extend(value)
    return bytearray()


def _wtags(buf: bytearray, tags: list[tuple[int, bytearray]]) -> None:
    write_uvarint(buf, len(tags))
    for tag, data in tags:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(data))
        buf += data


def _tag_bytes(encode: Callable[[bytearray, list[Any], Any], bytearray], value: Any) -> bytearray:
    """Encode one tagged value into its own buffer (joined: tags are small)."""
    out: list[Any] = []
    tail = encode(bytearray(), out, value)
    if not out:
        return tail
    return bytearray(b"".join(out)) + tail


_RUNTIME: Final[dict[str, Any]] = {
    "_str16": _str16, "_cstr": _cstr, "_bytes32": _bytes32, "_cbytes": _cbytes,
    "_len32": _len32, "_clen": _clen, "_uvar": read_uvarint, "_uuid": _uuid,
    "_dt": _dt, "_ndt": _ndt, "_td": _td, "_EC": _ERROR_CODES, "_tag_overrun": _tag_overrun,
    "_Malformed": MalformedFrame, "_ms": ms, "_dtms": _dtms, "_ub": _uuid_bytes,
    "_ws16": _ws16, "_wcs": _wcs, "_wns16": _wns16, "_wncs": _wncs, "_wbytes": _wbytes, "_wuvar": write_uvarint,
    "_wtags": _wtags, "_tag_bytes": _tag_bytes, "_P16": _PACK_I16, "_P32": _PACK_I32,
    "_NULL16": _NULL16, "_NULL32": _NULL32, "_struct": struct,
}


class _Source:
    """Accumulates generated source lines and the names they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(_RUNTIME)
        self._n = 0

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def ref(self, value: Any, prefix: str) -> str:
        self._n += 1
        name = f"{prefix}{self._n}"
        self.ns[name] = value
        return name

    def compile(self, name: str) -> Callable[..., Any]:
        source = "\n".join(self.lines) + "\n"
        exec(compile(source, f"<walgate.wire.serial {name}>", "exec"), self.ns)  # noqa: S102
        func = self.ns[name]
        func.__source__ = source
        return typing.cast(Callable[..., Any], func)


def _fixed_runs(infos: Sequence[FieldInfo]) -> list[list[FieldInfo] | FieldInfo]:
    """Group consecutive fixed-width scalar (non-tagged) fields for one struct call."""
    groups: list[list[FieldInfo] | FieldInfo] = []
    run: list[FieldInfo] = []
    for info in infos:
        if info.kind in _FIXED and not info.array:
            run.append(info)
            continue
        if run:
            groups.append(run)
            run = []
        groups.append(info)
    if run:
        groups.append(run)
    return groups


# --------------------------------------------------------------------------- decoders

_DECODERS: dict[type, Callable[[bytes, int], tuple[Any, int]]] = {}


def _fixed_convert(info: FieldInfo, var: str) -> str:
    kind = info.kind
    if kind == "error_code":
        return f"_EC[{var}]"
    if kind in ("timedelta_i32", "timedelta_i64"):
        return f"_td({var})"
    if kind == "datetime_i64":
        return f"_ndt({var})" if info.nullable else f"_dt({var})"
    if kind == "uuid":
        return f"_uuid({var})"
    return var


def _decode_value(src: _Source, info: FieldInfo, var: str, flexible: bool, indent: int) -> None:
    """Emit code reading one field value into *var*, advancing ``p``."""
    kind = info.kind
    nullable = info.nullable
    if info.array:
        src.emit(indent, f"n, p = {'_clen' if flexible else '_len32'}(d, p, {nullable})")
        if nullable:
            src.emit(indent, "if n < 0:")
            src.emit(indent + 1, f"{var} = None")
            src.emit(indent, "else:")
        else:
            indent -= 1  # the body below is emitted at indent + 1
        if kind in ("int8", "int16", "int32", "int64", "uint16", "float64"):
            code = _FIXED[kind]
            src.emit(indent + 1, f"{var} = _struct.unpack_from('>%d{code}' % n, d, p)")
            src.emit(indent + 1, f"p += n * {struct.calcsize(code)}")
            return
        src.emit(indent + 1, "items = []")
        src.emit(indent + 1, "for _ in range(n):")
        if kind == "entity":
            src.emit(indent + 2, f"x, p = {src.ref(decoder(info.entity), '_dec')}(d, p)")  # type: ignore[arg-type]
        else:
            _decode_value(src, dataclasses.replace(info, array=False, nullable=False), "x", flexible, indent + 2)
        src.emit(indent + 2, "items.append(x)")
        src.emit(indent + 1, f"{var} = tuple(items)")
        return
    if kind == "entity":
        dec = src.ref(decoder(info.entity), "_dec")  # type: ignore[arg-type]
        if nullable and info.tag is None:
            src.emit(indent, "marker = d[p]")
            src.emit(indent, "p += 1")
            src.emit(indent, "if marker > 127:")
            src.emit(indent + 1, f"{var} = None")
            src.emit(indent, "else:")
            src.emit(indent + 1, f"{var}, p = {dec}(d, p)")
        else:
            src.emit(indent, f"{var}, p = {dec}(d, p)")
        return
    if kind == "string":
        src.emit(indent, f"{var}, p = {'_cstr' if flexible else '_str16'}(d, p, {nullable})")
        return
    if kind in ("bytes", "records"):
        src.emit(indent, f"{var}, p = {'_cbytes' if flexible else '_bytes32'}(d, p, {nullable})")
        return
    single_byte = {"bool": "d[p] != 0", "uint8": "d[p]", "int8": "(d[p] ^ 128) - 128"}
    if kind in single_byte:
        src.emit(indent, f"{var} = {single_byte[kind]}")
        src.emit(indent, "p += 1")
        return
    code = _FIXED[kind]
    unpack = src.ref(struct.Struct(">" + code).unpack_from, "_U")
    src.emit(indent, f"{var}, = {unpack}(d, p)")
    src.emit(indent, f"p += {struct.calcsize('>' + code)}")
    converted = _fixed_convert(info, var)
    if converted != var:
        src.emit(indent, f"{var} = {converted}")


def decoder(cls: type) -> Callable[[bytes, int], tuple[Any, int]]:
    """The decoder of a schema dataclass: ``(data, pos) -> (instance, new_pos)``.

    It raises :class:`MalformedFrame` for bounds violations it detects and lets
    ``struct.error``/``IndexError``/``KeyError`` escape for truncation detected
    by Python itself; :func:`walgate.wire.protocol.decode_request` converts those.
    """
    cached = _DECODERS.get(cls)
    if cached is not None:
        return cached
    infos = fields_of(cls)
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    src = _Source()
    cls_ref = src.ref(cls, "_cls")
    name = f"decode_{cls.__name__}"
    src.emit(0, f"def {name}(d, p):")
    plain = [i for i in infos if i.tag is None]
    tagged = sorted((i for i in infos if i.tag is not None), key=lambda i: i.tag or 0)
    local = {info.name: f"v_{info.name}" for info in infos}
    for group in _fixed_runs(plain):
        if isinstance(group, list):
            fmt = ">" + "".join(_FIXED[i.kind] for i in group)
            if len(group) == 1:
                _decode_value(src, group[0], local[group[0].name], flexible, 1)
                continue
            unpack = src.ref(struct.Struct(fmt).unpack_from, "_U")
            names = ", ".join(local[i.name] for i in group)
            src.emit(1, f"{names}, = {unpack}(d, p)")
            src.emit(1, f"p += {struct.calcsize(fmt)}")
            for info in group:
                converted = _fixed_convert(info, local[info.name])
                if converted != local[info.name]:
                    src.emit(1, f"{local[info.name]} = {converted}")
            continue
        _decode_value(src, group, local[group.name], flexible, 1)
    if flexible:
        for info in tagged:
            src.emit(1, f"{local[info.name]} = {src.ref(zero_value(info), '_default')}")
        src.emit(1, "ntags = d[p]")
        src.emit(1, "p += 1")
        src.emit(1, "if ntags > 127:")
        src.emit(2, "ntags, p = _uvar(d, p - 1)")
        src.emit(1, "for _ in range(ntags):")
        src.emit(2, "tag, p = _uvar(d, p)")
        src.emit(2, "size, p = _uvar(d, p)")
        src.emit(2, "end = p + size")
        src.emit(2, "if end > len(d):")
        src.emit(3, "raise _Malformed(f'tagged field {tag} of {size} bytes overruns the buffer')")
        for index, info in enumerate(tagged):
            src.emit(2, f"{'if' if index == 0 else 'elif'} tag == {info.tag}:")
            _decode_value(src, info, local[info.name], flexible, 3)
            src.emit(3, "if p != end:")
            src.emit(4, "raise _tag_overrun(tag, p, end)")
        src.emit(2, "p = end")
    args = ", ".join(f"{info.name}={local[info.name]}" for info in infos)
    src.emit(1, f"return {cls_ref}({args}), p")
    func = typing.cast(Callable[[bytes, int], tuple[Any, int]], src.compile(name))
    _DECODERS[cls] = func
    return func


# --------------------------------------------------------------------------- encoders

Encoder = Callable[[bytearray, list[Any], Any], bytearray]
_ENCODERS: dict[type, Encoder] = {}


def _fixed_arg(info: FieldInfo, expr: str) -> str:
    kind = info.kind
    if kind in ("timedelta_i32", "timedelta_i64"):
        return f"_ms({expr})"
    if kind == "datetime_i64":
        return f"_dtms({expr})"
    if kind == "uuid":
        return f"_ub({expr})"
    return expr


def _encode_value(src: _Source, info: FieldInfo, expr: str, flexible: bool, indent: int) -> None:
    """Emit code appending one field value (held in local *expr*) to ``b``."""
    kind = info.kind
    if info.array:
        if info.nullable:
            src.emit(indent, f"if {expr} is None:")
            src.emit(indent + 1, "b.append(0)" if flexible else "b += _NULL32")
            src.emit(indent, "else:")
        else:
            indent -= 1  # the body below is emitted at indent + 1
        if flexible:
            src.emit(indent + 1, f"_wuvar(b, len({expr}) + 1)")
        else:
            src.emit(indent + 1, f"b += _P32(len({expr}))")
        if kind in ("int8", "int16", "int32", "int64", "uint16", "float64"):
            src.emit(indent + 1, f"b += _struct.pack('>%d{_FIXED[kind]}' % len({expr}), *{expr})")
            return
        src.emit(indent + 1, f"for y in {expr}:")
        if kind == "entity":
            src.emit(indent + 2, f"b = {src.ref(encoder(info.entity), '_enc')}(b, out, y)")  # type: ignore[arg-type]
        else:
            _encode_value(src, dataclasses.replace(info, array=False, nullable=False), "y", flexible, indent + 2)
        return
    if kind == "entity":
        enc = src.ref(encoder(info.entity), "_enc")  # type: ignore[arg-type]
        if info.nullable and info.tag is None:
            src.emit(indent, f"if {expr} is None:")
            src.emit(indent + 1, "b.append(255)")
            src.emit(indent, "else:")
            src.emit(indent + 1, "b.append(1)")
            src.emit(indent + 1, f"b = {enc}(b, out, {expr})")
        else:
            src.emit(indent, f"b = {enc}(b, out, {expr})")
        return
    if kind == "string":
        writer = ("_wncs" if flexible else "_wns16") if info.nullable else ("_wcs" if flexible else "_ws16")
        src.emit(indent, f"{writer}(b, {expr})")
        return
    if kind in ("bytes", "records"):
        if info.nullable:
            src.emit(indent, f"if {expr} is None:")
            src.emit(indent + 1, "b.append(0)" if flexible else "b += _NULL32")
            src.emit(indent, "else:")
            indent += 1
        src.emit(indent, f"b = _wbytes(b, out, {expr}, {flexible})")
        return
    single_byte = {"uint8": expr, "bool": f"1 if {expr} else 0"}
    if kind in single_byte:
        src.emit(indent, f"b.append({single_byte[kind]})")
        return
    pack = src.ref(struct.Struct(">" + _FIXED[kind]).pack, "_P")
    src.emit(indent, f"b += {pack}({_fixed_arg(info, expr)})")


def encoder(cls: type) -> Encoder:
    """The encoder of a schema dataclass: ``(buf, out, instance) -> buf`` (see module doc)."""
    cached = _ENCODERS.get(cls)
    if cached is not None:
        return cached
    infos = fields_of(cls)
    flexible = bool(cls.__flexible__)  # type: ignore[attr-defined]
    src = _Source()
    name = f"encode_{cls.__name__}"
    src.emit(0, f"def {name}(b, out, v):")
    plain = [i for i in infos if i.tag is None]
    tagged = sorted((i for i in infos if i.tag is not None), key=lambda i: i.tag or 0)
    for group in _fixed_runs(plain):
        if isinstance(group, list):
            if len(group) == 1:
                src.emit(1, f"x = v.{group[0].name}")
                _encode_value(src, group[0], "x", flexible, 1)
                continue
            pack = src.ref(struct.Struct(">" + "".join(_FIXED[i.kind] for i in group)).pack, "_P")
            args = ", ".join(_fixed_arg(i, f"v.{i.name}") for i in group)
            src.emit(1, f"b += {pack}({args})")
            continue
        src.emit(1, f"x = v.{group.name}")
        _encode_value(src, group, "x", flexible, 1)
    if flexible:
        if not tagged:
            src.emit(1, "b.append(0)")
        else:
            src.emit(1, "tags = []")
            for info in tagged:
                default = src.ref(zero_value(info), "_default")
                src.emit(1, f"x = v.{info.name}")
                src.emit(1, f"if x != {default}:")
                value_encoder = src.ref(_value_encoder(info), "_tagenc")
                src.emit(2, f"tags.append(({info.tag}, _tag_bytes({value_encoder}, x)))")
            src.emit(1, "_wtags(b, tags)")
    src.emit(1, "return b")
    func = typing.cast(Encoder, src.compile(name))
    _ENCODERS[cls] = func
    return func


def _value_encoder(info: FieldInfo) -> Encoder:
    """A stand-alone encoder for one (tagged) field value, in flexible encoding."""
    src = _Source()
    src.emit(0, "def encode_value(b, out, x):")
    _encode_value(src, info, "x", True, 1)
    src.emit(1, "return b")
    return typing.cast(Encoder, src.compile("encode_value"))


# --------------------------------------------------------------------------- builders

Builder = Callable[[Any], Any]


def _error_code(value: int | ErrorCode) -> ErrorCode:
    if isinstance(value, ErrorCode):
        return value
    code = _ERROR_CODES.get(value)
    if code is None:
        raise ValueError(f"unknown Kafka error code {value!r}")
    return code


def _timedelta(value: int | datetime.timedelta) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=value)


def _datetime(value: int | datetime.datetime | None) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return None if value == -1 else tz_aware_from_i64(value)


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
    src = _Source()
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
    return None if items is None or items.__class__ is tuple else tuple(items)  # type: ignore[return-value]
