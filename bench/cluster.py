"""Cluster benchmarks: clusters of 1, 2 and 3 ``walgate serve --cluster`` nodes, each over one etcd member, started
as ``walgate cluster up`` starts them (:class:`walgate.gateway.cluster_up.LocalCluster`, on loopback addresses of
their own). The three run at once and are measured in turns (the producer runs cluster by cluster, each repeat;
single samples alternately), so that every number has its one-node counterpart from the same minutes of this
shared machine.

* **Scale-out**: a topic with one partition per producer (3), placed over the cluster's nodes (all on the one node
  of a 1-node cluster); three producer processes at once (confluent-kafka, 1 KiB values, acks=1), each writing its
  own partition: aggregate records/s, against the 1-node cluster's. This machine has 2 cores shared by the
  producers and the nodes, so more nodes cannot add much: a node is a Python process bound by one core, and the
  producers take the rest (the issue's >= 1.5x is for a machine with a core per node).
* **Routing cost** (3 nodes): a producer bootstrapped on node 1 writing to a partition on node 2 (Metadata names
  node 2; the client connects there) against one bootstrapped on node 2: the time from a new producer to its first
  acknowledged record (the redirect: one more connection), and the p50 of one-record produce round trips once
  connected; Metadata p50 and p99 (AdminClient ``list_topics``) of the 3-node cluster against the 1-node one.
* **Control-plane load** (3 nodes): CreateTopics of one-partition topics, ten a request, in turns through the
  controller (it appends the records itself), through another node (a proposal the controller appends) and, for
  the baseline, on a single node without a cluster, a third of the topics each: topics (catalog records appended
  through the record stream) per second against the single node's, and etcd's revisions (one per etcd write) per
  topic; then the keys and bytes (keys + values) under the cluster's prefix per 1,000 topics (the controller folds
  records into ``catalog/snapshot`` every 1000). At steady state (the three producers writing, no DDL): etcd
  revisions per second, which are the control plane's writes (lease keep-alives write none).

``python -m bench --only cluster`` runs it (``--quick``: fewer records, 150 topics instead of 1,500).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.produce import produce
from bench.report import Row, Target
from bench.servers import cpu_seconds, walgate
from bench.together import Gate, at_once
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import parse_endpoints
from walgate.gateway.cluster_up import LocalCluster, free_loopback_block, loopback_hosts, plan

PRODUCERS = 3
VALUE = 1024
PORTS = (9092, 6041, 2379, 2380)
CLUSTER_PREFIX = b"/walgate/walgate/"  # cluster.name's default


@contextlib.contextmanager
def cluster(nodes: int) -> Iterator[LocalCluster]:
    """``nodes`` nodes and one etcd member on a free loopback block, data in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="walgate-bench-cluster-") as tmp:
        first = free_loopback_block(nodes, PORTS, random.Random(os.getpid() ^ time.time_ns()))
        layout = plan(nodes, 1, loopback_hosts(first, nodes), kafka_port=9092, http_port=6041, etcd_port=2379)
        with LocalCluster(layout, Path(tmp)) as running:
            yield running


def create(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics], request_timeout=120).values():
        future.result(timeout=180)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p.id: p.leader for p in meta.topics[topic].partitions.values()}


def partition_producer(bootstrap: str, topic: str, partition: int, count: int, gate: Gate) -> tuple[int, float]:
    """:data:`bench.together.Work`: ``count`` 1 KiB values to one partition, acks=1."""
    acked, _ = produce(bootstrap, topic, count, VALUE, "1", gate.open, partition)
    return acked, time.perf_counter()


