"""KIP-932's share coordinator key (``groupId:topicId:partition``, FindCoordinator key type 2) parsed as Kafka's
``SharePartitionKey.validate`` parses it; fuzzed: any text is a key or a ValueError, never another exception."""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.storage.fuzzing import fuzz_settings
from walgate.coordinator.share_partition_key import SharePartitionKey, kafka_uuid, parse_share_key

TOPIC = uuid.UUID("8f2ba0b5-4f3c-4d1e-9a47-5b1a2c3d4e5f")


def kafka_text(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def test_a_key_names_its_group_topic_id_and_partition() -> None:
    text = kafka_text(TOPIC)
    assert parse_share_key(f"g:{text}:3") == SharePartitionKey("g", TOPIC, 3)
    assert parse_share_key(f" g :{text}:-1") == SharePartitionKey("g", TOPIC, -1), "trimmed group id; Java's parseInt"
    assert parse_share_key(f"g:{text}:+7:") == SharePartitionKey("g", TOPIC, 7), "Java's split drops trailing ''"
    assert parse_share_key(f"g:{text}==:0").topic_id == TOPIC, "base64 padding is optional"


@pytest.mark.parametrize(("key", "reason"), [
    ("", "Share partition key cannot be empty"),
    ("g", "Invalid key format: expected - groupId:topicId:partition, found - g"),
    ("a:b:{t}:0", "Invalid key format"),
    ("g:{t}::", "Invalid key format"),
    ("  :{t}:0", "GroupId must be alphanumeric string"),
    ("g:{t}x:0", "Invalid topic ID"),
    ("g:{t}=:0", "Invalid topic ID"),
    ("g:8f2ba0b5-4f3c-4d1e-9a47-5b1a2c3d4e5f:0", "Invalid topic ID"),
    ("g:{t}: 1", "Invalid partition:  1"),
    ("g:{t}:2147483648", "Invalid partition: 2147483648"),
    ("g:{t}:1_0", "Invalid partition: 1_0"),
    ("g:{t}:١", "Invalid partition"),
])
def test_keys_kafka_refuses_are_refused_with_its_reason(key: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{reason}"):
        parse_share_key(key.format(t=kafka_text(TOPIC)))


def test_the_topic_id_is_kafkas_text_form() -> None:
    assert kafka_uuid(kafka_text(TOPIC)) == TOPIC
    assert kafka_uuid(kafka_text(uuid.UUID(int=0))) == uuid.UUID(int=0)
    assert kafka_uuid(str(TOPIC)) is None
    assert kafka_uuid(kafka_text(TOPIC)[:21]) is None


@fuzz_settings(300)
@given(st.uuids(), st.text(min_size=1).filter(lambda g: ":" not in g and g.strip() != ""),
       st.integers(-(1 << 31), (1 << 31) - 1))
def test_every_valid_key_round_trips(topic: uuid.UUID, group: str, partition: int) -> None:
    assert parse_share_key(f"{group}:{kafka_text(topic)}:{partition}") == SharePartitionKey(
        group.strip(), topic, partition)


@fuzz_settings(500)
@given(st.one_of(st.text(), st.text(alphabet="ab:-_=+0123456789 ").map(lambda t: t.replace("ab", kafka_text(TOPIC)))))
def test_any_text_is_a_key_or_a_value_error(key: str) -> None:
    try:
        parsed = parse_share_key(key)
    except ValueError:
        return
    assert parsed.group_id and -(1 << 31) <= parsed.partition < 1 << 31
