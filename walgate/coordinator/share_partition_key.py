"""KIP-932's share coordinator key, ``groupId:topicId:partition``: what FindCoordinator key type SHARE (2) names,
parsed and checked as Kafka's ``SharePartitionKey.validate`` / ``getInstance(String)`` do.

The key is split at every ``:`` (Java's ``String.split``: trailing empty parts dropped), and must have exactly three
parts: a group id that is not blank (kept trimmed), a topic id in Kafka's ``Uuid`` text form (URL-safe base64 of
its 16 bytes, 22 characters, padding optional) and a partition that Java's ``Integer.parseInt`` takes (an optional
sign and decimal digits within a signed 32-bit int). A group id holding ``:`` therefore has no share coordinator
key, as in Kafka.
"""

from __future__ import annotations

import base64
import re
import uuid
from typing import NamedTuple

__all__ = ["SharePartitionKey", "kafka_uuid", "parse_share_key"]

_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")
_INT = re.compile(r"[+-]?[0-9]+")


class SharePartitionKey(NamedTuple):
    """A share-partition: its group id, topic id and partition."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


def kafka_uuid(text: str) -> uuid.UUID | None:
    """The UUID of Kafka's text form ``text`` (``Uuid.toString``: URL-safe base64, no padding), None when it is not
    one."""
    if _UUID_TEXT.fullmatch(text) is None:
        return None
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text[:22] + "=="))


def parse_share_key(key: str) -> SharePartitionKey:
    """The share-partition ``key`` names; raises ValueError with Kafka's reason when it is not a valid key."""
    if not key:
        raise ValueError("Share partition key cannot be empty")
    parts = key.split(":")
    while parts and not parts[-1]:
        parts.pop()
    if len(parts) != 3:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}")
    group_id, topic_text, partition_text = parts
    if not group_id.strip():
        raise ValueError("GroupId must be alphanumeric string")
    topic_id = kafka_uuid(topic_text)
    if topic_id is None:
        raise ValueError(f"Invalid topic ID: {topic_text}")
    if _INT.fullmatch(partition_text) is None or not -(1 << 31) <= int(partition_text) < 1 << 31:
        raise ValueError(f"Invalid partition: {partition_text}")
    return SharePartitionKey(group_id.strip(), topic_id, int(partition_text))
