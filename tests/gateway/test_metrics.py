"""``GET /metrics`` after real traffic: an in-process gateway, confluent-kafka producing, consuming and committing
in a group, a TDengine topic read twice (batch cache), then one scrape parsed with prometheus_client's own parser.

Every asserted value is known from what the clients did: records in per topic, high watermarks, committed offsets
and lag (high watermark minus committed) per partition, the group's members and state, request counts by API and
error code, latency histograms of Produce and Fetch, open connections, storage-thread calls, fsyncs, cache hits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from walgate.gateway import metrics
from walgate.gateway.config import Config
from walgate.gateway.server import Gateway
from walgate.storage import fileio
from walgate.storage.fileio import LatencyRecorder, SyncLatency
from walgate.storage.partitions import LocalPartitions
from walgate.wire import encode_batch

TOPIC = "metered"
PRODUCED = {0: 10, 1: 5}  # records produced per partition
COMMITTED = {0: 4, 1: 5}  # offsets the group commits


def sql(http: str, statement: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{http}/rest/sql", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def scrape(http: str) -> tuple[str, list[Sample]]:
    with urllib.request.urlopen(f"{http}/metrics", timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return text, [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The one sample called ``name`` whose labels include ``labels``."""
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{len(found)} samples {name}{labels}"
    return found[0]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def read(consumer: Consumer, want: int) -> int:
    got, deadline = 0, time.monotonic() + 60
    while got < want and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    return got


def traffic(bootstrap: str, http: str) -> list[Sample]:
    """Real clients' traffic, then one scrape taken while the producer and the group's consumer are connected."""
    sql(http, "CREATE DATABASE mdb VGROUPS 1")
    sql(http, "CREATE STABLE mdb.meters (ts TIMESTAMP, v INT) TAGS (loc VARCHAR(16))")
    sql(http, "INSERT INTO mdb.d1 USING mdb.meters TAGS ('a') VALUES (1700000000000, 1) (1700000001000, 2)")
    sql(http, "CREATE TOPIC rows_t AS STABLE mdb.meters")
    for _ in range(2):  # the first builds the supertable's tag table, the second finds it kept
        assert sql(http, "SELECT COUNT(*) FROM mdb.meters")["data"] == [[2]]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
    missing = admin.list_topics(topic="no.such.topic", timeout=30).topics["no.such.topic"]
    assert missing.error is not None  # a Metadata answer with UNKNOWN_TOPIC_OR_PARTITION

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for partition, n in PRODUCED.items():
        for i in range(n):
            producer.produce(TOPIC, value=b"value-%d" % i, partition=partition)
    assert producer.flush(30) == 0

    for reader in ("cache-a", "cache-b"):  # the first renders the rows' batch, the second finds it cached
        rows = Consumer({"bootstrap.servers": bootstrap, "group.id": reader, "enable.auto.commit": False})
        rows.assign([TopicPartition("rows_t", 0, OFFSET_BEGINNING)])
        assert read(rows, 2) == 2
        rows.close()

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g1", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    assert read(consumer, sum(PRODUCED.values())) == sum(PRODUCED.values())
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    try:
        return scrape(http)[1]
    finally:
        consumer.close()


