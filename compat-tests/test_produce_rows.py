"""walgate only: Kafka producers writing rows into TDengine topics (issue 5).

A producer sends JSON rows (key = subtable) or InfluxDB line protocol to a topic over a supertable; the rows
land in the supertable (subtables auto-created from the JSON's tags or the line's tags) and are served to that
topic's consumers and to an `AS SELECT ... WHERE` topic like any row. A batch that does not fit the schema is
refused with INVALID_RECORD and nothing of it is written.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

DB = "prow"


@pytest.fixture(scope="module")
def rows_db(walgate):
    walgate.sql(f"CREATE DATABASE {DB} VGROUPS 4")
    walgate.sql(f"CREATE STABLE {DB}.meters (ts TIMESTAMP, current DOUBLE, voltage BIGINT, phase DOUBLE) "
                "TAGS (location VARCHAR(64), groupid VARCHAR(8))")
    walgate.sql(f"CREATE TOPIC prow_in AS STABLE {DB}.meters")
    walgate.sql(f"CREATE TOPIC prow_high AS SELECT ts, current, voltage, location FROM {DB}.meters WHERE voltage > 220")
    return walgate


def produce(bootstrap: str, topic: str, records: list[dict]) -> list[KafkaError | None]:
    """Each record in its own batch (linger 0, one flush each): answers per batch, in order."""
    reports: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for r in records:
        p.produce(topic, on_delivery=lambda err, msg: reports.append(err), **r)
        p.flush(15)
    return reports


def read(bootstrap: str, topic: str, want: int) -> list[dict]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest"})
    got: list[dict] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append({"key": m.key().decode(), **json.loads(m.value())})
        time.sleep(1.0)
        while (m := c.poll(0.3)) is not None:  # anything beyond `want` is a failure
            if m.error() is None:
                got.append({"key": m.key().decode(), **json.loads(m.value())})
    finally:
        c.close()
    return got


def test_json_rows_and_line_protocol_become_rows_of_the_supertable(rows_db):
    bs = rows_db.bootstrap
    base = 1_700_000_000_000
    json_rows = [
        {"key": f"d{i % 3}".encode(), "timestamp": base + i,
         "value": json.dumps({"current": 10.5 + i, "voltage": 215 + i, "phase": 0.3, "location": "SF",
                              "groupid": "2"}).encode()}
        for i in range(10)
    ]
    lines = [
        {"value": f"meters,location=LA,groupid=3 current={20.0 + i},voltage={218 + i}i,phase=0.5 {base + 1000 + i}"
         .encode(), "headers": [("precision", b"ms")]}
        for i in range(10)
    ]
    assert produce(bs, "prow_in", json_rows + lines) == [None] * 20
    got = read(bs, "prow_in", 20)
    sf = sorted((r["key"], r["voltage"]) for r in got if r["location"] == "SF")
    assert sf == sorted((f"d{i % 3}", 215 + i) for i in range(10)), got
    la = [r for r in got if r["location"] == "LA"]  # one subtable named by the schemaless rules
    assert sorted(r["voltage"] for r in la) == [218 + i for i in range(10)] and len({r["key"] for r in la}) == 1, got
    high = read(bs, "prow_high", 14)
    assert sorted(r["voltage"] for r in high) == sorted(v for v in [215 + i for i in range(10)] +
                                                        [218 + i for i in range(10)] if v > 220), high


def test_a_batch_that_does_not_fit_is_refused_whole(rows_db):
    bs = rows_db.bootstrap
    before = rows_db.sql(f"SELECT * FROM {DB}.meters")["rows"]
    bad = [
        {"key": b"d9", "value": json.dumps({"voltage": "high"}).encode()},  # not a number
        {"key": b"d9", "value": json.dumps({"humidity": 3}).encode()},  # no such column
        {"value": b"meters,location=X current=1"},  # no key, not JSON: line protocol with a missing tag is fine...
        {"value": b"other,location=X current=1"},  # ...but another measurement is not this topic's
        {"value": b"{not json"},
    ]
    reports = produce(bs, "prow_in", bad)
    assert [None if e is None else e.code() for e in reports] == [
        KafkaError.INVALID_RECORD, KafkaError.INVALID_RECORD, None, KafkaError.INVALID_RECORD,
        KafkaError.INVALID_RECORD,
    ], reports
    assert rows_db.sql(f"SELECT * FROM {DB}.meters")["rows"] == before + 1


def test_produce_to_a_topic_partition_that_does_not_exist(rows_db):
    c = Consumer({"bootstrap.servers": rows_db.bootstrap, "group.id": "x"})
    try:
        assert len(c.list_topics("prow_in", timeout=10).topics["prow_in"].partitions) == 4
        assert c.get_watermark_offsets(TopicPartition("prow_in", 3), timeout=10)[0] == 0
    finally:
        c.close()
