"""Helpers shared by handlers: storage-error mapping, the leader epoch decision, durations.

Leader epoch: walgate has one leader per partition forever, so every
partition's leader epoch is 0. Metadata reports it, OffsetForLeaderEpoch
answers it (end offset of epoch 0 = the high watermark), and a request naming
an epoch above 0 gets UNKNOWN_LEADER_EPOCH, as a Kafka leader would answer
an epoch it has not reached.
"""

from __future__ import annotations

from typing import Any

from walgate.storage.errors import NotFound, StorageError
from walgate.wire.errors import ErrorCode

LEADER_EPOCH = 0


def error_of(exc: Exception) -> int:
    """The Kafka error code for a storage exception (the one mapping of this layer)."""
    if isinstance(exc, NotFound):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, StorageError):
        return ErrorCode.invalid_request
    return ErrorCode.unknown_server_error


def epoch_error(requested: int) -> int:
    """Error for a request's current leader epoch (-1 = not given)."""
    return ErrorCode.unknown_leader_epoch if requested > LEADER_EPOCH else ErrorCode.none


def millis(value: Any) -> int:
    """A request's duration field in ms (kio decodes them as ``timedelta``)."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)
