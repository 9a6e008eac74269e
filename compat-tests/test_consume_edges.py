"""walgate only, confluent-kafka (librdkafka): Fetch edge cases a real consumer hits.

* an unknown topic is reported as UNKNOWN_TOPIC_OR_PART, not a hang;
* an offset past the high watermark is OFFSET_OUT_OF_RANGE (redpanda#4181), so
  ``auto.offset.reset=error`` surfaces ``_AUTO_OFFSET_RESET``;
* tiny ``fetch.max.bytes`` / ``max.partition.fetch.bytes`` still deliver every
  record: the first batch is returned whole even when larger (KIP-74);
* a fetch at an offset inside a batch returns that batch and the client skips
  to its offset (Tansu FINDINGS): reading from the middle yields exactly the rest.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

DB, TOPIC = "edges", "edges_topic"
ROWS = 300


@pytest.fixture(scope="module")
def loaded(walgate):
    walgate.sql(f"CREATE DATABASE {DB} VGROUPS 1")
    walgate.sql(f"CREATE STABLE {DB}.m (ts TIMESTAMP, seq INT) TAGS (site VARCHAR(8))")
    walgate.sql(f"CREATE TOPIC {TOPIC} AS SELECT ts, seq FROM {DB}.m")
    base = 1_700_000_000_000
    for start in range(0, ROWS, 100):  # three WAL entries: three record batches of 100
        values = " ".join(f"({base + i}, {i})" for i in range(start, start + 100))
        walgate.sql(f"INSERT INTO {DB}.s1 USING {DB}.m TAGS ('a') VALUES {values}")
    return walgate


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "edges", "enable.auto.commit": False, **extra})


def _drain(c: Consumer, want: int, seconds: float = 20) -> tuple[list[int], list[KafkaError]]:
    offsets: list[int] = []
    errors: list[KafkaError] = []
    deadline = time.monotonic() + seconds
    while len(offsets) < want and not errors and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            errors.append(m.error())
        else:
            offsets.append(m.offset())
    return offsets, errors


def test_unknown_topic_is_an_error_not_a_hang(loaded):
    c = _consumer(loaded.bootstrap)
    meta = c.list_topics("no_such_topic", timeout=10)
    assert meta.topics["no_such_topic"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as info:  # librdkafka answers from the metadata it just got
        c.get_watermark_offsets(TopicPartition("no_such_topic", 0), timeout=10)
    c.close()
    assert info.value.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION)


def test_offset_past_the_end_is_out_of_range(loaded):
    c = _consumer(loaded.bootstrap, **{"auto.offset.reset": "error"})
    c.assign([TopicPartition(TOPIC, 0, ROWS + 10)])
    _, errors = _drain(c, 1)
    c.close()
    assert errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET, errors


def test_tiny_fetch_limits_still_deliver_whole_batches(loaded):
    c = _consumer(loaded.bootstrap, **{"fetch.max.bytes": 1024, "max.partition.fetch.bytes": 512,
                                       "message.max.bytes": 1024, "receive.message.max.bytes": 1 << 20})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    offsets, errors = _drain(c, ROWS)
    c.close()
    assert not errors and offsets == list(range(ROWS))


def test_fetch_from_inside_a_batch_starts_at_the_offset(loaded):
    c = _consumer(loaded.bootstrap)
    c.assign([TopicPartition(TOPIC, 0, 150)])  # the middle of the second batch
    offsets, errors = _drain(c, ROWS - 150)
    c.close()
    assert not errors and offsets == list(range(150, ROWS))
