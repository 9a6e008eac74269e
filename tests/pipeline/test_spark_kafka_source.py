"""The meters pipeline end to end on a live walgate: the backfill, the stream across restarts, startingTimestamp.

Each test runs twice. ``spark-kafka``: through Spark's own Kafka source (``meters.kafka_source``), when
``WALGATE_SPARK_KAFKA_JARS`` names a folder holding spark-sql-kafka-0-10_2.13, spark-token-provider-kafka-0-10_2.13,
kafka-clients and commons-pool2 jars (what ``spark-submit --packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<version>`` downloads); skipped with that message otherwise. The
session is conftest.py's, whose JVM gets the jars whichever pipeline test starts it. ``stand-in``: always (CI has
no connector), through kafka_standin.py, a Spark Python data source reading walgate with a real Kafka client and
honouring the same options. Either way the job's own code (``meters.source_options``, ``write_batch``,
``write_stream``) and Spark's watermark, state, Parquet sink and checkpoint run unchanged.

Expected results are computed here in plain Python from the rows inserted: per location and minute, the average
current, maximum voltage and row count, and for the stream exactly the windows the watermark has closed.
"""

from __future__ import annotations

import itertools
import os
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

import kafka_standin
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession

from livecluster import running_cluster
from livewalgate import WalgateServer
from pipeline import meters

BASE = 1_700_000_040_000  # 2023-11-14 22:14:00 UTC: a minute boundary
MINUTE = 60_000
LOCATIONS = {"d1": "SF", "d2": "SF", "d3": "LA", "d4": "SD"}
JARS_MISSING = ("Spark's Kafka connector is not installed: set WALGATE_SPARK_KAFKA_JARS to a folder with the "
                "spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2 jars")

Row = tuple[str, int, float, int]  # (table, ts ms, current, voltage)
Load = Callable[[Mapping[str, str], bool], DataFrame]  # (source options, streaming) -> the source's records


@pytest.fixture(params=["spark-kafka", "stand-in"])
def load(request: pytest.FixtureRequest, spark: SparkSession) -> Load:
    """The records of the Kafka source the test runs on, from ``meters.source_options``."""
    if request.param == "spark-kafka":
        if not os.environ.get("WALGATE_SPARK_KAFKA_JARS"):
            pytest.skip(JARS_MISSING)
        return lambda options, streaming: meters.kafka_source(spark, options, streaming=streaming)
    # Spark's Python workers do not have tests/pipeline on their path: the stand-in travels by value
    cloudpickle.register_pickle_by_value(kafka_standin)
    spark.dataSource.register(kafka_standin.KafkaStandIn)
    return lambda options, streaming: ((spark.readStream if streaming else spark.read)
                                       .format(kafka_standin.NAME).options(**options).load())


@dataclass(frozen=True)
class Meters:
    """Where a test's meters live: the HTTP API its SQL goes to (a cluster node forwards each table's rows to the
    node of its vgroup), the Kafka bootstrap, and the names of its database and topic."""

    http_url: str
    bootstrap: str
    db: str = "power"
    topic: str = "topic_meters"


def on(server: WalgateServer) -> Meters:
    return Meters(server.http_url, f"127.0.0.1:{server.kafka_port}")


