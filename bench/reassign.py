"""Moving a replica (issue 26, "Measured"): how fast a replica a move adds catches up, with and without a replication
throttle (KIP-73), and what the move costs an acks=all producer (``replication.enable=true``, one etcd member,
:func:`bench.cluster.cluster`).

A Kafka-native topic of one partition on all 3 nodes (``min.insync.replicas=2``). Each round: node 3 is moved out of
the partition's replicas (AlterPartitionReassignments to ``[1, 2]``: it completes at once), :data:`MB` MB are written
while it is out (a confluent-kafka producer, acks=all, 10 KiB values in 1 MiB batches), then node 3 is moved back
in (``[1, 2, 3]``: an adding replica, which catches up from the end of its stale copy as any follower) and the time
until node 3 is in the ISR is the catch-up. Bytes moved are node 3's ``kafka_server_brokertopicmetrics_
reassignmentbytesin_total`` over the round (what it copied as an adding replica), so MB/s moved is that over the
catch-up. The first round is unthrottled; before the second, ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` are set to :data:`THROTTLE` bytes/s on every node and the topic's throttled
replica lists to the leaders' and node 3 (as kafka-reassign-partitions ``--throttle`` sets them), with
IncrementalAlterConfigs, and read back with DescribeConfigs. Beside every round, a second producer (acks=all,
idempotent) sends one 100-byte record at a time to the same partition and waits for each acknowledgement: for
:data:`STEADY_S` seconds before the move back in (the steady state), and during it.

Rows: MB/s moved unthrottled and throttled (against the throttle: how close to the rate it ran), and the producer's
p99 during each move against the steady state before it. ``python -m bench --only reassign`` (``--quick``: 20 MB a
round and 3 s of steady state instead of 200 MB and 10 s). Nothing is asserted but that every write is
acknowledged and each catch-up completes within :data:`CATCH_UP_S`.
"""

from __future__ import annotations

import datetime
import threading
import time
import urllib.request

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta
from prometheus_client.parser import text_string_to_metric_families

from bench.cluster import cluster, delivered, quantile, sends
from bench.report import Row
from walgate.admin.kafka_calls import KafkaCalls
from walgate.gateway.cluster_up import LocalCluster

ENABLED = ("--override", "replication.enable=true", "--override", "replica.lag.time.max.ms=2000")
"""replica.lag.time.max.ms: the leader's ISR rounds (half of it) admit the caught-up replica within a second."""
TOPIC = "moved"
MB = 200
THROTTLE = 10_000_000  # bytes/s
STEADY_S = 10.0
CATCH_UP_S = 600.0
VALUE = 10 << 10
MOVED = "kafka_server_brokertopicmetrics_reassignmentbytesin_total"


def _move(bootstrap: str, replicas: list[int]) -> None:
    """Ask for partition 0 of :data:`TOPIC` to be on ``replicas`` (walgate's admin client: confluent-kafka has no
    AlterPartitionReassignments)."""
    with KafkaCalls(bootstrap, {}, 60.0) as calls:
        answer = calls.call(AlterPartitionReassignmentsRequest(
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)), topics=(ReassignableTopic(
                name=TopicName(TOPIC), partitions=(ReassignablePartition(
                    partition_index=i32(0), replicas=tuple(map(BrokerId, replicas))),)),)))
    errors = [p.error_code for t in answer.responses for p in t.partitions if p.error_code != 0]
    if answer.error_code != 0 or errors:
        raise RuntimeError(f"moving {TOPIC}/0 to {replicas} refused: {answer.error_code} {errors}")


def _placed(admin: AdminClient, replicas: set[int], isr: set[int]) -> bool:
    """Whether partition 0's replicas are ``replicas`` and its ISR holds ``isr`` (Metadata)."""
    p = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions[0]
    return set(p.replicas) == replicas and isr <= set(p.isrs)


def _wait(admin: AdminClient, replicas: set[int], isr: set[int]) -> float:
    """Seconds until partition 0 is placed so (polled every 50 ms, at most :data:`CATCH_UP_S`)."""
    start = time.perf_counter()
    while not _placed(admin, replicas, isr):
        if time.perf_counter() - start > CATCH_UP_S:
            raise RuntimeError(f"{TOPIC}/0 not on {sorted(replicas)} with {sorted(isr)} in sync within {CATCH_UP_S} s")
        time.sleep(0.05)
    return time.perf_counter() - start


