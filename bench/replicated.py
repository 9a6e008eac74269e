"""Replicated partitions (issue 25): what ``acks=all`` costs on a 3-node cluster (``replication.enable=true``, one
etcd member, :func:`bench.cluster.cluster`), against replication factor 1 on the same cluster.

* **Round trips**: two one-partition Kafka-native topics at the default configs, one of replication factor 3 and one
  of factor 1 (each led by the node placement chose); a confluent-kafka producer with ``acks=all`` bootstrapped on
  every node sends one 100-byte record at a time and waits for its acknowledgement, to each topic in turns (ABAB...,
  so a load change on the machine touches both alike). Rows: the p50 and p99 round trip of factor 3 against factor 1,
  whose acknowledgement waits for no other node: the price of the followers' fetch and of the in-sync replicas'
  fsyncs (the high watermark counts durable positions only, so a replicated vnode commits in groups:
  walgate/storage/vnode.py).
* **Throughput** (issue 25's "RF=3 acks=all throughput >= 50 % of RF=1 acks=all at the same WAL level"): each sample
  creates a topic of :data:`PARTITIONS` partitions (placement spreads their leaders over the nodes) with
  ``flush.messages=1``, so that both factors run at the same WAL level: WAL_LEVEL 2, WAL_FSYNC_PERIOD 0, every append
  fsynced with those beside it before it counts (what a replicated vnode does whatever its configs), and factor 3
  with ``min.insync.replicas=2``; one C producer (bench/cproduce.c: acks=all, idempotent, linger.ms=5, batch.size=1
  MiB, at most :data:`QUEUE` records queued or in flight) sends ``count`` :data:`VALUE`-byte values round-robin over
  the partitions; then the topic is deleted. Samples alternate factor 3 and factor 1 (ABAB..., ``repeat`` of each).
  Rows: records/s and MB/s (value bytes) of factor 3 against factor 1 (medians; the records/s row carries the
  issue's >= 50 % target) and, in the median sample, the p99 of the records' latencies from the produce call to the
  acknowledgement (the client's queue included: with the queue full it is about :data:`QUEUE` / the rate), the
  CPU-milliseconds per MB written of the three nodes together (utime + stime from /proc/<pid>/stat over the
  producer's run) and of the producer itself (its whole run): on a machine whose cores the nodes and the producer
  share, what bounds the ratio (librdkafka's broker threads busy-poll while acks=all answers are awaited:
  bench/RESULTS.md, 2026-12-01).
* **At librdkafka's defaults**: one more sample of each factor from the same C producer without idempotence
  (librdkafka's default: acks=all, a request sent per ``linger.ms`` and leader however many are unanswered, so its
  batches shrink while answers take a replication round) to :data:`DEFAULTS_PARTITIONS` partitions. A node handling
  a connection's Produce requests one at a time took over 300 s for the 200,000 records at factor 3 (batches of a
  few records, one replication round each); walgate appends a connection's next ones while the first waits
  (walgate/gateway/kafka/answer_order.py).

``python -m bench --only replicated`` (``--quick``: 100 round trips a topic instead of 1,000, 20,000 records a
throughput sample instead of 200,000, one sample of each factor). Without a C compiler or librdkafka's header
(bench/cclient.py) the throughput rows are left out with a message.
"""

from __future__ import annotations

import statistics

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import cclient
from bench.cluster import cluster, delete, delivered, interleaved, quantile
from bench.report import Row, Target, median_run
from bench.servers import cpu_seconds
from walgate.gateway.cluster_up import LocalCluster

ENABLED = ("--override", "replication.enable=true")
PARTITIONS = 3
VALUE = 1024
QUEUE = 10_000
SAME_WAL = {"flush.messages": "1"}
"""A Kafka-native topic's WAL at level 2, fsync period 0 (walgate/storage/topic_configs.py), as a replicated vnode's."""


DEFAULTS_PARTITIONS = 9
"""The partitions of the samples at librdkafka's defaults (:func:`defaults_throughput`): three a node."""


def _create(bootstrap: str, topic: str, factor: int, partitions: int = PARTITIONS) -> None:
    configs = {**SAME_WAL, **({"min.insync.replicas": "2"} if factor > 1 else {})}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, factor, config=configs)],
                        request_timeout=120)[topic].result(timeout=180)


def throughput(running: LocalCluster, repeat: int, count: int) -> dict[int, list[cclient.Produced]]:
    """``repeat`` throughput samples of each replication factor, 3 and 1 in turns (the module docstring), each with
    the CPU-seconds of the three nodes together as its ``cpu``; each printed as it is taken; none without the C
    producer."""
    binary = cclient.build("cproduce")
    samples: dict[int, list[cclient.Produced]] = {3: [], 1: []}
    if binary is None:
        return samples
    bootstrap = running.plan.bootstrap
    for i in range(repeat):
        for factor in samples:
            topic = f"rf{factor}-throughput-{i}"
            _create(bootstrap, topic, factor)
            before = _nodes_cpu(running)
            run = cclient.produce(binary, bootstrap, topic, PARTITIONS, 1, count, VALUE, "all",
                                  running.pids()["node1"], QUEUE)
            run.cpu = _nodes_cpu(running) - before
            delete(bootstrap, topic)
            if run.count < count:
                raise RuntimeError(f"{topic}: {run.count} of {count} records acknowledged")
            samples[factor].append(run)
            print(f"bench: replicated throughput, factor {factor}, sample {i + 1}: {run.rate:,.0f} records/s, "
                  f"{run.rate * VALUE / 1e6:.1f} MB/s, latency p50 {run.p50 * 1e3:.1f} ms p99 {run.p99 * 1e3:.1f} ms, "
                  f"the nodes' CPU-s {run.cpu:.2f} over {run.seconds:.2f} s, the producer's {run.client_cpu:.2f}",
                  flush=True)
    return samples


