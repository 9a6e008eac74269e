"""A stand-in for Spark's Kafka source where its connector jar is absent (CI): a Spark Python data source.

Spark's Kafka source (``format("kafka")``, the spark-sql-kafka-0-10 jar) is not on PyPI, so without
``WALGATE_SPARK_KAFKA_JARS`` this source gives Spark the same rows (key, value, topic, partition, offset,
timestamp, timestampType) read from a live walgate with a real Kafka client (confluent-kafka), for batch and
streaming queries, from the options pipeline/meters.py's ``source_options`` makes. Everything after the source
runs unchanged in Spark: parsing, the watermark and windows, the Parquet sink, the checkpoint and its offsets log.

Its offsets follow Spark's KafkaOffsetReaderAdmin: ``startingOffsets`` earliest | latest, ``startingTimestamp``
(ListOffsets by timestamp per partition; a partition with no record at or after it, such as an empty vgroup,
fails with Spark's IllegalArgumentException message under ``startingOffsetsByTimestampStrategy=error``, its
default, and starts at the partition's end under ``latest``), ``endingOffsets`` latest (batch). Any other option
is refused, so the stand-in cannot quietly ignore something the job asks of Spark's source.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime

# confluent_kafka by module only: this module travels to Spark's Python workers by value (cloudpickle), and its
# classes name themselves cimpl.Consumer, cimpl.TopicPartition, which a worker would look up as a module "cimpl"
import confluent_kafka
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

NAME = "walgate_kafka_standin"
SCHEMA = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
          "timestampType INT")
"""Spark's Kafka source schema (without headers, which meters.py does not ask for)."""
OPTIONS = {"kafka.bootstrap.servers", "subscribe", "startingoffsets", "endingoffsets", "startingtimestamp",
           "startingoffsetsbytimestampstrategy"}
READ_TIMEOUT_S = 60.0


def consumer(bootstrap: str) -> confluent_kafka.Consumer:
    """A consumer of its own group that commits nothing and fails on an offset out of range."""
    return confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{NAME}-{uuid.uuid4()}",
                                     "enable.auto.commit": False, "auto.offset.reset": "error"})


class Partition(InputPartition):
    """One Kafka partition's offsets [start, end) of one read."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class Source:
    """The options of one query and the offset look-ups Spark's driver makes with them (KafkaOffsetReaderAdmin)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        given = {key.lower(): value for key, value in options.items()}
        unknown = set(given) - OPTIONS
        if unknown:
            raise ValueError(f"{NAME}: options it does not implement: {sorted(unknown)}")
        self.bootstrap = given["kafka.bootstrap.servers"]
        self.topic = given["subscribe"]
        self.options = given

    def ends(self) -> dict[int, tuple[int, int]]:
        """Partition -> (earliest, latest) offsets."""
        c = consumer(self.bootstrap)
        try:
            partitions = sorted(c.list_topics(self.topic, timeout=30).topics[self.topic].partitions)
            return {p: c.get_watermark_offsets(confluent_kafka.TopicPartition(self.topic, p), timeout=30)
                    for p in partitions}
        finally:
            c.close()

    def starting(self, default: str) -> dict[int, int]:
        """The starting offset of every partition: startingTimestamp, else startingOffsets (or ``default``)."""
        ends = self.ends()
        if "startingtimestamp" not in self.options:
            which = self.options.get("startingoffsets", default).lower()
            if which not in ("earliest", "latest"):
                raise ValueError(f"{NAME}: startingOffsets={which} (only earliest or latest)")
            return {p: low if which == "earliest" else high for p, (low, high) in ends.items()}
        timestamp = int(self.options["startingtimestamp"])
        strategy = self.options.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise ValueError(f"{NAME}: startingOffsetsByTimestampStrategy={strategy} (error or latest)")
        c = consumer(self.bootstrap)
        try:
            found = c.offsets_for_times([confluent_kafka.TopicPartition(self.topic, p, timestamp) for p in ends],
                                        timeout=30)
        finally:
            c.close()
        out = {}
        for tp in found:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            elif strategy == "latest":
                out[tp.partition] = ends[tp.partition][1]
            else:  # Spark's KafkaOffsetReaderAdmin.readTimestampOffsets, its message
                raise ValueError(f"No offset matched from request of topic-partition {self.topic}-{tp.partition} "
                                 f"and timestamp {timestamp}.")
        return out

    def latest(self) -> dict[int, int]:
        return {p: high for p, (_, high) in self.ends().items()}

    def partitions(self, start: Mapping[int, int], end: Mapping[int, int]) -> list[Partition]:
        return [Partition(self.topic, p, start[p], end[p]) for p in sorted(end) if end[p] > start.get(p, 0)]


def read(partition: Partition, bootstrap: str) -> Iterator[tuple]:
    """The records of ``partition``'s [start, end), each once and in offset order, as Spark's Kafka source rows."""
    c = consumer(bootstrap)
    try:
        c.assign([confluent_kafka.TopicPartition(partition.topic, partition.partition, partition.start)])
        expect, deadline = partition.start, time.monotonic() + READ_TIMEOUT_S
        while expect < partition.end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{NAME}: offset {expect} of {partition.topic}-{partition.partition} "
                                   f"not read in {READ_TIMEOUT_S} s")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                raise RuntimeError(f"{NAME}: {m.error()}")
            if m.offset() != expect:  # walgate's topics are dense: a hole or a repeat is a failure here
                raise RuntimeError(f"{NAME}: asked offset {expect}, got {m.offset()}")
            kind, ms = m.timestamp()
            yield (m.key(), m.value(), m.topic(), m.partition(), m.offset(),
                   datetime.fromtimestamp(ms / 1000, UTC), kind - 1)  # librdkafka's CreateTime 1 is Spark's 0
            expect += 1
    finally:
        c.close()


def _offsets(offsets: Mapping[str, int]) -> dict[int, int]:
    return {int(p): o for p, o in offsets.items()}


class BatchReader(DataSourceReader):
    def __init__(self, source: Source) -> None:
        self.bootstrap = source.bootstrap
        ending = source.options.get("endingoffsets", "latest").lower()
        if ending != "latest":
            raise ValueError(f"{NAME}: endingOffsets={ending} (only latest)")
        self.planned = source.partitions(source.starting("earliest"), source.latest())

    def partitions(self) -> Sequence[InputPartition]:
        return self.planned

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, Partition)
        return read(partition, self.bootstrap)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {partition: next offset}, as Spark's KafkaSourceOffset (its checkpoint's offsets log). Under
    Trigger.AvailableNow the stream ends at the latest offsets of its start, as KafkaMicroBatchStream's does; its
    last micro-batch is then one without data, which writes the windows the watermark has just passed."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.available_now: dict[int, int] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = self.source.latest()

    def initialOffset(self) -> dict:
        return {str(p): o for p, o in self.source.starting("latest").items()}

    def latestOffset(self, start: dict, limit: object) -> dict:
        latest = self.source.latest() if self.available_now is None else self.available_now
        return {str(p): o for p, o in latest.items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.source.partitions(_offsets(start), _offsets(end))

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, Partition)
        return read(partition, self.source.bootstrap)


class KafkaStandIn(DataSource):
    """``spark.read`` / ``spark.readStream`` ``.format(NAME)`` after ``spark.dataSource.register(KafkaStandIn)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType | str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(Source(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(Source(self.options))
