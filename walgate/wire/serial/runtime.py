"""The primitives generated serialisers call: varints, strings, bytes, arrays, tagged fields.

Wire rules (Kafka protocol guide, KIP-482 flexible versions, KIP-893; all integers
big-endian): non-flexible strings have an int16 length (-1 = null), bytes/records
an int32 length, arrays an int32 count (-1 = null); flexible versions use an
unsigned varint of length+1 (0 = null) for all three and end every struct with a
tagged field section ``uvarint count, (uvarint tag, uvarint size, data)*`` in
ascending tag order. A nullable (non-tagged) struct field is prefixed with an
int8 marker, -1 for null and 1 otherwise. A UUID is 16 bytes, all-zero = null.

Readers take ``(data, pos, ...)`` and return ``(value, new_pos)``; every length is
checked against the bytes remaining before anything is allocated, and a bad one
raises :class:`~walgate.wire.errors.MalformedFrame` (a read past the end may also
raise ``IndexError`` or ``struct.error``, which
:func:`walgate.wire.protocol.decode_request` turns into ``MalformedFrame``).
Writers append to a ``bytearray``; :func:`write_bytes` hands a value of at least
:data:`BIG_VALUE` bytes over as its own chunk instead of copying it.
Generated code finds these functions by their short names in :data:`RUNTIME`.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from walgate.wire.errors import MalformedFrame

__all__ = [
    "BIG_VALUE",
    "ERROR_CODES",
    "RUNTIME",
    "chunk_len",
    "datetime_from_ms",
    "ms",
    "read_uvarint",
    "write_bytes",
    "write_uvarint",
]

BIG_VALUE: Final = 2048
"""``bytes``/``records`` values this long or longer become their own output chunk."""

ERROR_CODES: Final[dict[int, ErrorCode]] = {int(code): code for code in ErrorCode}
"""Kafka error code -> kio's ``ErrorCode`` member."""

_ZERO_UUID: Final = bytes(16)
_NULL16: Final = b"\xff\xff"
_NULL32: Final = b"\xff\xff\xff\xff"


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


def datetime_from_ms(ms_value: int) -> datetime.datetime:
    """The UTC ``datetime`` *ms_value* milliseconds after the epoch, as kio's readers make it (float seconds)."""
    return datetime.datetime.fromtimestamp(ms_value / 1000, tz=datetime.UTC)


def _ndt(ms_value: int) -> datetime.datetime | None:
    return None if ms_value == -1 else datetime_from_ms(ms_value)


def _td(ms_value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms_value)


def _tag_overrun(tag: int, pos: int, end: int) -> MalformedFrame:
    return MalformedFrame(f"tagged field {tag} ends at {pos}, its size says {end}")


def ms(value: int | datetime.timedelta) -> int:
    """Milliseconds of an ``int`` or ``timedelta`` (rounded like kio's writer)."""
    if value.__class__ is int:
        return value
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


def write_bytes(buf: bytearray, out: list[Any], value: Any, flexible: bool) -> bytearray:
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


RUNTIME: Final[dict[str, Any]] = {
    "_str16": _str16, "_cstr": _cstr, "_bytes32": _bytes32, "_cbytes": _cbytes,
    "_len32": _len32, "_clen": _clen, "_uvar": read_uvarint, "_uuid": _uuid,
    "_dt": datetime_from_ms, "_ndt": _ndt, "_td": _td, "_EC": ERROR_CODES, "_tag_overrun": _tag_overrun,
    "_Malformed": MalformedFrame, "_ms": ms, "_dtms": _dtms, "_ub": _uuid_bytes,
    "_ws16": _ws16, "_wcs": _wcs, "_wns16": _wns16, "_wncs": _wncs, "_wbytes": write_bytes, "_wuvar": write_uvarint,
    "_wtags": _wtags, "_tag_bytes": _tag_bytes, "_P16": _PACK_I16, "_P32": _PACK_I32,
    "_NULL16": _NULL16, "_NULL32": _NULL32, "_struct": struct,
}