async def test_metrics_after_real_traffic(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, group_initial_rebalance_delay_ms=0)
    async with Gateway(config) as gateway:
        host, port = gateway.http_address
        s = await asyncio.to_thread(traffic, f"127.0.0.1:{gateway.kafka_address[1]}", f"http://{host}:{port}")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]

    # per topic (Kafka's BrokerTopicMetrics)
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == sum(PRODUCED.values())
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) > sum(PRODUCED.values()) * 7
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) > 0
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="rows_t") > 0

    # per partition, and the group's offsets and lag (kafka_exporter)
    for p, n in PRODUCED.items():
        labels = {"topic": TOPIC, "partition": str(p)}
        assert value(s, "kafka_topic_partition_current_offset", **labels) == n
        assert value(s, "kafka_topic_partition_oldest_offset", **labels) == 0
        assert value(s, "kafka_log_log_size", **labels) > 0
        assert value(s, "kafka_log_log_numlogsegments", **labels) >= 1
        group = {"consumergroup": "g1", **labels}
        assert value(s, "kafka_consumergroup_current_offset", **group) == COMMITTED[p]
        assert value(s, "kafka_consumergroup_lag", **group) == n - COMMITTED[p]
    assert value(s, "kafka_topic_partitions", topic=TOPIC) == 2
    assert value(s, "kafka_consumergroup_lag_sum", consumergroup="g1", topic=TOPIC) == 6
    assert value(s, "kafka_consumergroup_members", consumergroup="g1") == 1
    assert value(s, "kafka_consumergroup_state", consumergroup="g1", state="Stable") == 1
    assert value(s, "kafka_consumergroup_rebalances_total", consumergroup="g1") >= 1

    # requests by API, version and error (Kafka's RequestMetrics)
    assert value(s, "kafka_network_requestmetrics_requests_total", request="OffsetCommit") == 1
    assert total(s, "kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert total(s, "kafka_network_requestmetrics_requests_total", request="Fetch") >= 2
    assert total(s, "kafka_network_requestmetrics_requests_total", request="ApiVersions") >= 3
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= 2
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Metadata",
                 error="UNKNOWN_TOPIC_OR_PARTITION") >= 1
    for api in ("Produce", "Fetch"):
        for part in ("requestqueuetimems", "localtimems", "responsesendtimems", "totaltimems"):
            name = f"kafka_network_requestmetrics_{part}"
            count = value(s, f"{name}_count", request=api)
            assert count > 0
            assert value(s, f"{name}_bucket", request=api, le="+Inf") == count
    assert value(s, "kafka_network_requestmetrics_totaltimems_sum", request="Produce") > 0

    # connections: the admin client, the producer and the group's consumer were connected at the scrape
    assert value(s, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 3
    assert value(s, "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") >= 3

    # storage thread, fsync, batch cache, tag table cache
    assert value(s, "walgate_storage_call_seconds_count") > 0
    assert value(s, "walgate_storage_call_queue_seconds_count") == value(s, "walgate_storage_call_seconds_count")
    assert value(s, "walgate_storage_queue_depth") >= 0
    assert total(s, "kafka_log_logflushstats_logflushrateandtimems_count") > 0  # commits and acks=all fsync
    assert value(s, "walgate_batch_cache_misses_total") >= 1
    assert value(s, "walgate_batch_cache_hits_total") >= 1
    assert value(s, "walgate_tag_cache_misses_total") == 1
    assert value(s, "walgate_tag_cache_hits_total") == 1
    assert value(s, "walgate_tag_cache_size_bytes") > 0


async def test_a_scrape_renders_one_family_per_name(tmp_path: Path) -> None:
    """An idle node renders every family once, with its HELP and TYPE (valid exposition, no duplicate names)."""
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        host, port = gateway.http_address
        text, samples = await asyncio.to_thread(scrape, f"http://{host}:{port}")
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(names) == len(set(names))
    assert "kafka_consumergroup_lag" in names and "kafka_topic_partition_current_offset" in names
    assert value(samples, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") == 0
    assert value(samples, "kafka_coordinator_group_groupmetadatamanager_numgroups") == 0


def test_every_fsync_is_timed_into_its_bucket(tmp_path: Path) -> None:
    recorder = LatencyRecorder((1.0, 10.0))
    for ms in (0.5, 1.0, 5.0, 50.0):
        recorder.observe(ms)
    assert recorder.snapshot() == ([2, 1, 1], 56.5)  # <= 1 ms, <= 10 ms, above
    syncs = SyncLatency()
    with open(tmp_path / "synced", "wb") as f:
        f.write(b"x")
        fileio.fsync(f.fileno(), syncs=syncs)
    assert sum(syncs.calls["fsync"].snapshot()[0]) == 1 and sum(syncs.calls["fdatasync"].snapshot()[0]) == 0


async def test_a_scrape_of_many_partitions_lets_a_produce_run_between_its_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape reads partitions a page at a time (issue 23): an append submitted to the storage thread while the
    scrape's first page runs is served before the scrape's later pages (on main it waited for the whole scrape, one
    call), and the scrape shows it in the partition a later page reads. Ordering on the storage thread, no timing."""
    topics = 20
    monkeypatch.setattr(metrics, "SCRAPE_PAGE", 4, raising=False)  # 5 pages of 4 partitions
    events: list[str] = []
    real = LocalPartitions.stats

    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        engine, storage, loop = gateway._engine, gateway._storage, asyncio.get_running_loop()  # (the node's own)
        assert engine is not None
        await storage.call(lambda: [engine.create_kafka_topic(f"m{i:02}", 1, {}) for i in range(topics)])

        def produce() -> int:
            events.append("produce")
            return engine.append_batches(f"m{topics - 1}", 0, [encode_batch(0, [1_000], [None], [b"v"])])

        def paged(self: LocalPartitions, *args: Any) -> Any:
            events.append("page")
            if events == ["page"]:  # the scrape's first page: a Produce's append arrives now
                asyncio.run_coroutine_threadsafe(storage.call(produce), loop)
            return real(self, *args)

        monkeypatch.setattr(LocalPartitions, "stats", paged)
        host, port = gateway.http_address
        _, samples = await asyncio.to_thread(scrape, f"http://{host}:{port}")
    assert events == ["page", "produce"] + ["page"] * (topics // 4 - 1)
    assert total(samples, "kafka_topic_partitions") == topics
    assert value(samples, "kafka_topic_partition_current_offset", topic=f"m{topics - 1}") == 1  # read after it
