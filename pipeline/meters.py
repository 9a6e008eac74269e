"""The meters pipeline: TDengine `meters` rows from walgate, through Spark's own Kafka source, to Parquet.

Structured Streaming reads a walgate topic with ``format("kafka")`` exactly as
it would read Kafka (default ``failOnDataLoss=true``), parses each record's
JSON value with the documented schema, and computes per location and
event-time window (``--window``, 1 minute by default) the average current,
the maximum voltage and the row count, with a watermark (``--watermark``) so
a window is final, and written once, when the watermark passes it. Results go
to Parquet with a checkpoint, so a restarted job resumes exactly where it
committed and writes nothing twice: read them with ``spark.read.parquet(out)``,
which takes only the files of committed micro-batches (the sink's
``_spark_metadata`` log; pyarrow would also take those of an interrupted one).

``--batch`` runs the same transformation over a bounded range instead
(``startingOffsets`` / ``endingOffsets``, or ``startingTimestamp``): a
backfill. ``--starting-timestamp`` starts each partition (vgroup) at its first
record at or after the timestamp; a partition without one (an empty vgroup,
or one whose rows are all older) fails the query under Spark's default
``startingOffsetsByTimestampStrategy=error``, and is read from its end with
``--starting-timestamp-strategy latest``.

Kafka client settings go to the source as Spark's ``kafka.``-prefixed options:
``--kafka-option security.protocol=SASL_SSL`` (repeatable), and ``--sasl-user``
with ``--sasl-password-file`` (a Docker secret) make the ``sasl.jaas.config`` of
the ``sasl.mechanism`` given (SCRAM-SHA-512 unless set), so the password never
appears on a command line.

Usage (Spark's Kafka connector from Maven, on a machine that can reach it)::

    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> \\
        pipeline/meters.py --bootstrap 127.0.0.1:9092 --topic topic_meters --out out/ --checkpoint ckpt/
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

VALUE_SCHEMA = "ts STRING, current DOUBLE, voltage INT, phase DOUBLE, groupid INT, location STRING"
"""The JSON value of a `meters` row (README: the value format); extra columns are ignored, missing ones null."""

LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def client_options(args: argparse.Namespace) -> dict[str, str]:
    """The Kafka client settings of ``--kafka-option`` and ``--sasl-user`` / ``--sasl-password-file`` (module
    docstring), without the ``kafka.`` prefix; raises OSError (the password file) or ValueError (a
    ``sasl.mechanism`` without a login module here)."""
    options = dict(option.split("=", 1) for option in args.kafka_option)
    if args.sasl_user is not None:
        password = args.sasl_password_file.read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
        mechanism = options.setdefault("sasl.mechanism", "SCRAM-SHA-512")
        if mechanism not in LOGIN_MODULES:
            raise ValueError(f"--sasl-user: no login module for sasl.mechanism={mechanism} (one of "
                             f"{', '.join(LOGIN_MODULES)}); set sasl.jaas.config with --kafka-option instead")
        # a JAAS quoted string (Java's StreamTokenizer): \\ and \" escaped, as json.dumps does for them
        options["sasl.jaas.config"] = (f"{LOGIN_MODULES[mechanism]} required "
                                       f"username={json.dumps(args.sasl_user, ensure_ascii=False)} "
                                       f"password={json.dumps(password, ensure_ascii=False)};")
    return options


def source_options(args: argparse.Namespace, *, streaming: bool) -> dict[str, str]:
    """The options of Spark's Kafka source for ``args`` (as for any Kafka broker; the client settings of
    ``client_options`` as ``kafka.<setting>``): ``startingTimestamp`` wins over ``startingOffsets`` and goes with
    ``startingOffsetsByTimestampStrategy``; a stream starts at the earliest offsets unless told otherwise, and
    ``endingOffsets`` is a batch's only."""
    options = {"kafka.bootstrap.servers": args.bootstrap, "subscribe": args.topic}
    options.update({f"kafka.{key}": value for key, value in client_options(args).items()})
    if args.starting_timestamp is not None:
        options["startingTimestamp"] = str(args.starting_timestamp)
        options["startingOffsetsByTimestampStrategy"] = args.starting_timestamp_strategy or "error"
    elif args.starting_offsets is not None or streaming:
        options["startingOffsets"] = args.starting_offsets or "earliest"
    if args.ending_offsets is not None and not streaming:
        options["endingOffsets"] = args.ending_offsets
    return options


def kafka_source(spark: SparkSession, options: Mapping[str, str], *, streaming: bool) -> DataFrame:
    """Spark's own Kafka source with ``options`` (``source_options``)."""
    return (spark.readStream if streaming else spark.read).format("kafka").options(**options).load()


