"""The meters pipeline end to end through Spark's own Kafka source, when the connector jars are supplied.

Spark's Kafka connector is not on PyPI: set ``WALGATE_SPARK_KAFKA_JARS`` to a folder holding
spark-sql-kafka-0-10_2.13, spark-token-provider-kafka-0-10_2.13, kafka-clients and commons-pool2 jars (what
``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<version>`` downloads) and this runs the
batch backfill and the streaming job (availableNow, with a checkpoint, then again: nothing written twice)
against a live walgate. Without it the test is skipped and says so. The session is conftest.py's, whose JVM gets
the jars whichever pipeline test starts it.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from livewalgate import running_walgate
from pipeline import meters

pytestmark = pytest.mark.skipif(
    not os.environ.get("WALGATE_SPARK_KAFKA_JARS"),
    reason="Spark's Kafka connector is not installed: set WALGATE_SPARK_KAFKA_JARS to a folder with the "
           "spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, kafka-clients and commons-pool2 jars",
)


def test_batch_and_streaming_jobs_through_sparks_kafka_source(spark: SparkSession, tmp_path: Path) -> None:
    with running_walgate(tmp_path / "walgate") as server:
        for statement in (
            "CREATE DATABASE power VGROUPS 4",
            "CREATE STABLE power.meters (ts TIMESTAMP, current DOUBLE, voltage INT, phase FLOAT) "
            "TAGS (location VARCHAR(64), groupid INT)",
            "CREATE TOPIC topic_meters AS SELECT ts, current, voltage, phase, groupid, location FROM power.meters",
            "INSERT INTO power.d1 USING power.meters TAGS ('SF', 1) VALUES (1700000040000, 10.0, 220, 0.3) "
            "(1700000041000, 12.0, 225, 0.3) power.d2 USING power.meters TAGS ('LA', 2) VALUES (1700000042000, 7.0, 210, 0.3)",
        ):
            urllib.request.urlopen(urllib.request.Request(server.http_url + "/rest/sql", data=statement.encode()),
                                   timeout=30).read()
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        batch_out = tmp_path / "batch"
        meters.run_batch(spark, meters.parser().parse_args(
            ["--bootstrap", bootstrap, "--out", str(batch_out), "--batch", "--starting-offsets", "earliest",
             "--ending-offsets", "latest", "--watermark", "0 seconds"]))
        assert sum(pq.read_table(batch_out).column("rows").to_pylist()) == 3
        stream_out, checkpoint = tmp_path / "stream", tmp_path / "ckpt"
        args = ["--bootstrap", bootstrap, "--out", str(stream_out), "--checkpoint", str(checkpoint),
                "--available-now", "--watermark", "0 seconds", "--timeout", "120"]
        for _ in range(2):  # a restart from the checkpoint writes nothing twice
            meters.run_stream(spark, meters.parser().parse_args(args))
        # the files the sink committed (its _spark_metadata log), as Spark reads a streaming sink's output
        table = spark.read.parquet(str(stream_out)).select("window_start", "location", "rows").collect()
        assert sum(r.rows for r in table) <= 3
        assert len({(r.window_start, r.location) for r in table}) == len(table)