_CLUSTER_DATABASES = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Meters]:
    """A 3-node cluster (livecluster.py), bootstrapped and asked on node 1: each test makes its own database."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield Meters(c.nodes[0].http_url, c.endpoint(1), db="", topic="")


@pytest.fixture(params=["single", "cluster"])
def target(request: pytest.FixtureRequest) -> Meters:
    """A fresh ``walgate serve``, or a database ``power_<n>`` and topic ``meters_<n>`` of their own on the cluster,
    its 4 vgroups placed over the three nodes."""
    if request.param == "single":
        return on(request.getfixturevalue("walgate_server"))
    c = request.getfixturevalue("cluster")
    n = next(_CLUSTER_DATABASES)
    return Meters(c.http_url, c.bootstrap, f"power_{n}", f"meters_{n}")


def sql(m: Meters, statement: str) -> None:
    urllib.request.urlopen(urllib.request.Request(m.http_url + "/rest/sql", data=statement.encode()),
                           timeout=30).read()


def create_meters(m: Meters, vgroups: int) -> None:
    """Database ``m.db`` with ``vgroups`` vgroups, its supertable ``meters`` and the topic ``m.topic`` (one
    partition per vgroup); insert() makes the child tables."""
    sql(m, f"CREATE DATABASE {m.db} VGROUPS {vgroups}")
    sql(m, f"CREATE STABLE {m.db}.meters (ts TIMESTAMP, current DOUBLE, voltage INT, phase FLOAT) "
           "TAGS (location VARCHAR(64), groupid INT)")
    sql(m, f"CREATE TOPIC {m.topic} AS SELECT ts, current, voltage, phase, groupid, location FROM {m.db}.meters")


def insert(m: Meters, rows: list[Row], tables: Mapping[str, str] = LOCATIONS) -> None:
    """``rows`` in one INSERT, each child table made on its first row with its location (``tables``)."""
    sql(m, "INSERT INTO " + " ".join(f"{m.db}.{t} USING {m.db}.meters TAGS ('{tables[t]}', 1) "
                                     f"VALUES ({ts}, {c}, {v}, 0.3)" for t, ts, c, v in rows))


def meter_rows(start_ms: int, end_ms: int, tables: Mapping[str, str] = LOCATIONS) -> list[Row]:
    """Rows every 7 s per table in [start_ms, end_ms), table k shifted by k ms (no two rows share a time)."""
    out = []
    for k, table in enumerate(tables):
        for i, ts in enumerate(range(start_ms + k, end_ms, 7_000)):
            out.append((table, ts, round(10 + k + i * 0.25, 2), 200 + (i * 3 + k) % 30))
    return out


def windows(rows: list[Row], tables: Mapping[str, str] = LOCATIONS
            ) -> dict[tuple[int, str], tuple[float, int, int]]:
    """(window start ms, location) -> (average current, maximum voltage, rows) of 1-minute windows."""
    groups: dict[tuple[int, str], list[tuple[float, int]]] = defaultdict(list)
    for table, ts, current, voltage in rows:
        groups[(ts // MINUTE * MINUTE, tables[table])].append((current, voltage))
    return {k: (sum(c for c, _ in v) / len(v), max(x for _, x in v), len(v)) for k, v in groups.items()}


def closed(rows: list[Row], delay_ms: int) -> dict[tuple[int, str], tuple[float, int, int]]:
    """The windows an append-mode stream has written once it has seen ``rows``: those whose end the watermark
    (the latest event time less the delay) has reached."""
    watermark = max(ts for _, ts, _, _ in rows) - delay_ms
    return {k: v for k, v in windows(rows).items() if k[0] + MINUTE <= watermark}


def read_windows(spark: SparkSession, out: Path) -> list[tuple[tuple[int, str], tuple[float, int, int]]]:
    """Every (window, location) row of a Parquet output, as Spark reads it (a stream's: its committed files)."""
    return [((int(r.window_start.replace(tzinfo=UTC).timestamp() * 1000), r.location),
             (r.avg_current, r.max_voltage, r.rows))
            for r in spark.read.parquet(str(out)).collect()]


def assert_windows(got: list[tuple[tuple[int, str], tuple[float, int, int]]],
                   want: dict[tuple[int, str], tuple[float, int, int]]) -> None:
    keys = [k for k, _ in got]
    assert len(keys) == len(set(keys)), f"windows written twice: {sorted(keys)}"
    assert sorted(keys) == sorted(want)
    for key, (avg, vmax, n) in got:
        assert avg == pytest.approx(want[key][0]) and (vmax, n) == want[key][1:], key


def args(m: Meters, *extra: str) -> list[str]:
    return ["--bootstrap", m.bootstrap, "--topic", m.topic, *extra]


def test_backfill_writes_every_window(spark: SparkSession, load: Load, walgate_server: WalgateServer,
                                      tmp_path: Path) -> None:
    m = on(walgate_server)
    create_meters(m, 4)
    rows = meter_rows(BASE, BASE + 3 * MINUTE)
    insert(m, rows)
    job = meters.parser().parse_args(args(m, "--out", str(tmp_path / "out"), "--batch",
                                          "--starting-offsets", "earliest", "--ending-offsets", "latest"))
    meters.write_batch(load(meters.source_options(job, streaming=False), False), job)
    assert_windows(read_windows(spark, tmp_path / "out"), windows(rows))
    # a batch job's files appear when it commits: outside Spark too, pyarrow reads each window once
    table = pq.read_table(tmp_path / "out")
    assert sorted(table.column("rows").to_pylist()) == sorted(n for _, _, n in windows(rows).values())


def test_stream_writes_each_closed_window_once_across_restarts(spark: SparkSession, load: Load, target: Meters,
                                                               tmp_path: Path) -> None:
    """Three availableNow runs on one checkpoint, rows added before the first two. After each run the output is
    exactly the windows the watermark (30 s behind the latest row) has closed, each once with the aggregates of
    all its rows: a window open at a restart (its rows in the first run, its closing in the second) comes out of
    the checkpoint's state; a run with nothing new writes nothing. On a single node and on a 3-node cluster, where
    the topic's partitions are on all three nodes."""
    create_meters(target, 4)
    out = tmp_path / "out"
    job = meters.parser().parse_args(args(target, "--out", str(out), "--checkpoint", str(tmp_path / "ckpt"),
                                          "--available-now", "--watermark", "30 seconds", "--timeout", "300"))

    def run() -> list[tuple[tuple[int, str], tuple[float, int, int]]]:
        meters.write_stream(load(meters.source_options(job, streaming=True), True), job)
        return read_windows(spark, out) if (out / "_spark_metadata").exists() else []

    first = meter_rows(BASE, BASE + 3 * MINUTE)  # latest row 2:55: minutes 0 and 1 close, 2 stays open
    insert(target, first)
    assert_windows(run(), closed(first, 30_000))
    second = meter_rows(BASE + 3 * MINUTE, BASE + 5 * MINUTE)  # latest 4:55: minutes 2 and 3 close, 4 stays open
    insert(target, second)
    want = closed(first + second, 30_000)
    assert {start for start, _ in want} == {BASE + m * MINUTE for m in range(4)}
    assert_windows(run(), want)
    assert_windows(run(), want)


def empty_partition(m: Meters) -> int:
    """The partition (vgroup) of ``m.topic`` that has no record (its latest offset 0)."""
    c = Consumer({"bootstrap.servers": m.bootstrap, "group.id": "empty-partition"})
    try:
        empty = [p for p in range(2)
                 if c.get_watermark_offsets(TopicPartition(m.topic, p), timeout=30)[1] == 0]
    finally:
        c.close()
    assert len(empty) == 1
    return empty[0]


@pytest.mark.parametrize("strategy", ["error", "latest"])
def test_starting_timestamp_with_an_empty_vgroup(spark: SparkSession, load: Load, walgate_server: WalgateServer,
                                                 tmp_path: Path, strategy: str) -> None:
    """Two vgroups, one table: one vgroup has no record at or after any timestamp. Spark's default
    startingOffsetsByTimestampStrategy (error) fails the backfill naming it; latest reads the other vgroup from the
    timestamp on."""
    tables = {"d1": "SF"}
    m = on(walgate_server)
    create_meters(m, 2)
    rows = meter_rows(BASE, BASE + 3 * MINUTE, tables)
    insert(m, rows, tables)
    since = BASE + MINUTE + 30_000
    job = meters.parser().parse_args(args(m, "--out", str(tmp_path / "out"), "--batch",
                                          "--starting-timestamp", str(since),
                                          "--starting-timestamp-strategy", strategy))
    options = meters.source_options(job, streaming=False)
    if strategy == "error":
        message = (f"No offset matched from request of topic-partition topic_meters-{empty_partition(m)} "
                   f"and timestamp {since}")
        with pytest.raises(Exception, match=message):
            meters.write_batch(load(options, False), job)
    else:
        meters.write_batch(load(options, False), job)
        assert_windows(read_windows(spark, tmp_path / "out"),
                       windows([r for r in rows if r[1] >= since], tables))