def parse(records: DataFrame) -> DataFrame:
    """Rows of the Kafka source's records: the JSON value's columns, ``event_time`` and the record's coordinates."""
    return (
        records.select(
            F.col("key").cast("string").alias("table"),
            F.from_json(F.col("value").cast("string"), VALUE_SCHEMA).alias("row"),
            "partition", "offset",
        )
        .select("table", "row.*", "partition", "offset")
        .withColumn("event_time", F.to_timestamp("ts"))
    )


def aggregate(rows: DataFrame, window: str = "1 minute", watermark: str = "10 minutes") -> DataFrame:
    """Per location and event-time window: average current, maximum voltage, row count."""
    return (
        rows.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("w"), "location")
        .agg(F.avg("current").alias("avg_current"), F.max("voltage").alias("max_voltage"),
             F.count(F.lit(1)).alias("rows"))
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "location",
                "avg_current", "max_voltage", "rows")
    )


def write_batch(records: DataFrame, args: argparse.Namespace) -> None:
    """The backfill: the aggregates of the records of a batch Kafka source, appended to ``args.out``."""
    aggregate(parse(records), args.window, args.watermark).write.mode("append").parquet(args.out)


def write_stream(records: DataFrame, args: argparse.Namespace) -> None:
    """The stream: each window's aggregates, once the watermark passes it, appended to ``args.out`` with the
    checkpoint ``args.checkpoint``; returns when the query ends (``--available-now``) or after ``args.timeout``."""
    query = (
        aggregate(parse(records), args.window, args.watermark)
        .writeStream.format("parquet").outputMode("append")
        .option("path", args.out).option("checkpointLocation", args.checkpoint)
    )
    query = query.trigger(availableNow=True) if args.available_now else query.trigger(processingTime=args.trigger)
    query.start().awaitTermination(args.timeout)


def run_batch(spark: SparkSession, args: argparse.Namespace) -> None:
    write_batch(kafka_source(spark, source_options(args, streaming=False), streaming=False), args)


def run_stream(spark: SparkSession, args: argparse.Namespace) -> None:
    write_stream(kafka_source(spark, source_options(args, streaming=True), streaming=True), args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pipeline/meters.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--topic", default="topic_meters")
    p.add_argument("--out", required=True, help="Parquet output directory")
    p.add_argument("--checkpoint", help="streaming checkpoint directory (required unless --batch)")
    p.add_argument("--window", default="1 minute")
    p.add_argument("--watermark", default="10 minutes")
    p.add_argument("--batch", action="store_true", help="a bounded backfill instead of a stream")
    p.add_argument("--starting-offsets", help='Spark\'s startingOffsets: earliest, latest or JSON')
    p.add_argument("--ending-offsets", help="Spark's endingOffsets (batch): latest or JSON")
    p.add_argument("--starting-timestamp", type=int, help="Spark's startingTimestamp (ms)")
    p.add_argument("--starting-timestamp-strategy", choices=("error", "latest"),
                   help="Spark's startingOffsetsByTimestampStrategy: a partition (vgroup) with no record at or "
                        "after --starting-timestamp, e.g. an empty one, fails the query (error, Spark's default) "
                        "or is read from its end (latest)")
    p.add_argument("--trigger", default="10 seconds", help="streaming micro-batch interval")
    p.add_argument("--available-now", action="store_true", help="stream what is there now, then stop")
    p.add_argument("--timeout", type=float, help="stop streaming after this many seconds")
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE", type=_key_value,
                   help="a Kafka client setting (Spark's kafka.KEY option), e.g. security.protocol=SASL_SSL")
    p.add_argument("--sasl-user", help="SASL user (sasl.jaas.config; needs --sasl-password-file)")
    p.add_argument("--sasl-password-file", type=Path, help="file holding --sasl-user's password")
    return p


def _key_value(text: str) -> str:
    key, sep, _ = text.partition("=")
    if not sep or not key.strip():  # an empty value is a setting too (ssl.endpoint.identification.algorithm=)
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.batch and not args.checkpoint:
        parser().error("--checkpoint is required for streaming")
    if args.starting_timestamp_strategy is not None and args.starting_timestamp is None:
        parser().error("--starting-timestamp-strategy goes with --starting-timestamp")
    if (args.sasl_user is None) != (args.sasl_password_file is None):
        parser().error("--sasl-user and --sasl-password-file go together")
    try:
        client_options(args)  # the password file is readable and the mechanism known, before Spark starts
    except (OSError, ValueError) as e:
        parser().error(str(e))
    spark = SparkSession.builder.appName("walgate-meters").getOrCreate()
    try:
        (run_batch if args.batch else run_stream)(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
