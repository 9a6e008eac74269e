"""Replicated partitions (issue 25): what ``acks=all`` costs on a 3-node cluster (``replication.enable=true``, one
etcd member, :func:`bench.cluster.cluster`).

Two one-partition Kafka-native topics at the default configs, one of replication factor 3 and one of factor 1 (each
led by the node placement chose); a confluent-kafka producer with ``acks=all`` bootstrapped on every
node sends one 100-byte record at a time and waits for its acknowledgement, to each topic in turns (ABAB..., so a
load change on the machine touches both alike). Rows: the p50 and p99 round trip of factor 3 against factor 1, whose
acknowledgement waits for no other node: the price of the followers' fetch and of the in-sync replicas' fsyncs (the
high watermark counts durable positions only, so a replicated vnode commits in groups: walgate/storage/vnode.py).

``python -m bench --only replicated`` (``--quick``: 100 round trips a topic instead of 1,000).
"""

from __future__ import annotations

import statistics

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cluster import cluster, delivered, interleaved, quantile
from bench.report import Row

ENABLED = ("--override", "replication.enable=true")


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The rows of the module docstring (``repeat`` is not used: one interleaved run of many round trips)."""
    samples = 100 if quick else 1000
    with cluster(3, *ENABLED) as running:
        bootstrap = running.plan.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [NewTopic("rf3", 1, 3), NewTopic("rf1", 1, 1)]
        for future in admin.create_topics(topics, request_timeout=120).values():
            future.result(timeout=180)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        for topic in ("rf3", "rf1"):  # connected, the leaders known and their ISR full before the samples
            for _ in range(20):
                delivered(producer, topic, 0, b"warm")
        three, one = interleaved(samples, lambda: delivered(producer, "rf3", 0, b"x" * 100),
                                 lambda: delivered(producer, "rf1", 0, b"x" * 100))
    ms = 1e3
    return [
        Row("replicated: acks=all produce p50, replication factor 3", statistics.median(three) * ms, "ms",
            "replication factor 1", statistics.median(one) * ms),
        Row("replicated: acks=all produce p99, replication factor 3", quantile(three, 0.99) * ms, "ms",
            "replication factor 1", quantile(one, 0.99) * ms),
    ]