def defaults_throughput(running: LocalCluster, count: int) -> dict[int, cclient.Produced]:
    """One sample of each replication factor, 3 then 1, as :func:`throughput`'s but from a producer at librdkafka's
    defaults (acks=all, no idempotence: a request in flight per ``linger.ms`` and leader, however many are
    unanswered) to :data:`DEFAULTS_PARTITIONS` partitions; none without the C producer."""
    binary = cclient.build("cproduce")
    samples: dict[int, cclient.Produced] = {}
    if binary is None:
        return samples
    bootstrap = running.plan.bootstrap
    for factor in (3, 1):
        topic = f"rf{factor}-defaults"
        _create(bootstrap, topic, factor, DEFAULTS_PARTITIONS)
        run = cclient.produce(binary, bootstrap, topic, DEFAULTS_PARTITIONS, 1, count, VALUE, "all",
                              running.pids()["node1"], QUEUE, idempotent=False)
        delete(bootstrap, topic)
        if run.count < count:
            raise RuntimeError(f"{topic}: {run.count} of {count} records acknowledged")
        samples[factor] = run
        print(f"bench: replicated throughput at librdkafka's defaults, factor {factor}: {run.rate:,.0f} records/s, "
              f"latency p99 {run.p99 * 1e3:.1f} ms", flush=True)
    return samples


def defaults_rows(samples: dict[int, cclient.Produced]) -> list[Row]:
    """Records/s of factor 3 against factor 1 at librdkafka's defaults (no target: what a default producer gets)."""
    if len(samples) < 2:
        return []
    return [Row(f"replicated: acks=all produce at librdkafka's defaults, no idempotence, {DEFAULTS_PARTITIONS} "
                "partitions, factor 3", samples[3].rate, "records/s", "replication factor 1", samples[1].rate)]


def throughput_rows(samples: dict[int, list[cclient.Produced]]) -> list[Row]:
    """Records/s (with the >= 50 % target) and MB/s of factor 3 against factor 1, medians, and the p99 latency and
    the nodes' CPU per MB of each factor's median sample (its ``cpu``: the nodes' CPU-seconds); none without
    samples."""
    if not samples[1]:
        return []
    rate = {f: statistics.median(s.rate for s in ss) for f, ss in samples.items()}
    middle = {f: median_run(ss, lambda s: s.rate) for f, ss in samples.items()}
    label = f"1 C producer, {VALUE} B values, {PARTITIONS} partitions, flush.messages=1"
    return [
        Row(f"replicated: acks=all produce, replication factor 3 ({label})", rate[3], "records/s",
            "replication factor 1", rate[1], Target(0.5, of_limit=True)),
        Row("  MB/s, replication factor 3", rate[3] * VALUE / 1e6, "MB/s", "replication factor 1",
            rate[1] * VALUE / 1e6),
        Row(f"  latency p99 (produce call to ack, <= {QUEUE:,} queued), factor 3", middle[3].p99 * 1e3, "ms",
            "replication factor 1", middle[1].p99 * 1e3),
        Row("  CPU-milliseconds per MB written, the 3 nodes together, factor 3", _per_mb(middle[3], middle[3].cpu),
            "CPU-ms/MB", "replication factor 1", _per_mb(middle[1], middle[1].cpu)),
        Row("  CPU-milliseconds per MB written, the C producer, factor 3", _per_mb(middle[3], middle[3].client_cpu),
            "CPU-ms/MB", "replication factor 1", _per_mb(middle[1], middle[1].client_cpu)),
    ]


def _per_mb(run: cclient.Produced, cpu_seconds: float) -> float:
    return cpu_seconds * 1e3 / (run.count * VALUE / 1e6)


def _nodes_cpu(running: LocalCluster) -> float:
    """The CPU-seconds every node of ``running`` has used so far."""
    return sum(cpu_seconds(pid) for name, pid in running.pids().items() if name.startswith("node"))


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The rows of the module docstring (the round trips: one interleaved run of many)."""
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
        rates = throughput(running, 1 if quick else repeat, 20_000 if quick else 200_000)
        defaults = defaults_throughput(running, 20_000 if quick else 200_000)
    ms = 1e3
    return [
        Row("replicated: acks=all produce p50, replication factor 3", statistics.median(three) * ms, "ms",
            "replication factor 1", statistics.median(one) * ms),
        Row("replicated: acks=all produce p99, replication factor 3", quantile(three, 0.99) * ms, "ms",
            "replication factor 1", quantile(one, 0.99) * ms),
        *throughput_rows(rates),
        *defaults_rows(defaults),
    ]
