"""Errors raised by the wire layer, and Kafka's error-code enum.

Everything :mod:`walgate.wire` raises for bad *input bytes* is a
:class:`WireError`; callers never see a raw ``KeyError``, ``IndexError`` or
``struct.error`` from a decoder. Programming errors (a handler building a
response with a wrong type) still surface as ``TypeError`` / ``ValueError``.

    WireError
    ├── MalformedFrame       frame or message body that does not parse
    │   └── FrameTooLarge    size prefix above the reader's maximum
    ├── UnsupportedVersion   (api_key, api_version) this module has no schema for
    ├── CorruptRecord        record batch whose CRC does not match (CORRUPT_MESSAGE)
    ├── InvalidRecord        record batch that parses badly or breaks a limit (INVALID_RECORD)
    └── RecordTooLarge       produced batch above the topic's max.message.bytes (MESSAGE_TOO_LARGE)

:class:`ErrorCode` is kio's enum of Kafka error codes (``ErrorCode.corrupt_message``
is 2, ``ErrorCode.unsupported_version`` is 35, ...), re-exported so the rest of
walgate imports Kafka error codes from one place. :data:`ERROR_CODES` is this domain's table (exception class ->
Kafka error code), merged with the other domains' at the gateway's edge (``gateway/kafka/handlers/common.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from kio.schema.errors import ErrorCode

__all__ = [
    "ERROR_CODES",
    "CorruptRecord",
    "ErrorCode",
    "FrameTooLarge",
    "InvalidRecord",
    "MalformedFrame",
    "RecordTooLarge",
    "UnsupportedVersion",
    "WireError",
]


class WireError(Exception):
    """Base of every error caused by bytes received from a peer."""


class MalformedFrame(WireError):
    """A frame, request header or request body that does not parse."""


class FrameTooLarge(MalformedFrame):
    """A frame whose size prefix exceeds the reader's ``max_frame_bytes``."""

    def __init__(self, size: int, max_frame_bytes: int | None = None) -> None:
        limit = "" if max_frame_bytes is None else f" (max {max_frame_bytes})"
        super().__init__(f"frame of {size} bytes is too large{limit}")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class UnsupportedVersion(WireError):
    """No request/response schema for this (api_key, api_version) here."""

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"unsupported api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version


class CorruptRecord(WireError):
    """A record batch or legacy message whose CRC does not match (Kafka: CORRUPT_MESSAGE)."""

    error_code = ErrorCode.corrupt_message


class InvalidRecord(WireError):
    """A record batch that does not parse, uses an unknown codec or breaks a size limit (INVALID_RECORD)."""

    error_code = ErrorCode.invalid_record


class RecordTooLarge(WireError):
    """A produced record batch above the topic's ``max.message.bytes`` (Kafka: MESSAGE_TOO_LARGE)."""

    error_code = ErrorCode.message_too_large


ERROR_CODES: Final[Mapping[type[BaseException], ErrorCode]] = {
    CorruptRecord: CorruptRecord.error_code,
    RecordTooLarge: RecordTooLarge.error_code,
    InvalidRecord: InvalidRecord.error_code,
    UnsupportedVersion: ErrorCode.unsupported_version,
    WireError: ErrorCode.invalid_request,  # bytes that do not parse (MalformedFrame, FrameTooLarge)
}
"""The wire domain's errors as Kafka answers them (most specific first along an exception's MRO)."""
