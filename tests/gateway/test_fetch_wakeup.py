"""A long-poll Fetch is woken by the write it waits for, not by its timeout (README: "a Fetch waits up to
``max_wait_ms`` and is woken the moment a requested partition gets a row").

A Fetch with ``max_wait_ms`` = 10 s and ``min_bytes`` = 1 waits on an empty partition; half a second later a row
arrives (an SQL INSERT into the source table of a TDengine topic; a record produced to a Kafka-native topic). The
Fetch must answer with that row, and within 5 s of being sent: a server that only answered at the deadline, or
that polled for new data every 5 s or more, fails. (If the Fetch is not yet waiting when the row arrives, on a
very slow machine, it answers at once with the row: the test still passes, it cannot fail spuriously.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gateway_helpers import (
    KafkaConnection,
    build,
    error_codes,
    gateway_thread,
    kio_classes,
    sql,
)
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kio.schema.errors import ErrorCode

from walgate.gateway.kafka.handlers import advertised
from walgate.gateway.server import Gateway

MAX_WAIT_MS = 10_000
ANSWERED_WITHIN = 5.0  # seconds from sending the Fetch: half its max wait
PARKED = 0.5  # seconds between sending the Fetch and writing the row


def newest(api_key: int, values: dict[str, Any]) -> Any:
    """A kio request of the newest version walgate advertises for ``api_key``."""
    return build(kio_classes(api_key, advertised()[api_key][1])[0], values)


def answer(conn: KafkaConnection, request: Any) -> Any:
    response = conn.request(request)
    assert set(error_codes(response)) == {ErrorCode.none}, response
    return response


def topic_id(conn: KafkaConnection, topic: str) -> Any:
    [described] = answer(conn, newest(3, {"topics": [{"name": topic}]})).topics
    assert len(described.partitions) == 1
    return described.topic_id


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with gateway_thread(tmp_path_factory.mktemp("wakeup") / "data") as gateway:
        for statement in ("CREATE DATABASE power VGROUPS 1",
                          "CREATE STABLE power.meters (ts TIMESTAMP, current DOUBLE, voltage INT) TAGS (location VARCHAR(64))",
                          "CREATE TABLE power.d1001 USING power.meters TAGS ('SF')",
                          "CREATE TOPIC meters_topic AS SELECT ts, current, voltage, location FROM power.meters"):
            sql(gateway, statement)
        with KafkaConnection(gateway.kafka_address) as conn:
            answer(conn, newest(19, {"topics": [{"name": "native", "num_partitions": 1, "replication_factor": 1}],
                                     "timeout": 10_000}))
        yield gateway


def insert_row(node: Gateway) -> bytes:
    sql(node, "INSERT INTO power.d1001 VALUES (now, 10.5, 219)")
    return b"d1001"


def produce_record(node: Gateway) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=b"produced", value=b"payload")
    builder.close()
    with KafkaConnection(node.kafka_address) as conn:
        answer(conn, newest(0, {"acks": 1, "timeout": 10_000, "topic_data": [
            {"name": "native", "partition_data": [{"index": 0, "records": bytes(builder.buffer())}]}]}))
    return b"produced"


@pytest.mark.parametrize(("topic", "write"), [("meters_topic", insert_row), ("native", produce_record)],
                         ids=["sql-insert-into-a-tdengine-topic", "produce-to-a-kafka-native-topic"])
def test_a_waiting_fetch_is_answered_by_the_row_that_arrives(node: Gateway, topic: str,
                                                            write: Callable[[Gateway], bytes]) -> None:
    with KafkaConnection(node.kafka_address) as conn:
        fetch = newest(1, {"max_wait": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": 1 << 20, "replica_id": -1,
                           "topics": [{"topic": topic, "topic_id": topic_id(conn, topic), "partitions": [
                               {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}]})
        sent = time.monotonic()
        correlation_id = conn.send(fetch)
        time.sleep(PARKED)  # the Fetch is waiting on the empty partition by now
        key = write(node)
        response = conn.receive(kio_classes(1, fetch.__version__)[1], correlation_id)
        answered = time.monotonic() - sent
    [partition] = response.responses[0].partitions
    assert partition.error_code == ErrorCode.none and partition.high_watermark == 1
    batches = MemoryRecords(partition.records)
    [record] = [r for batch in iter(batches.next_batch, None) for r in batch]
    assert record.key == key
    if topic == "meters_topic":
        assert json.loads(record.value)["voltage"] == 219
    assert answered < ANSWERED_WITHIN, f"the Fetch waited {answered:.1f} s for a row written after {PARKED} s"
