"""The meters pipeline's transformation on records read from a live walgate (no Kafka connector needed).

Records are read with a real Kafka client (confluent-kafka) from a walgate topic and handed to Spark in the
shape of Spark's Kafka source (key, value, topic, partition, offset, timestamp, timestampType); the windowed
aggregates must match what the inserted rows add up to, and the Parquet output must read back with pyarrow.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from livewalgate import running_walgate
from pipeline.meters import aggregate, parse

KAFKA_SOURCE_SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
])
BASE = 1_700_000_040_000  # 2023-11-14 22:14:00 UTC: a minute boundary
LOCATIONS = {"d1": "SF", "d2": "SF", "d3": "LA", "d4": "SD"}


def rows() -> list[tuple[str, int, float, int]]:
    """(table, ts ms, current, voltage): 3 minutes of rows every 7 s per table."""
    out = []
    for k, table in enumerate(LOCATIONS):
        for i in range(26):
            out.append((table, BASE + i * 7_000 + k, round(10 + k + i * 0.25, 2), 200 + (i * 3 + k) % 30))
    return out


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple]]:
    with running_walgate(tmp_path_factory.mktemp("pipeline")) as server:
        def sql(statement: str) -> None:
            urllib.request.urlopen(urllib.request.Request(server.http_url + "/rest/sql", data=statement.encode()),
                                   timeout=30).read()

        sql("CREATE DATABASE power VGROUPS 4")
        sql("CREATE STABLE power.meters (ts TIMESTAMP, current DOUBLE, voltage INT, phase FLOAT) "
            "TAGS (location VARCHAR(64), groupid INT)")
        sql("CREATE TOPIC topic_meters AS SELECT ts, current, voltage, phase, groupid, location FROM power.meters")
        for table, location in LOCATIONS.items():
            sql(f"CREATE TABLE power.{table} USING power.meters TAGS ('{location}', 1)")
        sql("INSERT INTO " + " ".join(f"power.{t} VALUES ({ts}, {c}, {v}, 0.3)" for t, ts, c, v in rows()))
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "group.id": "pipeline-test"})
        got: list[tuple] = []
        try:
            c.assign([TopicPartition("topic_meters", p, 0) for p in range(4)])
            deadline = time.monotonic() + 30
            while len(got) < len(rows()) and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    kind, ts = m.timestamp()
                    got.append((m.key(), m.value(), m.topic(), m.partition(), m.offset(),
                                datetime.fromtimestamp(ts / 1000, UTC), kind - 1))
        finally:
            c.close()
        assert len(got) == len(rows())
        yield got


def expected() -> dict[tuple[int, str], tuple[float, int, int]]:
    groups: dict[tuple[int, str], list[tuple[float, int]]] = defaultdict(list)
    for table, ts, current, voltage in rows():
        groups[(ts // 60_000 * 60_000, LOCATIONS[table])].append((current, voltage))
    return {k: (sum(c for c, _ in v) / len(v), max(x for _, x in v), len(v)) for k, v in groups.items()}


def test_windowed_aggregates_of_records_read_from_walgate(spark: SparkSession, records: list[tuple]):
    df = spark.createDataFrame(records, KAFKA_SOURCE_SCHEMA)
    parsed = parse(df)
    assert parsed.count() == len(rows()) and parsed.filter("event_time IS NULL").count() == 0
    got = {
        (int(r.window_start.replace(tzinfo=UTC).timestamp() * 1000), r.location):
            (r.avg_current, r.max_voltage, r.rows)
        for r in aggregate(parsed, "1 minute").collect()
    }
    want = expected()
    assert got.keys() == want.keys()
    for key, (avg, vmax, n) in want.items():
        assert got[key][0] == pytest.approx(avg) and got[key][1:] == (vmax, n), key


def test_parquet_output_reads_back_with_pyarrow(spark: SparkSession, records: list[tuple], tmp_path: Path):
    out = tmp_path / "out"
    aggregate(parse(spark.createDataFrame(records, KAFKA_SOURCE_SCHEMA))).write.parquet(str(out))
    table = pq.read_table(out)
    assert set(table.column_names) >= {"window_start", "window_end", "location", "avg_current", "max_voltage", "rows"}
    assert sum(table.column("rows").to_pylist()) == len(rows())
    assert json.loads(records[0][1])["location"] in set(table.column("location").to_pylist())