def metric(running: LocalCluster, node: int, name: str) -> float:
    """The sum of the samples called ``name`` (every label) in node ``node``'s ``/metrics``."""
    with urllib.request.urlopen(running.plan.nodes[node - 1].http_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _write(bootstrap: str, megabytes: int) -> None:
    """``megabytes`` MB of 10 KiB values to partition 0, acks=all, every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                         "message.timeout.ms": 120_000})
    failed: list[object] = []
    value = b"r" * VALUE

    def acknowledged(err: object, _: object) -> None:
        if err is not None:
            failed.append(err)
    for _ in range(megabytes * 1_000_000 // VALUE):
        while True:
            try:
                producer.produce(TOPIC, value, partition=0, on_delivery=acknowledged)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(180) != 0 or failed:
        raise RuntimeError(f"writing {megabytes} MB failed: {failed[:3] or 'not all acknowledged'}")


def _throttle(admin: AdminClient, nodes: list[int], rate: int) -> dict[str, str]:
    """Both rates on every node, the topic's lists as kafka-reassign-partitions sets them (leaders: the current
    replicas; followers: the one being added); the broker configs of node 1 and the topic's as DescribeConfigs
    reads them back."""
    def configs(pairs: dict[str, str]) -> list[ConfigEntry]:
        return [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in pairs.items()]

    rates = {"leader.replication.throttled.rate": str(rate), "follower.replication.throttled.rate": str(rate)}
    lists = {"leader.replication.throttled.replicas": "0:1,0:2", "follower.replication.throttled.replicas": "0:3"}
    resources = [ConfigResource(ResourceType.BROKER, str(n), incremental_configs=configs(rates)) for n in nodes]
    resources.append(ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=configs(lists)))
    for resource in resources:  # (librdkafka takes one BROKER resource a call)
        admin.incremental_alter_configs([resource])[resource].result(timeout=60)
    read = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1"), ConfigResource(ResourceType.TOPIC,
                                                                                            TOPIC)])
    return {k: str(e.value) for future in read.values() for k, e in future.result(timeout=60).items()
            if k in rates or k in lists}


def _round(running: LocalCluster, admin: AdminClient, latency: Producer, megabytes: int,
           steady_s: float) -> tuple[float, float, list[float], list[float]]:
    """One round (the module docstring): (seconds to catch up, bytes node 3 copied as an adding replica, the
    producer's seconds per send at steady state, during the move)."""
    bootstrap = running.plan.bootstrap
    _move(bootstrap, [1, 2])
    _wait(admin, {1, 2}, set())
    _write(bootstrap, megabytes)
    steady = sends(latency, TOPIC, 1, time.perf_counter() + steady_s)
    moved = metric(running, 3, MOVED)
    done, failed, took = threading.Event(), [], []

    def move_in() -> None:
        try:
            _move(bootstrap, [1, 2, 3])
            took.append(_wait(admin, {1, 2, 3}, {3}))
        except BaseException as e:  # handed to the main thread, which raises it
            failed.append(e)
        finally:
            done.set()

    mover = threading.Thread(target=move_in, name="reassign")
    mover.start()
    during = sends(latency, TOPIC, 1, done)
    mover.join()
    if failed:
        raise failed[0]
    return took[0], metric(running, 3, MOVED) - moved, steady, during


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The rows of the module docstring (``repeat`` is not used: one round of each)."""
    megabytes, steady_s = (20, 3.0) if quick else (MB, STEADY_S)
    with cluster(3, *ENABLED) as running:
        bootstrap = running.plan.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})],
                            request_timeout=120)[TOPIC].result(timeout=180)
        latency = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                            "enable.idempotence": True, "message.timeout.ms": 30_000})
        for _ in range(20):  # connected, the leader known and its ISR full before the samples
            delivered(latency, TOPIC, 0, b"warm")
        free = _round(running, admin, latency, megabytes, steady_s)
        try:
            described = _throttle(admin, [n.node_id for n in running.plan.nodes], THROTTLE)
        except KafkaException as e:
            raise RuntimeError(f"setting the throttle failed: {e}") from None
        held = _round(running, admin, latency, megabytes, steady_s)
    print(f"bench: reassign: {megabytes} MB written a round; unthrottled: {free[1] / 1e6:.1f} MB moved in "
          f"{free[0]:.2f} s; throttled at {THROTTLE / 1e6:g} MB/s: {held[1] / 1e6:.1f} MB in {held[0]:.2f} s; "
          f"described: {described}", flush=True)
    ms = 1e3
    rows = [Row("reassign: MB/s moved to an adding replica, unthrottled", free[1] / 1e6 / free[0], "MB/s"),
            Row("reassign: MB/s moved to an adding replica, throttled", held[1] / 1e6 / held[0], "MB/s",
                "the throttle", THROTTLE / 1e6)]
    for name, (_, _, steady, during) in (("unthrottled", free), ("throttled", held)):
        rows.append(Row(f"reassign: acks=all produce p99 during the {name} move", quantile(during, 0.99) * ms, "ms",
                        "steady state", quantile(steady, 0.99) * ms))
    return rows