def produce_rate(running: LocalCluster, topic: str, count: int) -> tuple[float, float]:
    """(records/s, the nodes' CPU-seconds per million records) of :data:`PRODUCERS` processes at once, one
    partition each."""
    nodes = [pid for name, pid in running.pids().items() if name.startswith("node")]
    cpu = sum(map(cpu_seconds, nodes))
    argsets = [(running.plan.bootstrap, topic, p, count // PRODUCERS) for p in range(PRODUCERS)]
    with at_once(partition_producer, argsets, nodes[0]) as tally:
        pass
    return tally.rate, (sum(map(cpu_seconds, nodes)) - cpu) / tally.count * 1e6


def first_ack_seconds(bootstrap: str, topic: str, partition: int) -> float:
    """From a new producer to its first acknowledged record (Metadata, the leader's connection, the produce)."""
    start = time.perf_counter()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    delivered(p, topic, partition, b"first")
    return time.perf_counter() - start


def delivered(p: Producer, topic: str, partition: int, value: bytes) -> None:
    """Produce ``value`` and wait for its acknowledgement; raises when it failed."""
    errors: list[object] = []
    p.produce(topic, value, partition=partition, on_delivery=lambda err, msg: err and errors.append(err))
    if p.flush(30) != 0 or errors:
        raise RuntimeError(f"produce to {topic}[{partition}] failed: {errors or 'not answered within 30 s'}")


def interleaved(samples: int, *ops: Callable[[], object]) -> list[list[float]]:
    """Seconds of each of ``ops`` over ``samples`` rounds, taken in turns (ABAB...), so that a load change on the
    machine touches every one alike."""
    out: list[list[float]] = [[] for _ in ops]
    for _ in range(samples):
        for times, op in zip(out, ops):
            start = time.perf_counter()
            op()
            times.append(time.perf_counter() - start)
    return out


def connected(bootstrap: str, topic: str, partition: int) -> Callable[[], object]:
    """One acknowledged 100-byte record (acks=1) through a producer that is already connected."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    delivered(p, topic, partition, b"warm")
    return lambda: delivered(p, topic, partition, b"v" * 100)


def metadata(bootstrap: str) -> Callable[[], object]:
    """One Metadata request (all topics) through a connected AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)
    return lambda: admin.list_topics(timeout=30)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def etcd_state(running: LocalCluster) -> tuple[int, int, int]:
    """(etcd's revision, keys under the cluster's prefix, their keys' and values' bytes)."""
    async def read() -> tuple[int, int, int]:
        session = EtcdSession(parse_endpoints(running.plan.etcd_spec))
        try:
            revision, kvs = await session.get_prefix(CLUSTER_PREFIX)
            return revision, len(kvs), sum(len(kv.key) + len(kv.value) for kv in kvs)
        finally:
            await session.close()

    return asyncio.run(read())


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The three clusters run at once and are measured in turns (module docstring)."""
    count = 30_000 if quick else 150_000
    with contextlib.ExitStack() as stack:
        clusters = {n: stack.enter_context(cluster(n)) for n in (1, 2, 3)}
        for running in clusters.values():
            create(running.plan.bootstrap, ["scale"], PRODUCERS)
        runs: dict[int, list[tuple[float, float]]] = {n: [] for n in clusters}
        for _ in range(repeat):
            for n, running in clusters.items():
                runs[n].append(produce_rate(running, "scale", count))
        rate = {n: statistics.median(r for r, _ in results) for n, results in runs.items()}
        cpu = {n: statistics.median(c for _, c in results) for n, results in runs.items()}
        rows = [Row(f"cluster scale-out: produce, {PRODUCERS} producers 1 KiB acks=1, {n} nodes (2 cores)", rate[n],
                    "records/s", "1 node", rate[1], Target(1.5, of_limit=True)) for n in (2, 3)]
        rows += [Row(f"  the nodes' CPU-seconds per million records, {n} nodes", cpu[n], "CPU-s", "1 node", cpu[1])
                 for n in (2, 3)]
        rows += _routing_rows(clusters[3], clusters[1], quick)
        single = stack.enter_context(walgate(Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="walgate-bench-single-")))))
        rows += _control_plane_rows(clusters[3], single.bootstrap, 150 if quick else 1500, count)
    return rows


def _routing_rows(three: LocalCluster, one: LocalCluster, quick: bool) -> list[Row]:
    node1, node2 = (n.bootstrap for n in three.plan.nodes[:2])
    create(three.plan.bootstrap, ["route"], 3)
    [partition] = [p for p, leader in leaders(node1, "route").items() if leader == 2]
    tries, samples = (5, 300) if quick else (11, 1000)
    routed, direct = interleaved(tries, lambda: first_ack_seconds(node1, "route", partition),
                                 lambda: first_ack_seconds(node2, "route", partition))
    routed_rt, direct_rt = interleaved(samples, connected(node1, "route", partition),
                                       connected(node2, "route", partition))
    meta3, meta1 = interleaved(samples, metadata(three.plan.bootstrap), metadata(one.plan.bootstrap))
    ms = 1e3
    return [
        Row("cluster routing: new producer to first ack, bootstrapped on node 1, partition on node 2",
            statistics.median(routed) * ms, "ms", "bootstrapped on node 2", statistics.median(direct) * ms),
        Row("cluster routing: produce p50 once connected, via node 1's Metadata", statistics.median(routed_rt) * ms,
            "ms", "bootstrapped on node 2", statistics.median(direct_rt) * ms, Target(1.1, at_most=True, of_limit=True)),
        Row("cluster routing: Metadata p50, 3 nodes", statistics.median(meta3) * ms, "ms", "1 node",
            statistics.median(meta1) * ms),
        Row("cluster routing: Metadata p99, 3 nodes", quantile(meta3, 0.99) * ms, "ms", "1 node",
            quantile(meta1, 0.99) * ms, Target(1.1, at_most=True, of_limit=True)),
    ]


def controller(running: LocalCluster) -> int:
    """The controller's node id, as node 1's ``SHOW DNODES`` names it."""
    request = urllib.request.Request(running.plan.nodes[0].http_url + "/rest/sql", data=b"SHOW DNODES", method="POST")
    with urllib.request.urlopen(request, timeout=30) as r:
        return next(row[0] for row in json.load(r)["data"] if row[3] == "controller")


def _control_plane_rows(running: LocalCluster, single: str, topics: int, count: int) -> list[Row]:
    """CreateTopics through the controller (appended directly), through another node (a proposal the controller
    appends) and, beside them, on a single node without a cluster (``single``: its bootstrap), a third of the topics
    each, ten a request, in turns; etcd's writes per topic on each cluster path, its keys and bytes per 1,000 topics,
    and its writes per second at steady state."""
    leader = controller(running)
    paths = {"the controller": next(n for n in running.plan.nodes if n.node_id == leader).bootstrap,
             "another node": next(n for n in running.plan.nodes if n.node_id != leader).bootstrap,
             "a single node (no cluster)": single}
    seconds, writes = dict.fromkeys(paths, 0.0), dict.fromkeys(paths, 0)
    first = etcd_state(running)
    per_path = topics // len(paths)
    for k in range(0, per_path, 10):
        for i, (path, bootstrap) in enumerate(paths.items()):
            revision = etcd_state(running)[0]
            start = time.perf_counter()
            create(bootstrap, [f"t{i}-{j:05d}" for j in range(k, min(k + 10, per_path))], 1)
            seconds[path] += time.perf_counter() - start
            writes[path] += etcd_state(running)[0] - revision
    last = etcd_state(running)
    per_k = 1000 / (2 * per_path)  # the topics the cluster holds
    steady_start, steady_revision = time.perf_counter(), etcd_state(running)[0]
    produce_rate(running, "scale", count)
    steady = (etcd_state(running)[0] - steady_revision) / (time.perf_counter() - steady_start)
    baseline = per_path / seconds["a single node (no cluster)"]
    rows = [Row(f"cluster control plane: CreateTopics through {path}, 10 a request", per_path / seconds[path],
                "topics/s", "a single node (no cluster)", baseline) for path in list(paths)[:2]]
    rows += [Row(f"  etcd writes (revisions) per topic created through {path}", writes[path] / per_path, "writes")
             for path in list(paths)[:2]]
    return rows + [
        Row("  etcd keys under the cluster's prefix per 1,000 topics", (last[1] - first[1]) * per_k, "keys"),
        Row("  etcd bytes (keys + values) per 1,000 topics", (last[2] - first[2]) * per_k / 1e3, "kB"),
        Row("  etcd writes per second while 3 producers write (no DDL)", steady, "writes/s"),
    ]
