"""Bounded decoders for the consumer protocol embedded in JoinGroup / SyncGroup bytes.

Members of a group with protocol type ``"consumer"`` put a
``ConsumerProtocolSubscription`` in each JoinGroup protocol's metadata and the
leader hands out ``ConsumerProtocolAssignment`` bytes in SyncGroup (Kafka's
``clients/src/main/resources/common/message/ConsumerProtocol*.json``; kio has
the dataclasses as ``kio.schema.consumer_protocol_subscription`` /
``consumer_protocol_assignment``). The broker treats both as opaque except in
these places, and only those read them here:

* OffsetDelete refuses partitions of topics the group is subscribed to
  (``GROUP_SUBSCRIBED_TO_TOPIC``): :func:`subscribed_topics`;
* classic members of a consumer-protocol group (KIP-848) are assigned by the
  server from their subscription and owned partitions: :func:`subscription`;
* a classic group upgraded to a consumer-protocol group keeps its members'
  subscriptions and assignments: :func:`subscription`, :func:`assigned_partitions`;
* ``SHOW CONSUMERS`` lists each member's partitions: :func:`assigned_partitions`.

The server's assignment reaches classic members of consumer-protocol groups
(SyncGroup), and consumer-protocol groups are shown to DescribeGroups, in these
formats too: :func:`encode_subscription`, :func:`encode_assignment` write
version 0, which every consumer reads.

Layout (non-flexible, big-endian), an int16 version then the fields of the
version-0 schema, which every later version extends by appending fields::

    subscription: int16 version, [string topic], nullable bytes user_data, (v1+ fields...)
    assignment:   int16 version, [string topic, [int32 partition]], nullable bytes user_data, (...)

    string = int16 length + UTF-8, array = int32 count + items, bytes = int32 length (-1 = null)

Like Kafka's ``ClassicGroup.computeSubscribedTopics`` only the version-0 prefix
is read (so future versions parse too) and trailing bytes are ignored. The
bytes come from clients, so every length is checked against the bytes left
before anything is allocated (kio's native reader pre-allocates from the
length prefix, see ``walgate.wire.serial.codegen``); anything that does not parse
raises :class:`~walgate.coordinator.errors.ConsumerProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from walgate.coordinator.errors import ConsumerProtocolError

__all__ = [
    "PROTOCOL_TYPE",
    "assigned_partitions",
    "encode_assignment",
    "encode_subscription",
    "subscribed_topics",
    "subscription",
]

PROTOCOL_TYPE: Final = "consumer"
"""The JoinGroup protocol type of Kafka consumers (``ConsumerProtocol.PROTOCOL_TYPE``)."""

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.data):
            raise ConsumerProtocolError(
                f"truncated {what} at byte {start} ({n} bytes needed, {len(self.data) - start} left)"
            )
        self.pos = start + n
        return start

    def int16(self, what: str) -> int:
        return int(_I16.unpack_from(self.data, self._take(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_I32.unpack_from(self.data, self._take(4, what))[0])

    def string(self, what: str) -> str:
        length = self.int16(what)
        if length < 0:
            raise ConsumerProtocolError(f"null {what} at byte {self.pos - 2}")
        start = self._take(length, what)
        return self.data[start : start + length].decode("utf-8", "replace")

    def array_count(self, what: str, min_item_size: int) -> int:
        count = self.int32(what)
        if count < 0:
            raise ConsumerProtocolError(f"null {what} array at byte {self.pos - 4}")
        if count * min_item_size > len(self.data) - self.pos:
            raise ConsumerProtocolError(
                f"{what} array of {count} items does not fit in {len(self.data) - self.pos} bytes"
            )
        return count

    def nullable_bytes(self, what: str) -> None:
        length = self.int32(what)
        if length >= 0:
            self._take(length, what)


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topics of a ConsumerProtocolSubscription (JoinGroup protocol metadata)."""
    return frozenset(subscription(metadata)[0])


def subscription(metadata: bytes) -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """(topics, owned partitions) of a ConsumerProtocolSubscription.

    Owned partitions exist from version 1 (cooperative clients list what they
    keep across a rebalance); version 0 gives none (eager clients revoke
    everything before they join).
    """
    reader = _Reader(metadata)
    version = reader.int16("version")
    topics = tuple(reader.string("topic") for _ in range(reader.array_count("topics", 2)))
    reader.nullable_bytes("user_data")
    owned: dict[str, tuple[int, ...]] = {}
    if version >= 1 and reader.pos < len(metadata):
        for _ in range(reader.array_count("owned_partitions", 6)):
            topic = reader.string("topic")
            partitions = tuple(reader.int32("partition") for _ in range(reader.array_count("partitions", 4)))
            owned[topic] = owned.get(topic, ()) + partitions
    return topics, owned


def assigned_partitions(assignment: bytes) -> dict[str, tuple[int, ...]]:
    """Topic -> partitions of a ConsumerProtocolAssignment (SyncGroup assignment).

    Empty bytes (a member without an assignment yet) give an empty dict.
    """
    if not assignment:
        return {}
    reader = _Reader(assignment)
    reader.int16("version")
    result: dict[str, tuple[int, ...]] = {}
    for _ in range(reader.array_count("assigned_partitions", 6)):
        topic = reader.string("topic")
        partitions = tuple(reader.int32("partition") for _ in range(reader.array_count("partitions", 4)))
        result[topic] = result.get(topic, ()) + partitions
    reader.nullable_bytes("user_data")
    return result


def _string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


_NULL_BYTES: Final = _I32.pack(-1)


def encode_subscription(topics: Sequence[str]) -> bytes:
    """ConsumerProtocolSubscription v0 bytes: the topics, no user data."""
    return _I16.pack(0) + _I32.pack(len(topics)) + b"".join(map(_string, topics)) + _NULL_BYTES


def encode_assignment(assignment: Mapping[str, Iterable[int]]) -> bytes:
    """ConsumerProtocolAssignment v0 bytes: topic -> partitions (in the given order), no user data."""
    parts = [_I16.pack(0), _I32.pack(len(assignment))]
    for topic, partitions in assignment.items():
        ps = list(partitions)
        parts += [_string(topic), _I32.pack(len(ps)), b"".join(_I32.pack(p) for p in ps)]
    return b"".join(parts) + _NULL_BYTES
