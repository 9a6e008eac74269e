"""Checksummed JSON lines: the record format of the catalog, committed offsets and small state files.

One record is one line::

    <crc32c of the JSON, 8 lowercase hex digits> <space> <JSON object> <\\n>

e.g. ``cdba0873 {"op":"drop_topic","name":"t"}``. A line is complete only with its ``\\n``; :func:`scan` sorts a
file's bytes into

* the records that verify;
* the complete lines that do not (a flipped byte, a NUL, a line of another format: the caller reports them as
  damage, keeping their bytes, and goes on, so one bad line never hides the ones after it);
* bytes after the last ``\\n``: a *torn tail* (what a crash while appending can leave, which the caller drops
  silently) only when it is at most one partial record, i.e. a prefix of ``<8 hex digits> {<JSON without control
  bytes>``. A tail that is one whole record whose last byte took the place of its ``\\n`` (a flipped terminator)
  is a record, reported as a :class:`BadLine` with ``repaired`` set (the caller keeps it and rewrites the file);
  any other tail (zeros, garbage) is a bad line like the others: reported and kept, never silently dropped.

Empty lines are skipped: a writer that does not know whether a failed append left a torn tail starts its next
record with ``\\n``, so that record never joins the torn bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import crc32c
import orjson

__all__ = ["BadLine", "Scan", "encode", "decode", "decode_int", "scan"]

_CRC = re.compile(rb"[0-9a-f]{8} ")
# a prefix of a line without its terminator (orjson escapes every control byte)
_PARTIAL = re.compile(rb"[0-9a-f]{0,8}|[0-9a-f]{8} (\{[^\x00-\x1f]*)?")


def encode(record: Any) -> bytes:
    """One record as a complete line."""
    body = orjson.dumps(record)
    return b"%08x " % crc32c.crc32c(body) + body + b"\n"


def decode(line: bytes) -> Any:
    """The record of one line (without its ``\\n``); ValueError naming what is wrong when it does not verify."""
    if len(line) < 10 or not _CRC.match(line):  # strictly: int() would also take " 1abc" or "1ABC" for 0x1abc
        raise ValueError("not a checksummed record line")
    body = line[9:]
    if crc32c.crc32c(body) != int(line[:8], 16):
        raise ValueError("checksum mismatch")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:  # a checksum that verifies over bytes that are not JSON: not ours
        raise ValueError(f"not JSON: {exc}") from None


def decode_int(raw: bytes, key: str, minimum: int) -> int:
    """The integer ``key`` (at least ``minimum``) of a file holding one record (its ``\n`` optional), such as the
    data dir's format version or a partition's log start; ValueError saying what is wrong when it does not verify."""
    try:
        value = decode(raw.rstrip(b"\n"))[key]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"no {key}: {exc!r}") from None
    if type(value) is not int or value < minimum:
        raise ValueError(f"{key} {value!r}")
    return value


@dataclass(frozen=True)
class BadLine:
    """A complete line that does not verify, or a tail that is no torn record: its byte range ``[start, end)``
    (``\\n`` included) and why. ``repaired``: the range is a record (in :attr:`Scan.records`) whose terminating
    ``\\n`` was damaged."""

    start: int
    end: int
    reason: str
    repaired: bool = False


@dataclass
class Scan:
    """The verified records (each with its byte range), the bad lines, and where a torn tail starts (bytes past
    ``complete`` are a torn tail, dropped silently; ``complete == len(data)`` when there is none)."""

    records: list[tuple[int, int, Any]]
    bad: list[BadLine]
    complete: int


def scan(data: bytes) -> Scan:
    """Sort ``data`` into verified records, bad lines and a torn tail (see the module docstring)."""
    result = Scan([], [], data.rfind(b"\n") + 1)
    pos = 0
    while pos < result.complete:
        end = data.index(b"\n", pos) + 1
        line = data[pos : end - 1]
        if line:
            try:
                result.records.append((pos, end, decode(line)))
            except ValueError as exc:
                result.bad.append(BadLine(pos, end, str(exc)))
        pos = end
    tail = data[pos:]
    if not tail:
        return result
    try:  # a whole record whose last byte took the place of its newline
        result.records.append((pos, len(data), decode(tail[:-1])))
        result.bad.append(BadLine(pos, len(data), f"the record's terminating newline is damaged ({tail[-1:]!r}): "
                                  "the record is kept", repaired=True))
    except ValueError:
        if _PARTIAL.fullmatch(tail):
            return result  # a torn tail
        what = "zero bytes" if not any(tail) else "not the start of a record"
        result.bad.append(BadLine(pos, len(data), f"{len(tail)} bytes after the last newline are {what}"))
    result.complete = len(data)
    return result
